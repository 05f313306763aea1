package webkit

import (
	"embed"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/securecookie"

	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/store"
)

//go:embed static/waiting.js static/fetch.js static/opsgate.css
var static embed.FS

var staticTypes = map[string]string{
	"waiting.js":  "text/javascript; charset=utf-8",
	"fetch.js":    "text/javascript; charset=utf-8",
	"opsgate.css": "text/css; charset=utf-8",
}

// Handler serves the kit's browser-facing routes under Kit.BasePath
// (default /_opsgate/); mount it there:
//
//	mux.Handle(kit.BasePath, kit.Handler()) // or DefaultBasePath
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
func (k *Kit) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})
}

// serveStatus answers the status route: authorised by the join cookie,
// only for refs this browser's Session can approve (§3, §8.2: a ref is not a
// credential), only the four states of §6 "Looking up an approved
// operation". It never returns the operation.
func (k *Kit) serveStatus(w http.ResponseWriter, r *http.Request) {
	pages.NoStore(w.Header())
	notFound := func() { pages.WriteJSON(w, http.StatusNotFound, map[string]string{"error": "not_found"}) }
	s, joined := k.sessions().SessionOf(r)
	if !joined {
		notFound()
		return
	}
	q := r.URL.Query()
	ref := q.Get("ref")
	if h := q.Get("w"); h != "" && len(h) <= 4096 {
		if err := securecookie.DecodeMulti(waitHandleName, h, &ref, k.sealCodecs()...); err != nil {
			notFound()
			return
		}
	}
	if !store.ValidRef(ref) {
		notFound()
		return
	}
	rec, found, err := k.store().Lookup(r.Context(), s.Owner(), ref, k.now())
	if err != nil {
		k.observer().StoreError(r.Context(), "lookup", err)
		k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: store failed",
			slog.String("op", "lookup"), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", strconv.Itoa(int(k.retryAfter().Seconds())))
		pages.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily_unavailable"})
		return
	}
	// §3: same agent, same User (Lookup's part) and the same account.
	if !found || rec.Owner != s.Owner() || rec.Expired {
		notFound()
		return
	}
	switch rec.Status {
	case store.Waiting, store.Approved, store.Performing, store.Performed:
		pages.WriteJSON(w, http.StatusOK, map[string]string{"status": string(rec.Status)})
	default:
		notFound()
	}
}
