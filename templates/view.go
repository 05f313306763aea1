// Package templates holds the kit's browser-facing pages as a-h/templ
// components (§4 "Websites"; see webkit/RULES.md). Package pages fills the views
// and writes the responses; these components only render them, and templ
// escapes every value they print.
package templates

import "github.com/a-h/templ"

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

func (c Continue) enctype() string {
	if c.Multipart {
		return "multipart/form-data"
	}
	return "application/x-www-form-urlencoded"
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
	Chrome Chrome
}

// Unavailable is the view of the 503 pages (§7): "try again shortly" and
// "not known yet".
type Unavailable struct {
	StyleURL string
	// Chrome is the website's frame around the page.
	Chrome Chrome
}

// Chrome is the website's own frame around the kit's pages, so that the
// person waiting for approval is still on the website: its name, a way
// back, its stylesheets, its own header and footer. The zero Chrome is the
// kit's plain card.
//
// It is the same on every page: it never carries the operation, its
// revision or its terms (W64), and the Header and Footer components must
// not print them either.
type Chrome struct {
	// SiteName is the website's name: in the title, and as a link home at
	// the top when there is no Header.
	SiteName string
	// HomeURL is where the site name links; "" is "/".
	HomeURL string
	// BackURL is a way back under the card, a path on the website (such as
	// "/orders"); "" for none. BackLabel is its text; "" is "Back to "
	// SiteName, or "Back".
	BackURL, BackLabel string
	// Stylesheets are the website's own, linked after the kit's so that
	// they win; same-origin URLs keep a style-src 'self' policy.
	Stylesheets []string
	// Header and Footer are the website's own masthead and footer,
	// rendered around the card with the request's context.
	Header, Footer templ.Component
}

func (c Chrome) framed() bool {
	return c.SiteName != "" || c.BackURL != "" || len(c.Stylesheets) > 0 || c.Header != nil || c.Footer != nil
}

func (c Chrome) home() string {
	if c.HomeURL == "" {
		return "/"
	}
	return c.HomeURL
}

func (c Chrome) backLabel() string {
	switch {
	case c.BackLabel != "":
		return c.BackLabel
	case c.SiteName != "":
		return "Back to " + c.SiteName
	}
	return "Back"
}
