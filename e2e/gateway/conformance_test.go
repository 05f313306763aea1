package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/agent/conformance"
	"github.com/opsgate/opsgate/endpoint/gateway"
	"github.com/opsgate/opsgate/internal/agentside"
)

// W08 The checker passes against the gateway in front of a plain net/http
// shop that imports nothing of the kit, twice on one gateway process.
func TestConformanceThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the whole checker")
	}
	var performed atomic.Int32
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html><head><title>Shop</title></head><body>%s</body></html>`, body)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page(w, `<h1>Shop</h1><a href="/orders/ord_1">Your order</a> <a href="/orders/ord_2">Your other order</a>`)
	})
	mux.HandleFunc("GET /orders/{order}", func(w http.ResponseWriter, r *http.Request) {
		page(w, `<h1>Order `+r.PathValue("order")+`</h1>
<form method="post" action="/orders/`+r.PathValue("order")+`/exchange"><select name="size"><option>S</option><option>M</option><option selected>L</option></select><button>Exchange</button></form>`)
	})
	mux.HandleFunc("POST /orders/{order}/exchange", func(w http.ResponseWriter, r *http.Request) {
		performed.Add(1)
		page(w, `<p>Exchanged order `+r.PathValue("order")+` for size `+r.PostFormValue("size")+`.</p>`)
	})
	up := httptest.NewServer(mux)
	defer up.Close()

	// The shop's authorization server, apart from the shop: it issues
	// access tokens (RFC 9068) for the checker's signed-in Sessions and
	// serves its key set, which the gateway fetches.
	issuerKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var auth *httptest.Server
	auth = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/token":
			tok, err := agentside.IssueAccessToken(issuerKey, "k1", auth.URL, r.PostFormValue("client_id"), r.PostFormValue("account"), time.Hour)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			json.NewEncoder(w).Encode(map[string]string{"access_token": tok})
		case "/jwks":
			raw, _ := issuerKey.PublicKey.Bytes()
			b64 := base64.RawURLEncoding.EncodeToString
			json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{"kty": "EC", "crv": "P-256", "kid": "k1", "x": b64(raw[1:33]), "y": b64(raw[33:])}}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer auth.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	setKeys(t)
	cfg := strings.NewReplacer("https://shop.example", origin, "store: memory", "store: memory\nallow_local: true", "UPSTREAM", up.URL).Replace(shopConfig) +
		"access_tokens:\n  issuer: " + auth.URL + "\n  jwks_url: " + auth.URL + "/jwks\n"
	c, err := gateway.Parse("gateway.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gw := &httptest.Server{Listener: ln, Config: &http.Server{Handler: g}}
	gw.Start()
	defer gw.Close()

	for _, run := range []string{"first", "second"} {
		t.Run(run, func(t *testing.T) {
			conformance.Test(t, conformance.Config{Site: origin, Log: &testLog{t}, TokenURL: auth.URL + "/token", Performed: func() int { return int(performed.Load()) }})
		})
	}
}
