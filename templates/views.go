package templates

import (
	"strings"

	"github.com/a-h/templ"

	"github.com/opsgate/opsgate/internal/view"
)

// The kit's pages are rendered from their views (internal/view): the kit
// fills them, the components (layout.templ, waiting.templ, notice.templ)
// only render them, and templ escapes every value they print.

// The kit's served files, under the base path its routes are served at
// (endpoint.Mount): no inline script or style, so a strict
// Content-Security-Policy holds.
const (
	styleURL   = "/_opsgate/opsgate.css"
	waitingURL = "/_opsgate/waiting.js"
)

func framed(c Chrome) bool {
	return c.SiteName != "" || c.BackURL != "" || len(c.Stylesheets) > 0 || c.Header != nil || c.Footer != nil
}

func home(c Chrome) string {
	if c.HomeURL == "" {
		return "/"
	}
	return c.HomeURL
}

func backLabel(c Chrome) string {
	switch {
	case c.BackLabel != "":
		return c.BackLabel
	case c.SiteName != "":
		return "Back to " + c.SiteName
	}
	return "Back"
}

func siteSuffix(name string) string {
	if name == "" {
		return ""
	}
	return " · " + name
}

func reason(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

// htmxAttrs are the attributes of an htmx card's Continue form: the
// request's method and URL, and the card as the target its answer
// replaces. card.js, when the page loads it, sends the original request
// instead (from its element, to its target).
func htmxAttrs(c view.Continue) templ.Attributes {
	a := templ.Attributes{
		"hx-" + strings.ToLower(c.Method): c.Action,
		"hx-target":                       "closest .opsgate-card",
		"hx-swap":                         "outerHTML",
	}
	if c.Multipart {
		a["hx-encoding"] = "multipart/form-data"
	}
	return a
}
