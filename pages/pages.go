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
	"html"
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
// (W66). A framework's request gets the waiting card in the framework's
// terms, still 403: htmx (HX-Request) the card as a fragment, which htmx
// swaps where it would have swapped the answer (HX-Reselect picks the
// card, whatever the element's hx-select); Turbo a Turbo Stream that puts
// the card in the request's frame, or over the page. The caller has set
// Poppy-Operation (W53); Waiting sets Cache-Control and Vary (W68).
func Waiting(w http.ResponseWriter, r *http.Request, v view.Waiting, c templates.Chrome) {
	respond.NoStore(w.Header())
	switch fw := respond.Framework(r); {
	case fw != "":
		if v.Framework == "" {
			v.Framework = fw
		}
		if fw == respond.Turbo && v.Frame == "" {
			v.Frame = respond.TurboFrame(r)
		}
		writeFramework(w, r, http.StatusForbidden, fw, v.Frame, templates.WaitingCard(v))
	case respond.WantsJSON(r):
		respond.WriteJSON(w, http.StatusForbidden, map[string]string{"error": "approval_required"})
	default:
		writeHTML(w, r.Context(), http.StatusForbidden, templates.WaitingPage(v, c))
	}
}

// Refuse answers any other refusal with status: a script gets
// {"error": code, "message": …} (the notice's text, and its Why as
// error_description), a browser the notice's page, and an htmx or Turbo
// request the notice's card, as Waiting answers them. A caller answering
// 503 or 429 sets Retry-After first (§7 W143).
func Refuse(w http.ResponseWriter, r *http.Request, status int, code string, n view.Notice, c templates.Chrome) {
	respond.NoStore(w.Header())
	if fw := respond.Framework(r); fw != "" {
		n.Framework = fw
		writeFramework(w, r, status, fw, respond.TurboFrame(r), templates.NoticePage(n, c))
		return
	}
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
	typeHTML        = []string{"text/html; charset=utf-8"}
	typeTurboStream = []string{respond.TurboStreamType}
	nosniff         = []string{"nosniff"}
)

func writeHTML(w http.ResponseWriter, ctx context.Context, status int, c templ.Component) {
	var buf bytes.Buffer
	if !render(w, ctx, &buf, c) {
		return
	}
	send(w, status, typeHTML, buf.Bytes())
}

// render renders c into buf; on failure it answers 500 and reports false.
func render(w http.ResponseWriter, ctx context.Context, buf *bytes.Buffer, c templ.Component) bool {
	// A client that has gone still gets the kit's answer written, not a
	// 500: templ stops rendering once its context is done.
	if ctx.Err() != nil { // only then: WithoutCancel costs allocations per page
		ctx = context.WithoutCancel(ctx)
	}
	if err := c.Render(ctx, buf); err != nil {
		http.Error(w, "server error", http.StatusInternalServerError)
		return false
	}
	return true
}

func send(w http.ResponseWriter, status int, typ []string, body []byte) {
	h := w.Header()
	h["Content-Type"] = typ
	h["X-Content-Type-Options"] = nosniff
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// cardSelector picks the kit's card out of a fragment (HX-Reselect).
var cardSelector = []string{".opsgate-card"}

// writeFramework answers a framework's request with card, a fragment of
// the website's page: for htmx the card itself (HX-Reselect names it, so
// that the element's hx-select does not drop it); for Turbo a Turbo
// Stream that updates frame with it, or, with no frame, appends it over
// the page (Turbo processes a stream whatever the status).
func writeFramework(w http.ResponseWriter, r *http.Request, status int, framework, frame string, card templ.Component) {
	var buf bytes.Buffer
	if framework == respond.HTMX {
		if !render(w, r.Context(), &buf, card) {
			return
		}
		w.Header()["Hx-Reselect"] = cardSelector
		send(w, status, typeHTML, buf.Bytes())
		return
	}
	if frame != "" {
		buf.WriteString(`<turbo-stream action="update" target="`)
		buf.WriteString(html.EscapeString(frame))
		buf.WriteString(`"><template>`)
	} else {
		buf.WriteString(`<turbo-stream action="append" targets="body"><template><div class="opsgate-overlay">`)
	}
	if !render(w, r.Context(), &buf, card) {
		return
	}
	if frame == "" {
		buf.WriteString(`</div>`)
	}
	buf.WriteString("</template></turbo-stream>")
	send(w, status, typeTurboStream, buf.Bytes())
}
