package webkit

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
)

//go:embed static/waiting.js static/fetch.js static/opsgate.css
var static embed.FS

var staticTypes = map[string]string{
	"waiting.js":  "text/javascript; charset=utf-8",
	"fetch.js":    "text/javascript; charset=utf-8",
	"opsgate.css": "text/css; charset=utf-8",
}

// statusHeader names, on the Gate's JSON 403, the status route a script
// asks (status?w=<handle>, as the waiting page's data-opsgate-status):
// opsgate.fetch reads it (W93).
const statusHeader = "X-Opsgate-Status"

// ServeHTTP serves the Kit's browser-facing routes under /_opsgate/:
// endpoint.Mount serves them, beside the operations endpoint and the
// join; a website that routes each of a Mount's paths itself mounts the
// Kit at /_opsgate/ (as a prefix).
//
// Routes:
//   - GET waiting.js: the waiting page's auto-continue (§6 W93).
//   - GET fetch.js: opsgate.fetch, for fetch-driven pages.
//   - GET opsgate.css: the waiting page's style.
//   - GET status?w=<handle> or status?ref=<ref>: {"status": …} of an
//     operation this browser's Session can approve (§3), one of waiting,
//     approved, performing, performed; 404 for anything else.
//
// Files are served from the binary, so a Content-Security-Policy of
// script-src 'self' holds: the kit writes no inline script or style.
func (k *Kit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := k.Check(); err != nil {
		log := slog.Default()
		if k != nil {
			log = k.logger()
		}
		log.LogAttrs(r.Context(), slog.LevelError, "opsgate: unusable Kit", slog.String("error", err.Error()))
		http.Error(w, "the kit is not configured", http.StatusInternalServerError)
		return
	}
	{
		name, ok := strings.CutPrefix(r.URL.Path, k.basePath())
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if name == "status" {
			k.serveStatus(w, r)
			return
		}
		typ, ok := staticTypes[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", typ)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "public, max-age=300")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		if r.Method == http.MethodHead {
			return
		}
		w.Write(b)
	}
}

// serveStatus answers the status route: authorised by the join cookie,
// only for refs this browser's Session can approve (§3, §8.2: a ref is not a
// credential), only the four states of §6 "Looking up an approved
// operation". It never returns the operation.
func (k *Kit) serveStatus(w http.ResponseWriter, r *http.Request) {
	r, sp := spans.Begin(r, k.Observer, "opsgate.status", spans.Labels{Route: routeStatus})
	defer sp.End(spans.Labels{}, nil)
	respond.NoStore(w.Header())
	notFound := func() {
		k.observe(r.Context(), Event{Route: routeStatus, Outcome: "not_found"})
		respond.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "not_found"})
	}
	unavailable := func(op string, err error) {
		k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: store failed",
			slog.String("op", op), slog.String("error", err.Error()))
		k.observe(r.Context(), Event{Route: routeStatus, Outcome: "unavailable"})
		w.Header().Set("Retry-After", strconv.Itoa(int(k.retryAfter().Seconds())))
		respond.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily_unavailable"})
	}
	s, unbound, st := k.bindingOf(r)
	if st != bindOK {
		notFound()
		return
	}
	q := r.URL.Query()
	page := waitHandle{Ref: q.Get("ref")}
	if h := q.Get("w"); h != "" && len(h) <= 4096 {
		var ok bool
		if page, ok = k.seal.open(h, k.now()); !ok {
			notFound()
			return
		}
	}
	ref := page.Ref
	if !storekit.ValidRef(ref) {
		notFound()
		return
	}
	// A copy of a join cookie that Unbind ended authorises nothing.
	if ended, err := k.unbound(r.Context(), unbound); err != nil {
		unavailable("marked", err)
		return
	} else if ended {
		notFound()
		return
	}
	rec, found, err := k.store().Lookup(r.Context(), s.Owner(), ref, k.now())
	if err != nil {
		unavailable("lookup", err)
		return
	}
	// §3: same agent, same User (Lookup's part) and the same account.
	if !found || rec.Owner != s.Owner() || rec.Expired {
		notFound()
		return
	}
	status := rec.Status
	if status == storedriver.StatusApproved && !approvalApplies(rec, page) {
		// W93: the waiting page repeats its request on "approved", so it
		// hears it only when an approval applies to its own request (the
		// same terms); an approval of other terms for the same operation
		// would make it resubmit, get 403 again, and loop.
		status = storedriver.StatusWaiting
	}
	switch status {
	case storedriver.StatusWaiting, storedriver.StatusApproved, storedriver.StatusPerforming, storedriver.StatusPerformed:
		k.observe(r.Context(), Event{Route: routeStatus, Outcome: string(status)})
		respond.WriteJSON(w, http.StatusOK, map[string]string{"status": string(status)})
	default:
		notFound()
	}
}

// waitHandle is what a waiting page's status URL carries, sealed: its ref,
// and the digest of its request's terms.
type waitHandle struct {
	Ref   string `json:"r"`
	Terms string `json:"t,omitempty"`
}

// termsDigest identifies canonical terms in a wait handle.
func termsDigest(terms []byte) string {
	sum := sha256.Sum256(terms)
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// approvalApplies reports whether one of rec's approvals that waits for the
// browser would be taken by the page's request, as Take would judge it
// (§6 check 3): an approval of the page's own revision, or of the current
// revision when its terms are the page's.
func approvalApplies(rec storedriver.Found, page waitHandle) bool {
	_, rev, _ := storekit.SplitRef(page.Ref) // a sealed ref's seal is not its revision
	sameTerms := page.Terms != "" && termsDigest(rec.Current.Terms) == page.Terms
	for _, a := range rec.Approvals {
		if !a.UsedAt.IsZero() {
			continue
		}
		if a.Revision == rev || (a.Revision == rec.Current.Revision && sameTerms) {
			return true
		}
	}
	return false
}
