package gateway

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/webkit/webkittest"
)

// W54 W56 The upstream learns whom a joined browser is for from the
// identity headers, which no client can forge: the gateway strips them
// from every request first.
func TestIdentityHeaders(t *testing.T) {
	up := newShop(t)
	site := startGateway(t, shopConfig, up.srv.URL)
	// Every spelling a website may read as an identity or proxy header:
	// case, and _ for - (WSGI, Rack, PHP and CGI servers).
	forged := http.Header{"X-Opsgate-Account": {"acct_victim"}, "x-opsgate-user": {"usr_victim"}, "X-OPSGATE-AGENT": {"https://evil.example"},
		"X_Opsgate_Account": {"acct_victim"}, "X_OPSGATE_SIGNATURE": {"v1=00"}, "x_opsgate-timestamp": {"1"},
		"X-Real-Ip": {"10.0.0.1"}, "X_Real_IP": {"10.0.0.1"}, "X-Original-Url": {"/admin"}, "X-Rewrite-Url": {"/admin"},
		"X-Forwarded-Prefix": {"/evil"}, "X_Forwarded_Host": {"evil.example"}, "Forwarded": {"for=10.0.0.1"}, "True-Client-Ip": {"10.0.0.1"}}
	spoofed := func(t *testing.T, h http.Header) {
		t.Helper()
		for name, v := range h {
			n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
			switch {
			case strings.HasPrefix(n, "x-opsgate-") && (name != http.CanonicalHeaderKey(name) || slices.Contains(v, "acct_victim") || slices.Contains(v, "usr_victim")):
				t.Errorf("the upstream got %s: %v", name, v)
			case n == "x-real-ip" || n == "x-original-url" || n == "x-rewrite-url" || n == "x-forwarded-prefix" || n == "forwarded" || n == "true-client-ip":
				t.Errorf("the upstream got %s: %v", name, v)
			case n == "x-forwarded-host" && (len(v) != 1 || v[0] != "shop.example"):
				t.Errorf("the upstream got %s: %v", name, v)
			}
		}
	}

	t.Run("an ordinary browser's forged headers never reach the upstream", func(t *testing.T) {
		b := site.Browser()
		b.Header = forged
		b.Get("/orders")
		spoofed(t, up.lastHeader())
		b.PostForm("/orders/ord_4/exchange", url.Values{"size": {"M"}})
		spoofed(t, up.lastHeader())
	})
	t.Run("by default a joined browser's requests say nothing but on the approved repeat", func(t *testing.T) {
		_, b := join(t, site)
		b.Header = forged
		b.Get("/orders")
		for name := range up.lastHeader() {
			if strings.HasPrefix(strings.ToLower(name), "x-opsgate-") {
				t.Errorf("the upstream got %s on a request that performs nothing", name)
			}
		}
	})
	t.Run("the approved repeat says the operation's agent and User, and nothing forged", func(t *testing.T) {
		s, b := join(t, site)
		b.Header = forged
		res := b.PostForm("/orders/ord_5/exchange", url.Values{"size": {"M"}})
		if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
			t.Fatalf("approve: %d %s", a.StatusCode, a.Body)
		}
		if again := res.Continue(); again.StatusCode != 200 {
			t.Fatalf("continue: %d %s", again.StatusCode, again.Body)
		}
		h := up.lastHeader()
		spoofed(t, h)
		if h.Get("X-Opsgate-User") != "usr_1" || !strings.HasPrefix(h.Get("X-Opsgate-Agent"), "https://") || h.Get("X-Opsgate-Agent") == "https://evil.example" {
			t.Errorf("identity headers %v", h)
		}
		if h.Get("X-Opsgate-Account") != "" {
			t.Errorf("a signed-out Session has an account: %q", h.Get("X-Opsgate-Account"))
		}
	})
	t.Run("identity_on: joined: every request of a joined browser says it", func(t *testing.T) {
		site := startGateway(t, shopConfig+"identity_on: joined\n", up.srv.URL)
		_, b := join(t, site)
		b.Header = forged
		b.Get("/orders")
		if h := up.lastHeader(); h.Get("X-Opsgate-User") != "usr_1" || h.Get("X-Opsgate-Account") != "" {
			t.Errorf("identity headers %v", h)
		}
	})
	t.Run("W56 a browser with the site's own login gets none", func(t *testing.T) {
		_, b := join(t, site)
		b.Get("/login")
		b.Header = forged
		b.Get("/orders")
		for name := range up.lastHeader() {
			if strings.HasPrefix(strings.ToLower(name), "x-opsgate-") {
				t.Errorf("the upstream got %s", name)
			}
		}
	})
}

