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

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Example wires a website: the Gate around a handler with a business
// effect, the operations endpoint, the browser join, and poppy.json. It is
// the README's "For website teams" code.
func Example() {
	const site = "https://shop.example"

	// 1. The kit. Every instance of the website shares the cookie keys and,
	// with Redis, the store: each operation is then performed at most once
	// across all of them.
	kit := webkit.New([]byte("32-byte-hash-key-for-join-cookie"), []byte("32-byte-encryption-key-for-joins"))
	if addr := ""; addr != "" { // e.g. os.Getenv("REDIS_ADDR")
		kit.Store = redisstore.New(redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}), redisstore.Options{})
	}

	// 2. Tag the handler: describe says which action a request asks for and
	// its exact terms; the handler runs only once they are approved.
	exchange := kit.Gate(func(r *http.Request) (webkit.Action, error) {
		sku := r.PostFormValue("replacement_sku")
		if sku == "" {
			return webkit.Action{}, fmt.Errorf("replacement_sku: required")
		}
		return webkit.Action{
			Key:     "exchange:" + r.PathValue("order") + ":" + r.PathValue("item"),
			Terms:   map[string]any{"order_id": r.PathValue("order"), "item_id": r.PathValue("item"), "replacement_sku": sku},
			Summary: "Exchange item " + r.PathValue("item") + " on order " + r.PathValue("order") + " for " + sku + ".",
		}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "exchanged for", r.PostFormValue("replacement_sku"))
	}))

	// 3. Agent identity: Session JWTs (poppy-core choice 1) and access
	// tokens from the website's own authorization server (choice 2).
	verifier := &identity.Verifier{Origin: site, Resolver: &identity.Resolver{}, Replay: kit.Store}
	issuerKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tokens := &identity.JWTAccessTokens{Issuer: site, Keys: map[string]crypto.PublicKey{"k1": issuerKey.Public()}}

	// 4. The endpoint, with a decline hook, and the join.
	ep := endpoint.New(kit, endpoint.IdentityAuthenticator{Verifier: verifier, AccessTokens: tokens})
	ep.Decline = func(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline {
		if d.Approval.Approver == webkit.ApproverAgent && strings.HasPrefix(d.Operation.OperationID, "never-") {
			return &webkit.Decline{Reason: "Only you can approve this."}
		}
		return nil
	}
	join := &webkit.Join{Kit: kit, URL: site + "/poppy/join", Verifier: verifier, AccessTokens: tokens}
	poppy, err := webkit.Discovery{Endpoint: site + "/poppy/operations", BrowserSessionEndpoint: join.URL}.JSON()
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/items/{item}/exchange", exchange)
	mux.Handle("POST /poppy/operations", ep)
	mux.Handle("POST /poppy/join", join)
	mux.Handle(webkit.DefaultBasePath, kit.Handler()) // waiting.js, fetch.js, the status route
	mux.HandleFunc("GET /.well-known/poppy.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(poppy)
	})

	// A person's ordinary browser is not joined to a Session: the Gate
	// passes it straight through to the handler.
	r := httptest.NewRequest("POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", strings.NewReader(url.Values{"replacement_sku": {"stormline-insulated-m"}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body.String())
	// Output: 200 exchanged for stormline-insulated-m
}
