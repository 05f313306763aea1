// Package pages writes the kit's answers to a browser's request that the
// Gate (package webkit) or the gateway (endpoint/gateway) does not hand to
// the website's handler (§4 "Websites", §7): the waiting page with its
// Continue control (403 approval_required), and every other refusal
// ("try again shortly", "not known yet", "too many waiting", "join
// again", "confirm on the site"). Each is answered in the form its sender
// shows: a page for a navigation or a form's submission, JSON for a
// script that accepts JSON (W66); never stored (W68).
//
// Nothing here ever writes the operation, its revision or its ref into a
// body (§4 W64): the Personal Agent gets the operation only from the
// endpoint. The pages are templ components in package templates, in the
// website's templates.Chrome.
package pages

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/a-h/templ"

	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/templates"
)

// Waiting answers a gated request that waits for approval: 403 with the
// waiting page (W65), or {"error":"approval_required"} for a script
// (W66). The caller has set Poppy-Operation (W53); Waiting sets
// Cache-Control and Vary (W68).
func Waiting(w http.ResponseWriter, r *http.Request, v view.Waiting, c templates.Chrome) {
	respond.NoStore(w.Header())
	if respond.WantsJSON(r) {
		respond.WriteJSON(w, http.StatusForbidden, map[string]string{"error": "approval_required"})
		return
	}
	writeHTML(w, r.Context(), http.StatusForbidden, templates.WaitingPage(v, c))
}

// Refuse answers any other refusal with status: a script gets
// {"error": code, "message": …} (the notice's text, and its Why as
// error_description), a browser the notice's page. A caller answering 503 or 429 sets Retry-After first
// (§7 W143).
func Refuse(w http.ResponseWriter, r *http.Request, status int, code string, n view.Notice, c templates.Chrome) {
	respond.NoStore(w.Header())
	if respond.WantsJSON(r) {
		body := map[string]string{"error": code, "message": strings.Join(n.Text, " ")}
		if n.Why != "" {
			body["error_description"] = n.Why
		}
		respond.WriteJSON(w, status, body)
		return
	}
	writeHTML(w, r.Context(), status, templates.NoticePage(n, c))
}

// WaitingOf returns the waiting page's view while the Gate refuses a
// request with webkit.ErrApprovalRequired, for a website's own
// Kit.Refused that renders templates.WaitingCard in its own layout; false
// for any other request.
func WaitingOf(r *http.Request) (view.Waiting, bool) {
	return respond.WaitingOf(r)
}

// Header values every page shares: set by assignment, they cost no
// allocation per answer.
var (
	typeHTML = []string{"text/html; charset=utf-8"}
	nosniff  = []string{"nosniff"}
)

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
