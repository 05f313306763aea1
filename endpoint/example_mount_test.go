package endpoint_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/webkit"
)

// ExampleMount_Bypass puts net/http's CrossOriginProtection around the
// whole site, the Mount included. Bypass lets the join through (the agent's
// browser posts it from the agent's page, with a signed assertion as its
// proof); every other cross-site POST is still refused, and Refused makes
// a refused join say why.
func ExampleMount_Bypass() {
	kit := webkit.New([]byte("32-byte-hash-key-for-join-cookie"), []byte("32-byte-encryption-key-for-joins"))
	m, err := endpoint.NewMount(endpoint.Config{Origin: "https://shop.example", Name: "Shop", Kit: kit})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /account/email", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "changed") })

	cop := http.NewCrossOriginProtection()
	m.Bypass(cop)
	cop.SetDenyHandler(m.Refused(nil))
	site := cop.Handler(m.Handler(mux))

	for _, path := range []string{"/poppy/join", "/account/email"} {
		r := httptest.NewRequest("POST", path, strings.NewReader("assertion=not-a-jwt"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Sec-Fetch-Site", "cross-site") // posted from another site's page
		w := httptest.NewRecorder()
		site.ServeHTTP(w, r)
		fmt.Println(path, w.Code)
	}
	// Output:
	// /poppy/join 401
	// /account/email 403
}
