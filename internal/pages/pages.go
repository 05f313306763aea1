// Package pages writes the Gate's browser-facing responses (the specification
// §4 "Websites"): the 403 waiting page with its Continue control, the JSON
// body for the website's own scripts, extension_required, and the 503 that
// says "try again" without saying "failed" (§7). It chooses between HTML and
// JSON from the request (content negotiation) and sets the no-store headers.
//
// Nothing here ever writes the operation, its revision or its ref into a
// body (§4 W64): the Personal Agent gets the operation only from endpoint.
package pages

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
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
	typeHTML = []string{"text/html; charset=utf-8"}
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

// WriteWaiting answers a gated request that waits for approval: 403 with the
// waiting page (W65) or {"error":"approval_required"} (W66). The caller sets
// Poppy-Operation before; this sets Cache-Control and Vary (W68).
func WriteWaiting(w http.ResponseWriter, r *http.Request, v Waiting) {
	NoStore(w.Header())
	if WantsJSON(r) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "approval_required"})
		return
	}
	writeHTML(w, r.Context(), http.StatusForbidden, WaitingPage(v))
}

// WriteExtensionRequired refuses a gated request whose Session did not
// declare operations v3 (§2 W11, W12; webkit/RULES.md choice 5). The status is
// 403: the request is understood and refused for what it lacks, as spec 3.3
// refuses a missing extension; no operation is returned. A script gets
// {"error":"extension_required","extension":"operations"}, a page load a
// page that says so (never JSON shown as a page).
func WriteExtensionRequired(w http.ResponseWriter, r *http.Request, v Unavailable) {
	NoStore(w.Header())
	if WantsJSON(r) {
		body := map[string]string{"error": "extension_required", "extension": "operations"}
		if v.Why != "" {
			body["error_description"] = v.Why
		}
		writeJSON(w, http.StatusForbidden, body)
		return
	}
	writeHTML(w, r.Context(), http.StatusForbidden, ExtensionRequiredPage(v))
}

// WriteUnavailable answers 503 with Retry-After (§7 W143): the store is
// down or the operation is being performed. Nothing was performed, and the
// answer never says the action failed (W142).
func WriteUnavailable(w http.ResponseWriter, r *http.Request, retryAfter time.Duration, v Unavailable) {
	write503(w, r, retryAfter, "temporarily_unavailable", v.Why, UnavailablePage(v))
}

// WriteOutcomeUnknown answers 503 with Retry-After for an action whose
// outcome is not known yet: the website's handler failed or panicked while
// performing it (§7 W142, W143). It may have taken effect, so the answer
// never says it failed; the operation stays performing until the website
// knows, and a retry never performs it twice.
func WriteOutcomeUnknown(w http.ResponseWriter, r *http.Request, retryAfter time.Duration, v Unavailable) {
	write503(w, r, retryAfter, "outcome_unknown", v.Why, OutcomeUnknownPage(v))
}

// WriteRateLimited answers 429 with Retry-After for a gated request that
// would open one operation more than the owner's or the agent's cap
// (webkit/RULES.md "Bounded work"): nothing was performed or issued.
func WriteRateLimited(w http.ResponseWriter, r *http.Request, retryAfter time.Duration, v Unavailable) {
	writeRetry(w, r, http.StatusTooManyRequests, retryAfter, "rate_limited", v.Why, RateLimitedPage(v))
}

// WriteJoinInvalid answers 403 join_invalid: the browser's join cookie
// can't be accepted, so nothing was done and the agent joins it again
// (webkit.ErrJoinInvalid). A script gets the code, a browser the page.
func WriteJoinInvalid(w http.ResponseWriter, r *http.Request, v Unavailable) {
	writeRefused(w, r, "join_invalid", "This browser's join to your personal agent can't be accepted any more: join it again. Nothing was done.", v.Why, JoinInvalidPage(v))
}

// WriteOwnLogin answers 403 confirmation_required: the browser has the
// website's own login, so the action is confirmed on the website, not by
// the agent (§4 W56, webkit.ErrOwnLogin). Nothing was done.
func WriteOwnLogin(w http.ResponseWriter, r *http.Request, v Unavailable) {
	writeRefused(w, r, "confirmation_required", "This browser is signed in to your own account on this site: confirm the action on the site itself. Nothing was done.", v.Why, OwnLoginPage(v))
}

// writeRefused answers 403: {"error": code, "message": message} for a
// script (and error_description: why, when not ""), the page for a
// browser.
func writeRefused(w http.ResponseWriter, r *http.Request, code, message, why string, page templ.Component) {
	NoStore(w.Header())
	if WantsJSON(r) {
		body := map[string]string{"error": code, "message": message}
		if why != "" {
			body["error_description"] = why
		}
		writeJSON(w, http.StatusForbidden, body)
		return
	}
	writeHTML(w, r.Context(), http.StatusForbidden, page)
}

// write503 answers 503 with Retry-After: see writeRetry.
func write503(w http.ResponseWriter, r *http.Request, retryAfter time.Duration, code, why string, page templ.Component) {
	writeRetry(w, r, http.StatusServiceUnavailable, retryAfter, code, why, page)
}

// writeRetry answers status with Retry-After (whole seconds, at least 1):
// the error code (and error_description: why, when not "") for a script,
// the page for a browser.
func writeRetry(w http.ResponseWriter, r *http.Request, status int, retryAfter time.Duration, code, why string, page templ.Component) {
	NoStore(w.Header())
	w.Header().Set("Retry-After", RetryAfter(retryAfter))
	if WantsJSON(r) {
		body := map[string]string{"error": code}
		if why != "" {
			body["error_description"] = why
		}
		writeJSON(w, status, body)
		return
	}
	writeHTML(w, r.Context(), status, page)
}

// RetryAfter is the Retry-After header's value for d: whole seconds, at
// least 1 (§7 W143).
func RetryAfter(d time.Duration) string { return strconv.Itoa(max(int(d/time.Second), 1)) }

// WriteBadRequest answers 400 invalid_request for a request the website's
// describe could not read; detail is the website's own message.
func WriteBadRequest(w http.ResponseWriter, detail string) {
	NoStore(w.Header())
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request", "detail": detail})
}

// WriteTooLarge answers 413 for a gated request body over the limit.
func WriteTooLarge(w http.ResponseWriter) {
	NoStore(w.Header())
	writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "request_too_large"})
}

// WriteJSON writes v as JSON with status; for the kit's small answers.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

func writeJSON(w http.ResponseWriter, status int, v any) {
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

func writeHTML(w http.ResponseWriter, ctx context.Context, status int, c templ.Component) {
	var buf bytes.Buffer
	// A client that has gone still gets the kit's answer written, not a
	// 500: templ stops rendering once its context is done.
	if ctx.Err() != nil { // only then: WithoutCancel costs allocations per page
		ctx = context.WithoutCancel(ctx)
	}
	if err := c.Render(ctx, &buf); err != nil {
		http.Error(w, "server error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h["Content-Type"] = typeHTML
	h["X-Content-Type-Options"] = nosniff
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