// W54 A join signed in with an access token that the issuer's JWKS
// verifies: the upstream gets the account.
func TestSignedInThroughJWKS(t *testing.T) {
	up := newShop(t)
	site := webkittest.New("https://shop.example")
	var set []map[string]string
	for kid, k := range site.AccessTokens().Keys {
		ec := k.(*ecdsa.PublicKey)
		raw, _ := ec.Bytes() // 0x04 || x || y
		set = append(set, map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
			"x": base64.RawURLEncoding.EncodeToString(raw[1:33]), "y": base64.RawURLEncoding.EncodeToString(raw[33:])})
	}
	// An encryption key beside it is left out.
	set = append(set, map[string]string{"kty": "EC", "crv": "P-256", "kid": "enc", "use": "enc", "x": "AA", "y": "AA"})
	fetches := 0
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches++
		json.NewEncoder(w).Encode(map[string]any{"keys": set})
	}))
	defer issuer.Close()
	setKeys(t)
	// http on loopback: allow_local.
	cfg := strings.NewReplacer("UPSTREAM", up.srv.URL, "store: memory", "store: memory\nallow_local: true").Replace(shopConfig) +
		"access_tokens:\n  issuer: https://shop.example\n  jwks_url: " + issuer.URL + "\n"
	c, err := Parse("gateway.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGateway(c, slog.New(slog.DiscardHandler), options{Resolver: site.Resolver()}) // no AccessTokens: the config's
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	site.Handler = g

	s := site.NewAgent().SignedInSession("usr_2", "acct_42")
	b, err := s.Join()
	if err != nil {
		t.Fatalf("signed-in join: %v", err)
	}
	b.Header = http.Header{"X-Opsgate-Account": {"acct_victim"}}
	res := b.PostForm("/orders/ord_1/exchange", url.Values{"size": {"L"}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("%d", res.StatusCode)
	}
	if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
		t.Fatalf("approve: %d %s", a.StatusCode, a.Body)
	}
	if again := res.Continue(); again.StatusCode != 200 || up.lastHeader().Get("X-Opsgate-Account") != "acct_42" {
		t.Fatalf("continue: %d, account %q", again.StatusCode, up.lastHeader().Get("X-Opsgate-Account"))
	}
	if fetches != 1 {
		t.Errorf("the JWKS was fetched %d times, want once", fetches)
	}

	// A JWKS without the token's key: the signed-in join is refused.
	set = nil
	g2, err := newGateway(c, slog.New(slog.DiscardHandler), options{Resolver: site.Resolver()})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	site.Handler = g2
	if _, err := site.NewAgent().SignedInSession("usr_3", "acct_42").Join(); err == nil {
		t.Fatal("a token the JWKS can't verify joined signed in")
	}
}

func TestParseJWKS(t *testing.T) {
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, ek, _ := ed25519.GenerateKey(rand.Reader)
	b64 := base64.RawURLEncoding.EncodeToString
	doc, _ := json.Marshal(map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r", "n": b64(rk.N.Bytes()), "e": b64([]byte{1, 0, 1})},
		{"kty": "OKP", "crv": "Ed25519", "kid": "e", "x": b64(ek.Public().(ed25519.PublicKey))},
		{"kty": "oct", "kid": "secret", "k": "c2VjcmV0"},
	}})
	keys, err := parseJWKS(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !keys["r"].(*rsa.PublicKey).Equal(rk.Public()) || !keys["e"].(ed25519.PublicKey).Equal(ek.Public()) {
		t.Fatalf("keys %v", keys)
	}
	for _, bad := range []string{`[`, `{"keys":[{"kty":"EC","crv":"P-256","kid":"x","x":"AA","y":"AA"}]}`, `{"keys":[{"kty":"RSA","kid":"x","n":"AQAB","e":"AQAB"}]}`} {
		if _, err := parseJWKS([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}
