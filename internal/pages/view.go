package pages

import (
	"context"
	"net/http"

	"github.com/opsgate/opsgate/templates"
)

// The views of the kit's pages: the kit fills them, the templ components
// (layout.templ, waiting.templ, unknown.templ) only render them, and
// templ escapes every value they print.

// Field is one name=value pair of a form, in the order it was sent.
type Field struct {
	Name  string
	Value string
}

// Continue is the control that makes the original request again (§4 W62).
type Continue struct {
	// Method is "GET" (a link) or "POST" (a form); "" when the request
	// can't be repeated from the page.
	Method string
	// Action is the request's path and query on this website.
	Action string
	// Fields are the form's fields for POST, order and repeats kept.
	Fields []Field
	// Multipart posts the fields as multipart/form-data, as the browser
	// first sent them; else application/x-www-form-urlencoded.
	Multipart bool
	// Back is where to go when the request can't be repeated: a path on
	// this website.
	Back string
	// Why says why the request can't be repeated; "" when it can.
	Why string
}

// Waiting is the view of the waiting page (§4 W65). It never carries the
// operation, its revision or its ref (W64).
type Waiting struct {
	Continue Continue
	// StatusURL is the status route the page's script asks (W93), with an
	// opaque handle; "" for none.
	StatusURL string
	// ScriptURL and StyleURL are the kit's served files (no inline script
	// or style, so a strict Content-Security-Policy holds).
	ScriptURL string
	StyleURL  string
	// Chrome is the website's frame around the page.
	Chrome templates.Chrome
}

// Unavailable is the view of the 503 pages (§7): "try again shortly" and
// "not known yet".
type Unavailable struct {
	StyleURL string
	// Chrome is the website's frame around the page.
	Chrome templates.Chrome
	// Why is the refusal's reason in words, on a website that explains
	// its refusals (webkit.Kit.ExplainRefusals): shown on the page, and
	// a script's JSON carries it as error_description. "" for none.
	Why string
}

func framed(c templates.Chrome) bool {
	return c.SiteName != "" || c.BackURL != "" || len(c.Stylesheets) > 0 || c.Header != nil || c.Footer != nil
}

func home(c templates.Chrome) string {
	if c.HomeURL == "" {
		return "/"
	}
	return c.HomeURL
}

func backLabel(c templates.Chrome) string {
	switch {
	case c.BackLabel != "":
		return c.BackLabel
	case c.SiteName != "":
		return "Back to " + c.SiteName
	}
	return "Back"
}

type waitingKey struct{}

// WithWaiting is ctx carrying the waiting page's view, for WaitingOf: the
// Gate sets it before Kit.Refused runs.
func WithWaiting(ctx context.Context, v *Waiting) context.Context {
	return context.WithValue(ctx, waitingKey{}, v)
}

// WaitingOf returns the waiting page's view while the Gate refuses with
// webkit.ErrApprovalRequired; false for any other request. The kit's
// tests use it to serve a waiting page whose Continue differs.
func WaitingOf(r *http.Request) (Waiting, bool) {
	v, ok := r.Context().Value(waitingKey{}).(*Waiting)
	if !ok {
		return Waiting{}, false
	}
	return *v, true
}
