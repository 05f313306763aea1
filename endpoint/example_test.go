package endpoint_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Example wires a whole website: the Gate around a handler with a business
// effect, then one Mount for the operations endpoint, the browser join,
// the kit's scripts and poppy.json, all from one origin. It is the
// README's "For website teams" code.
func Example() {
	// The kit: every instance of the website shares these keys and, for
	// more than one instance, a Redis store (kit.Store = redisstore.New(…)).
	kit := webkit.New([]byte("32-byte-hash-key-for-join-cookie"), []byte("32-byte-encryption-key-for-joins"))

	// The website's own routes, on any router; the Gate tags the one with
	// a business effect. describe says which action a request asks for and
	// its exact terms; the handler runs only once they are approved.
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/items/{item}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		sku := r.PostFormValue("replacement_sku")
		if sku == "" {
			return webkit.Action{}, fmt.Errorf("replacement_sku: required")
		}
		return webkit.Action{
			Key:     "exchange:" + r.PathValue("order") + ":" + r.PathValue("item"),
			Kind:    "exchange", // the metrics label: never an ID
			Terms:   map[string]any{"order_id": r.PathValue("order"), "item_id": r.PathValue("item"), "replacement_sku": sku},
			Summary: "Exchange item " + r.PathValue("item") + " on order " + r.PathValue("order") + " for " + sku + ".",
		}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "exchanged for", r.PostFormValue("replacement_sku"))
	})))

	// One origin, one mount: the endpoint, the join, /_opsgate/ and
	// poppy.json. Access tokens come from the website's own authorization
	// server (here a key made up for the example).
	issuerKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	m, err := endpoint.NewMount(endpoint.Config{
		Origin:       "https://shop.example",
		Name:         "Ridgeline Outfitters",
		Kit:          kit,
		AccessTokens: &identity.JWTAccessTokens{Issuer: "https://shop.example", Keys: map[string]crypto.PublicKey{"k1": issuerKey.Public()}},
		Decline: func(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline {
			if d.Approval.Approver == store.ApproverAgent && strings.HasPrefix(d.Operation.ID, "never-") {
				return &webkit.Decline{Reason: "Only you can approve this."}
			}
			return nil
		},
	})
	if err != nil {
		panic(err) // a bad origin or bad keys: found here, not at the first request
	}
	site := m.Handler(http.NewCrossOriginProtection().Handler(mux)) // the site's CSRF protection inside

	// A person's ordinary browser is not joined to a Session: the Gate
	// passes it straight through to the handler.
	r := httptest.NewRequest("POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", strings.NewReader(url.Values{"replacement_sku": {"stormline-insulated-m"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	site.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body.String())
	// Output: 200 exchanged for stormline-insulated-m
}
