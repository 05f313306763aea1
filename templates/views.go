package templates

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
