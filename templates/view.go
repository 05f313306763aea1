// Package templates holds the kit's browser-facing pages as a-h/templ
// components (operations-v3 §4 "Websites"). Package pages fills the views
// and writes the responses; these components only render them, and templ
// escapes every value they print.
package templates

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
}

// Unavailable is the view of the 503 page (§7).
type Unavailable struct {
	StyleURL string
}
