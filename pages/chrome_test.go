package pages_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/a-h/templ"

	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/templates"
)

// The website's chrome frames every kit page: its name in the title and
// its own header, its stylesheet after the kit's, a way back. Its values
// are escaped, and the page still names no operation (W64).
func TestChromeFramesThePages(t *testing.T) {
	t.Parallel()
	chrome := templates.Chrome{
		SiteName:    `Shop <b>&</b>`,
		BackURL:     "/orders",
		Stylesheets: []string{"/static/shop.css"},
		Footer: templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
			_, err := io.WriteString(w, `<footer id="site-footer">© Shop</footer>`)
			return err
		}),
	}
	r := httptest.NewRequest("POST", "/x", nil)
	r.Header.Set("Accept", "text/html")
	pagesOf := map[string]func() string{
		"waiting": func() string {
			rec := httptest.NewRecorder()
			pages.Waiting(rec, r, view.Waiting{Continue: view.Continue{Method: "POST", Action: "/x"}, StatusURL: "/_opsgate/status?w=sealed"}, chrome)
			return rec.Body.String()
		},
		"notice": func() string {
			rec := httptest.NewRecorder()
			pages.Refuse(rec, r, 503, "temporarily_unavailable", view.Notice{Title: "Try again shortly", Heading: "Try again shortly"}, chrome)
			return rec.Body.String()
		},
	}
	for name, page := range pagesOf {
		body := page()
		for _, want := range []string{
			`· Shop &lt;b&gt;&amp;&lt;/b&gt;</title>`,
			`<body class="opsgate-framed">`,
			`<header class="opsgate-site"><a href="/">Shop &lt;b&gt;&amp;&lt;/b&gt;</a></header>`,
			`<a href="/orders">Back to Shop &lt;b&gt;&amp;&lt;/b&gt;</a>`,
			`<footer id="site-footer">`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: lacks %s\n%s", name, want, body)
			}
		}
		kit, site := strings.Index(body, "/_opsgate/opsgate.css"), strings.Index(body, "/static/shop.css")
		if kit < 0 || site < kit {
			t.Errorf("%s: the site's stylesheet must come after the kit's", name)
		}
		if strings.Contains(body, "<b>") {
			t.Errorf("%s: unescaped site name", name)
		}
		// The kit's style is its stylesheet, a file: nothing inline, so a
		// style-src 'self' policy holds.
		if strings.Contains(body, " style=") || strings.Contains(body, "<style") {
			t.Errorf("%s: inline style\n%s", name, body)
		}
	}
	// Without chrome: the kit's plain card, no frame.
	rec := httptest.NewRecorder()
	pages.Waiting(rec, r, view.Waiting{}, templates.Chrome{})
	if strings.Contains(rec.Body.String(), "opsgate-framed") || !strings.Contains(rec.Body.String(), "<title>Waiting for approval</title>") {
		t.Errorf("plain page: %s", rec.Body)
	}
}
