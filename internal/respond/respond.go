// Package respond holds what the kit's answers share: content negotiation
// (a page, or JSON for a script), the no-store headers, JSON bodies, and
// the waiting page's view carried to a website's own Kit.Refused.
package respond

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opsgate/opsgate/internal/view"
)

// NoStore marks a response as never to be stored (§4 W68) and varies it on
// what content negotiation reads.
func NoStore(h http.Header) {
	h["Cache-Control"] = noStore
	if len(h["Vary"]) == 0 {
		h["Vary"] = varyBoth
		return
	}
	addVary(h, "Accept")
	addVary(h, "Sec-Fetch-Dest")
}

// Header values the kit's answers share: set by assignment, they cost no
// allocation per answer. http.Header.Add and Set replace or copy them,
// never write into them.
var (
	noStore  = []string{"no-store"}
	nosniff  = []string{"nosniff"}
	typeJSON = []string{"application/json"}
	varyBoth = []string{"Accept", "Sec-Fetch-Dest"}
)

func addVary(h http.Header, name string) {
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, name) {
				return
			}
		}
	}
	h.Add("Vary", name)
}

// WantsJSON reports whether r accepts JSON over HTML (§4 W66): a page load
// or form submission gets HTML (W65), a script's fetch that asks for JSON
// gets JSON. When Accept rates both equally (such as "*/*", fetch's
// default), a request the browser marks as not a navigation
// (Sec-Fetch-Dest: empty) is a script's and gets JSON.
func WantsJSON(r *http.Request) bool {
	accept := r.Header.Values("Accept")
	if len(accept) == 0 {
		return r.Header.Get("Sec-Fetch-Dest") == "empty"
	}
	j, js := quality(accept, "application", "json")
	h, hs := quality(accept, "text", "html")
	switch {
	case j != h:
		return j > h
	case j == 0:
		return false
	case js != hs: // named beats a wildcard: "application/json, */*"
		return js > hs
	}
	return r.Header.Get("Sec-Fetch-Dest") == "empty"
}

// quality returns the q-value Accept gives typ/sub, in thousandths, by the
// most specific matching range (RFC 9110 §12.5.1), and how specific that
// range is: 2 for typ/sub, 1 for typ/*, 0 for */*, -1 for none.
func quality(accept []string, typ, sub string) (q, specificity int) {
	best, spec := 0, -1
	for _, line := range accept {
		for item := range strings.SplitSeq(line, ",") {
			mt, params, _ := strings.Cut(item, ";")
			t, s, _ := strings.Cut(strings.TrimSpace(mt), "/")
			t, s = strings.TrimSpace(t), strings.TrimSpace(s)
			var sp int
			switch {
			case strings.EqualFold(t, typ) && strings.EqualFold(s, sub):
				sp = 2
			case strings.EqualFold(t, typ) && s == "*":
				sp = 1
			case t == "*" && s == "*":
				sp = 0
			default:
				continue
			}
			if sp < spec {
				continue
			}
			q := qvalue(params)
			if sp > spec || q > best {
				best, spec = q, sp
			}
		}
	}
	return best, spec
}

func qvalue(params string) int {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > 1 {
			return 0
		}
		return int(f * 1000)
	}
	return 1000
}

// RetryAfter is the Retry-After header's value for d: whole seconds, at
// least 1 (§7 W143).
func RetryAfter(d time.Duration) string { return strconv.Itoa(max(int(d/time.Second), 1)) }

// BadRequest answers 400 invalid_request for a request the website's
// describe could not read; detail is the website's own message.
func BadRequest(w http.ResponseWriter, detail string) {
	NoStore(w.Header())
	WriteJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request", "detail": detail})
}

// TooLarge answers 413 for a gated request body over the limit.
func TooLarge(w http.ResponseWriter) {
	NoStore(w.Header())
	WriteJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "request_too_large"})
}

// ExtensionRequired refuses a gated request whose Session did not declare
// operations v3 (§2 W11, W12; webkit/RULES.md choice 5). The status is 403:
// the request is understood and refused for what it lacks, as spec 3.3
// refuses a missing extension; no operation is returned.
// why, when not "", goes in error_description (Kit.ExplainRefusals).
func ExtensionRequired(w http.ResponseWriter, why string) {
	NoStore(w.Header())
	body := map[string]string{"error": "extension_required", "extension": "operations"}
	if why != "" {
		body["error_description"] = why
	}
	WriteJSON(w, http.StatusForbidden, body)
}

// WriteJSON writes v as JSON with status; for the kit's small answers.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":"server_error"}`, http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h["Content-Type"] = typeJSON
	h["X-Content-Type-Options"] = nosniff
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

type waitingKey struct{}

// WithWaiting is ctx carrying the waiting page's view, for WaitingOf: the
// Gate sets it before Kit.Refused runs.
func WithWaiting(ctx context.Context, v *view.Waiting) context.Context {
	return context.WithValue(ctx, waitingKey{}, v)
}

// WaitingOf returns the view WithWaiting put in r's context.
func WaitingOf(r *http.Request) (view.Waiting, bool) {
	v, ok := r.Context().Value(waitingKey{}).(*view.Waiting)
	if !ok {
		return view.Waiting{}, false
	}
	return *v, true
}

// BasePath is where the Kit's browser-facing routes are served
// (Kit.ServeHTTP: its scripts, stylesheet and status route), by
// endpoint.Mount.
const BasePath = "/_opsgate/"

// The front-end frameworks whose requests get the kit's answer in their own
// terms (Framework).
const (
	// HTMX is a request htmx sent (HX-Request: true): it swaps the
	// answer's HTML into the page, so the answer is a fragment (the
	// waiting card), not a page.
	HTMX = "htmx"
	// Turbo is a request Turbo (Hotwire) sent for a form's submission
	// (Accept names text/vnd.turbo-stream.html) or for a frame
	// (Turbo-Frame): the answer is a Turbo Stream that puts the card in
	// the frame, or over the page.
	Turbo = "turbo"
)

// turboStream is the media type of a Turbo Stream.
const turboStream = "text/vnd.turbo-stream.html"

// Framework names the front-end framework that sent r and shows the
// answer in its own terms: HTMX, Turbo, or "" for a page load, a form's
// own submission or a script's fetch (a page, or JSON, per WantsJSON).
// htmx wins over Turbo on a page that has both: its header names the
// request's sender.
func Framework(r *http.Request) string {
	h := r.Header
	if v := h["Hx-Request"]; len(v) > 0 && v[0] == "true" {
		return HTMX
	}
	if len(h["Turbo-Frame"]) > 0 {
		return Turbo
	}
	for _, line := range h["Accept"] {
		for item := range strings.SplitSeq(line, ",") {
			mt, _, _ := strings.Cut(item, ";")
			if strings.EqualFold(strings.TrimSpace(mt), turboStream) {
				return Turbo
			}
		}
	}
	return ""
}

// TurboFrame is the id of the Turbo frame r came from (Turbo-Frame), or
// "" for none.
func TurboFrame(r *http.Request) string { return strings.TrimSpace(r.Header.Get("Turbo-Frame")) }

// TurboStreamType is the Content-Type of the kit's Turbo Stream answers.
const TurboStreamType = turboStream + "; charset=utf-8"
