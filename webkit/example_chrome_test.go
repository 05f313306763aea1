package webkit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/a-h/templ"

	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
)

// ExampleKit_chrome dresses the kit's pages in the website's own chrome: its
// name, a way back, its stylesheet and its masthead (any templ component;
// here a hand-written one). The waiting page still shows no operation,
// revision or terms (W64).
func ExampleKit_chrome() {
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	masthead := templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, `<header class="masthead"><a href="/">Ridgeline Outfitters</a></header>`)
		return err
	})
	kit.Chrome = templates.Chrome{
		SiteName:    "Ridgeline Outfitters",
		BackURL:     "/orders",
		BackLabel:   "Back to your orders",
		Stylesheets: []string{"/static/shop.css"},
		Header:      masthead,
	}
	exchange := kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "exchange:ord_7Hk2", Kind: "exchange", Terms: map[string]string{"size": "L"}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	// A browser joined to an agent's Session asks for the exchange.
	joined := httptest.NewRecorder()
	kit.Sessions.Bind(joined, httptest.NewRequest("POST", "/poppy/join", nil), webkit.Session{
		ID: "ses_1", Agent: "https://agent.example/client", User: "usr_1", Extensions: map[string]string{"operations": "3"},
	})
	r := httptest.NewRequest("POST", "/orders/ord_7Hk2/exchange", nil)
	r.Header.Set("Accept", "text/html")
	r.AddCookie(joined.Result().Cookies()[0])
	w := httptest.NewRecorder()
	exchange.ServeHTTP(w, r)

	fmt.Println(w.Code)
	for _, line := range strings.Split(strings.ReplaceAll(w.Body.String(), "><", ">\n<"), "\n") {
		if strings.Contains(line, "<title") || strings.Contains(line, "stylesheet") || strings.Contains(line, "masthead") || strings.Contains(line, "opsgate-back") {
			fmt.Println(line)
		}
	}
	// Output:
	// 403
	// <title>Waiting for approval · Ridgeline Outfitters</title>
	// <link rel="stylesheet" href="/_opsgate/opsgate.css">
	// <link rel="stylesheet" href="/static/shop.css">
	// <header class="masthead">
	// <p class="opsgate-back">
}
