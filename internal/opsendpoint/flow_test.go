package opsendpoint_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/join"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// agent is a Personal Agent: its keys, and a loopback server for its
// metadata document and JWKS (local development, as the demo).
type agent struct {
	keys     *agentside.AgentKeys
	dlg      *agentside.Delegation
	server   *httptest.Server
	down     atomic.Bool
	requests atomic.Int32
}

func newAgent(t testing.TB) *agent {
	t.Helper()
	a := &agent{}
	mux := http.NewServeMux()
	a.server = httptest.NewServer(mux)
	t.Cleanup(a.server.Close)
	clientID := a.server.URL + "/client"
	keys, err := agentside.NewAgentKeys(clientID, "ES256")
	if err != nil {
		t.Fatal(err)
	}
	a.keys = keys
	mux.HandleFunc("/client", func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		if a.down.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.Metadata(a.server.URL+"/jwks", "Test Agent"))
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		if a.down.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.JWKS())
	})
	if a.dlg, err = keys.Delegate(time.Hour); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *agent) clientID() string { return a.keys.ClientID }

// shop is one web server of a website: a Kit on a shared store, its Gate
// around an exchange handler, the endpoint, and the join.
type shop struct {
	kit      *webkit.Kit
	ep       *opsendpoint.Endpoint
	join     http.Handler
	mux      *http.ServeMux
	server   *httptest.Server
	runs     *atomic.Int32
	tokenKey crypto.Signer
}

const origin = "https://shop.example"

var cookieKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}

// newShop starts one web server on st. Several share st and the cookie keys,
// as instances behind a load balancer do.
func newShop(t testing.TB, st store.Store, tokenKey crypto.Signer, runs *atomic.Int32) *shop {
	t.Helper()
	kit := webkit.New(cookieKeys...)
	kit.Store = st
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Sessions.(*webkit.CookieSessions).Insecure = true
	verifier := &siteverify.Verifier{Origin: origin, Resolver: &identity.Resolver{AllowLocal: true}, Replay: storedriver.Steps(st)}
	tokens := &identity.JWTAccessTokens{Issuer: origin, Keys: map[string]crypto.PublicKey{"shop-1": tokenKey.Public()}}
	s := &shop{kit: kit, runs: runs, tokenKey: tokenKey, mux: http.NewServeMux()}
	s.ep = opsendpoint.New(kit, opsendpoint.IdentityAuthenticator{Verifier: verifier, AccessTokens: tokens})
	s.join = join.New(kit, origin+"/poppy/join", verifier, tokens)
	s.mux.Handle("POST /poppy/operations", s.ep)
	s.mux.Handle("POST /poppy/join", s.join)
	s.mux.Handle("POST /orders/{order}/exchange", kit.Gate(describeExchange)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		fmt.Fprintf(w, "exchanged %s for size %s", r.PathValue("order"), r.PostFormValue("size"))
	})))
	s.server = httptest.NewServer(s.mux)
	t.Cleanup(s.server.Close)
	return s
}

func describeExchange(r *http.Request) (webkit.Action, error) {
	size := r.PostFormValue("size")
	if size == "" {
		return webkit.Action{}, fmt.Errorf("size: required")
	}
	return webkit.Action{
		Key:     "exchange:" + r.PathValue("order"),
		Terms:   map[string]any{"order_id": r.PathValue("order"), "size": size, "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}},
		Summary: "Exchange the jacket on order " + r.PathValue("order") + " for size " + size + ", for $70.00 more.",
	}, nil
}

// browser is the agent's browser: a cookie jar that went through the join.
type browser struct {
	t      testing.TB
	client *http.Client
}

// joinBrowser joins a new browser to Session sid through shop s's join
// endpoint (webkit/RULES.md choice 3), signed in when account is not "".
func joinBrowser(t testing.TB, s *shop, a *agent, sid, user, account, extensions string) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &browser{t: t, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	claims := agentside.BrowserClaims{
		SessionClaims: agentside.SessionClaims{Audience: origin + "/poppy/join", SID: sid, User: user, Lifetime: 30 * time.Second},
		ReturnTo:      origin + "/orders",
		Extensions:    extensions,
	}
	form := url.Values{}
	if account != "" {
		claims.AccessToken = a.accessToken(t, s, account)
		form.Set("access_token", claims.AccessToken)
	}
	assertion, err := a.dlg.BrowserAssertion(claims)
	if err != nil {
		t.Fatal(err)
	}
	form.Set("assertion", assertion)
	res, err := b.client.PostForm(s.server.URL+"/poppy/join", form)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != origin+"/orders" {
		t.Fatalf("join: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	return b
}

func (a *agent) accessToken(t testing.TB, s *shop, account string) string {
	tok, err := agentside.IssueAccessToken(s.tokenKey, "shop-1", origin, a.clientID(), account, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// exchange submits the exchange form from browser b to shop s.
func (b *browser) exchange(s *shop, order, size string) *http.Response {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/orders/"+order+"/exchange", strings.NewReader(url.Values{"size": {size}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "text/html")
	res, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// ref reads the ref from a 403's Poppy-Operation, checking its sid (A10).
func ref(t testing.TB, res *http.Response, sid string) string {
	t.Helper()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", res.StatusCode)
	}
	gotSID, ref, err := headers.ParseOperation(res.Header.Values("Poppy-Operation"))
	if err != nil || gotSID != sid {
		t.Fatalf("Poppy-Operation: sid %q ref %q err %v; want sid %q", gotSID, ref, err, sid)
	}
	return ref
}

type agentRequest struct {
	sid, user, account string
	approval           string
	jti                string
	tamperATH          bool
	authorization      string
}

// call sends POST {ref} to shop s's endpoint as the agent.
func (a *agent) call(t testing.TB, s *shop, ref string, q agentRequest) (int, map[string]any, http.Header) {
	t.Helper()
	claims := agentside.SessionClaims{Audience: origin, SID: q.sid, User: q.user, JTI: q.jti}
	var token string
	if q.account != "" {
		token = a.accessToken(t, s, q.account)
		claims.AccessToken = token
		if q.tamperATH {
			claims.AccessToken = token + "x"
		}
	}
	jwt, err := a.dlg.SessionJWT(claims)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/poppy/operations", strings.NewReader(`{"ref":"`+ref+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headers.Session, jwt)
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, `"operations";v="3"`) // A01
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if q.authorization != "" {
		req.Header.Set("Authorization", q.authorization)
	}
	if q.approval != "" {
		req.Header.Set(headers.Approval, q.approval)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body map[string]any
	raw, _ := io.ReadAll(res.Body)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("endpoint body %q", raw)
		}
	}
	return res.StatusCode, body, res.Header
}

func userApproval(op map[string]any) string {
	return fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=%d, input_type="tap", reference="apr_%d"`,
		op["operation_id"], op["revision"], time.Now().Unix(), time.Now().UnixNano())
}

func tokenKey(t testing.TB) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// stores returns the backends the flow runs on: memory, and a real Redis
// shared by separate clients (skipped without redis-server unless required).
func stores(t *testing.T) map[string]func(t *testing.T) (store.Store, func() store.Store) {
	return map[string]func(t *testing.T) (store.Store, func() store.Store){
		"memory": func(t *testing.T) (store.Store, func() store.Store) {
			m := memstore.New(memstore.Config{})
			return m, func() store.Store { return m }
		},
		"redis": func(t *testing.T) (store.Store, func() store.Store) {
			inst := redistest.Start(t)
			return redisstore.New(inst.Client(t), redisstore.Options{}), func() store.Store {
				return redisstore.New(inst.Client(t), redisstore.Options{})
			}
		},
	}
}

// TestWebsiteFlow walks the spec's whole website flow with real Session
// JWTs, a real join and the real Gate, on each store.
func TestWebsiteFlow(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := open(t)
			var runs atomic.Int32
			s := newShop(t, st, tokenKey(t), &runs)
			a := newAgent(t)
			b := joinBrowser(t, s, a, "ses_1", "usr_1", "", `"operations";v="3"`)

			// §4: the browser's gated request performs nothing (W33, W52, W53).
			r1 := ref(t, b.exchange(s, "ord_7Hk2", "L"), "ses_1")
			if runs.Load() != 0 {
				t.Fatal("W33: handler ran before any approval")
			}
			// The agent looks the ref up (W72) …
			status, body, _ := a.call(t, s, r1, agentRequest{sid: "ses_1", user: "usr_1"})
			if status != 403 || body["error"] != "approval_required" {
				t.Fatalf("lookup: %d %v", status, body)
			}
			op := body["operation"].(map[string]any)
			// … and approves it from another Session of the same User (W40).
			if status, body, _ = a.call(t, s, r1, agentRequest{sid: "ses_2", user: "usr_1", approval: userApproval(op)}); status != 204 {
				t.Fatalf("approval: %d %v", status, body)
			}
			if runs.Load() != 0 {
				t.Fatal("W92: recording the approval performed the action")
			}
			// The browser presses Continue: performed once (W94, W121).
			res := b.exchange(s, "ord_7Hk2", "L")
			if res.StatusCode != 200 || res.Header.Get("Poppy-Operation") != "" || runs.Load() != 1 {
				t.Fatalf("Continue: %d, Poppy-Operation %q, runs %d", res.StatusCode, res.Header.Get("Poppy-Operation"), runs.Load())
			}
			status, body, _ = a.call(t, s, r1, agentRequest{sid: "ses_1", user: "usr_1"})
			if status != 200 || body["status"] != "performed" {
				t.Fatalf("W108 lookup after: %d %v", status, body)
			}
			// W141: the next request for the action is a new operation.
			r2 := ref(t, b.exchange(s, "ord_7Hk2", "L"), "ses_1")
			_, body, _ = a.call(t, s, r2, agentRequest{sid: "ses_1", user: "usr_1"})
			if id := body["operation"].(map[string]any)["operation_id"]; id == op["operation_id"] {
				t.Fatalf("W141: operation_id %v reused after performance", id)
			}
			if runs.Load() != 1 {
				t.Fatalf("runs = %d", runs.Load())
			}
		})
	}
}

// TestSignedInFlow: a join with an access token makes the browser's
// operations the account's (W54); the endpoint needs the token (W44).
func TestSignedInFlow(t *testing.T) {
	var runs atomic.Int32
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	a := newAgent(t)
	b := joinBrowser(t, s, a, "ses_in", "usr_1", "acct_1", `"operations";v="3"`)
	r := ref(t, b.exchange(s, "ord_1", "M"), "ses_in")
	if status, body, h := a.call(t, s, r, agentRequest{sid: "ses_out", user: "usr_1"}); status != 401 || body["error"] != "sign_in_required" || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("W44 signed out: %d %v", status, body)
	}
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_x", user: "usr_1", account: "acct_2"}); status != 400 {
		t.Fatalf("W43 another account: %d %v", status, body)
	}
	status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_in", user: "usr_1", account: "acct_1"})
	if status != 403 {
		t.Fatalf("lookup: %d %v", status, body)
	}
	op := body["operation"].(map[string]any)
	if status, _, _ := a.call(t, s, r, agentRequest{sid: "ses_in", user: "usr_1", account: "acct_1", approval: userApproval(op)}); status != 204 {
		t.Fatalf("approval: %d", status)
	}
	if res := b.exchange(s, "ord_1", "M"); res.StatusCode != 200 || runs.Load() != 1 {
		t.Fatalf("Continue: %d runs %d", res.StatusCode, runs.Load())
	}
}

// TestAttacks: each is refused with the right status, and records nothing.
func TestAttacks(t *testing.T) {
	var runs atomic.Int32
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	a := newAgent(t)
	other := newAgent(t)
	b := joinBrowser(t, s, a, "ses_1", "usr_1", "", `"operations";v="3"`)
	r := ref(t, b.exchange(s, "ord_7Hk2", "L"), "ses_1")
	_, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"})
	op := body["operation"].(map[string]any)

	for _, tc := range []struct {
		name   string
		from   *agent
		q      agentRequest
		status int
		code   string
	}{
		{"W45 W76 another agent's Session", other, agentRequest{sid: "ses_1", user: "usr_1", approval: userApproval(op)}, 400, "invalid_request"},
		{"W45 another User", a, agentRequest{sid: "ses_1", user: "usr_2", approval: userApproval(op)}, 400, "invalid_request"},
		{"ath bound to another token", a, agentRequest{sid: "ses_1", user: "usr_1", account: "acct_1", tamperATH: true}, 401, "invalid_session"},
		{"Authorization with two credentials", a, agentRequest{sid: "ses_1", user: "usr_1", authorization: "Bearer abc, Basic eHl6"}, 401, "invalid_token"},
		{"access token that is not a JWT", a, agentRequest{sid: "ses_1", user: "usr_1", authorization: "Bearer abc"}, 401, "invalid_session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := tc.from.call(t, s, r, tc.q)
			if status != tc.status || body["error"] != tc.code {
				t.Fatalf("%d %v; want %d %s", status, body, tc.status, tc.code)
			}
		})
	}
	t.Run("access token issued to another agent", func(t *testing.T) {
		tok := other.accessToken(t, s, "acct_1")
		jwt, _ := a.dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1", AccessToken: tok})
		req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/poppy/operations", strings.NewReader(`{"ref":"`+r+`"}`))
		req.Header.Set(headers.Session, jwt)
		req.Header.Set(headers.Version, "1.0")
		req.Header.Set(headers.Extensions, `"operations";v="3"`)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Fatalf("status %d, want 401", res.StatusCode)
		}
	})
	// Nothing above recorded the approval (W110).
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != 403 {
		t.Fatalf("after the attacks: %d %v, want 403 approval_required", status, body)
	}
}

// TestReplayedJTIAcrossServers: a Session JWT used at one web server is
// refused at another that shares the store (webkit/RULES.md choice 1).
func TestReplayedJTIAcrossServers(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			_, client := open(t)
			key := tokenKey(t)
			var runs atomic.Int32
			s1, s2 := newShop(t, client(), key, &runs), newShop(t, client(), key, &runs)
			a := newAgent(t)
			b := joinBrowser(t, s1, a, "ses_1", "usr_1", "", `"operations";v="3"`)
			r := ref(t, b.exchange(s1, "ord_1", "S"), "ses_1")
			q := agentRequest{sid: "ses_1", user: "usr_1", jti: "jti-once-1"}
			if status, body, _ := a.call(t, s1, r, q); status != 403 {
				t.Fatalf("first use: %d %v", status, body)
			}
			if status, body, _ := a.call(t, s2, r, q); status != 401 || body["error"] != "invalid_session" {
				t.Fatalf("replay at the second server: %d %v", status, body)
			}
		})
	}
}

// TestAgentKeysDown: the agent's keys can't be fetched → 503 with
// Retry-After, never 401; back up → verifying again.
func TestAgentKeysDown(t *testing.T) {
	var runs atomic.Int32
	clock := time.Now()
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	resolver := &identity.Resolver{AllowLocal: true, Clock: now}
	s.ep.Auth = opsendpoint.IdentityAuthenticator{Verifier: &siteverify.Verifier{Origin: origin, Resolver: resolver, Replay: storedriver.Steps(s.kit.Store)}}
	a := newAgent(t)
	a.down.Store(true)
	status, _, h := a.call(t, s, "op_x.1-y", agentRequest{sid: "ses_1", user: "usr_1"})
	if status != 503 || h.Get("Retry-After") == "" {
		t.Fatalf("keys down: %d, Retry-After %q", status, h.Get("Retry-After"))
	}
	a.down.Store(false)
	mu.Lock()
	clock = clock.Add(31 * time.Second) // past the 30 s that a failed load is remembered
	mu.Unlock()
	if status, body, _ := a.call(t, s, "op_x.1-y", agentRequest{sid: "ses_1", user: "usr_1"}); status != 400 || body["error"] != "invalid_request" {
		t.Fatalf("keys back: %d %v, want 400 invalid_request for an unknown ref", status, body)
	}
}

// TestJoin covers the join endpoint's refusals.
func TestJoin(t *testing.T) {
	var runs atomic.Int32
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	a := newAgent(t)
	post := func(form url.Values) *http.Response {
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).PostForm(s.server.URL+"/poppy/join", form)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	assert := func(c agentside.BrowserClaims) string {
		if c.Audience == "" {
			c.Audience = origin + "/poppy/join"
		}
		c.SID, c.User, c.Lifetime = "ses_j", "usr_j", 30*time.Second
		s, err := a.dlg.BrowserAssertion(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
	}{
		{"no assertion", url.Values{}, 400},
		{"two assertions", url.Values{"assertion": {"a", "b"}}, 400},
		{"garbage assertion", url.Values{"assertion": {"not-a-jwt"}}, 401},
		{"wrong aud", url.Values{"assertion": {assert(agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{Audience: origin + "/elsewhere"}, ReturnTo: origin + "/"})}}, 401},
		{"return_to on another origin", url.Values{"assertion": {assert(agentside.BrowserClaims{ReturnTo: "https://evil.example/"})}}, 401},
		{"access token for a signed-in join of another agent", url.Values{
			"assertion":    {assert(agentside.BrowserClaims{ReturnTo: origin + "/"})},
			"access_token": {newAgent(t).accessToken(t, s, "acct_1")}}, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := post(tc.form); res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.status)
			}
		})
	}
	t.Run("GET is not a join", func(t *testing.T) {
		res, err := http.Get(s.server.URL + "/poppy/join?assertion=x")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 405 {
			t.Fatalf("status %d", res.StatusCode)
		}
	})
	t.Run("W11 a join that declared nothing gets no operations", func(t *testing.T) {
		b := joinBrowser(t, s, a, "ses_n", "usr_n", "", "")
		res := b.exchange(s, "ord_1", "S")
		if res.Header.Get("Poppy-Operation") != "" || runs.Load() != 0 {
			t.Fatalf("status %d, Poppy-Operation %q, runs %d", res.StatusCode, res.Header.Get("Poppy-Operation"), runs.Load())
		}
	})
	t.Run("W10 a browser's requests declare what its join declared, never a header of their own", func(t *testing.T) {
		// Declared at the join: the browser's request gets an operation
		// without saying anything itself.
		v3 := joinBrowser(t, s, a, "ses_w10", "usr_w10", "", `"operations";v="3"`)
		if res := v3.exchange(s, "ord_1", "S"); res.StatusCode != http.StatusForbidden || res.Header.Get("Poppy-Operation") == "" {
			t.Fatalf("join declaring v3: status %d, Poppy-Operation %q; want 403 with a ref", res.StatusCode, res.Header.Get("Poppy-Operation"))
		}
		// Not declared at the join: the browser's own Poppy-Extensions
		// header (which a page's script could send) doesn't count.
		none := joinBrowser(t, s, a, "ses_w10n", "usr_w10n", "", "")
		req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/orders/ord_1/exchange", strings.NewReader(url.Values{"size": {"S"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(headers.Extensions, `"operations";v="3"`)
		res, err := none.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.Header.Get("Poppy-Operation") != "" || runs.Load() != 0 {
			t.Fatalf("join declaring nothing, request declaring v3: status %d, Poppy-Operation %q, runs %d; want no operation", res.StatusCode, res.Header.Get("Poppy-Operation"), runs.Load())
		}
	})
	t.Run("W13 a join that declared v2 gets no operations", func(t *testing.T) {
		b := joinBrowser(t, s, a, "ses_v2", "usr_n", "", `"operations";v="2"`)
		if res := b.exchange(s, "ord_1", "S"); res.Header.Get("Poppy-Operation") != "" {
			t.Fatalf("Poppy-Operation %q", res.Header.Get("Poppy-Operation"))
		}
	})
}

// BenchmarkApproval is one whole approval request (Session JWT verified
// with a warm key cache, approval parsed, checks made and recorded) on each
// store, beside the bare signature checks of the same JWT in the same run.
func BenchmarkApproval(b *testing.B) {
	for _, name := range []string{"memory", "redis"} {
		b.Run(name, func(b *testing.B) {
			// One operation per request for one owner and agent: no cap of
			// open ones (b.N can pass the agent's default 10,000).
			var st store.Store = memstore.New(memstore.Config{MaxOpenPerOwner: -1, MaxOpenPerAgent: -1})
			if name == "redis" {
				rs := redisstore.New(redistest.Start(b).Client(b), redisstore.Options{MaxOpenPerOwner: -1, MaxOpenPerAgent: -1})
				if err := rs.Load(context.Background()); err != nil { // FCALL, as a site that calls Load runs
					b.Fatal(err)
				}
				st = rs
			}
			var runs atomic.Int32
			s := newShop(b, st, tokenKey(b), &runs)
			a := newAgent(b)
			ctx := context.Background()
			owner := store.Owner{Agent: a.clientID(), User: "usr_1"}
			// Pre-issue the operations and sign the JWTs: only the request is measured.
			type one struct{ jwt, body, approval string }
			reqs := make([]one, b.N)
			for i := range reqs {
				iss, err := storetest.Issue(ctx, storedriver.Steps(st), owner, storedriver.TakeRequest{Key: fmt.Sprint("k", i), Terms: []byte(`{"i":1}`), Lifetime: time.Hour}, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				jwt, _ := a.dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
				reqs[i] = one{jwt, `{"ref":"` + iss.Ref + `"}`, fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, iss.Operation.ID, iss.Operation.Revision)}
			}
			warm, _ := a.dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
			if _, err := s.ep.Auth.Authenticate(ctx, sessionRequest(warm, `{"ref":"a.b"}`, "")); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				w := httptest.NewRecorder()
				s.ep.ServeHTTP(w, sessionRequest(reqs[i].jwt, reqs[i].body, reqs[i].approval))
				if w.Code != http.StatusNoContent {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

func sessionRequest(jwt, body, approval string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/poppy/operations", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(headers.Session, jwt)
	r.Header.Set(headers.Version, "1.0")
	r.Header.Set(headers.Extensions, `"operations";v="3"`)
	if approval != "" {
		r.Header.Set(headers.Approval, approval)
	}
	return r
}

// rawSignatureChecks does only the cryptography of one Session JWT: the
// delegation's ES256 signature with the agent's key and the JWT's with the
// delegated key, as BenchmarkApproval's "signatures" beside its requests.
func rawSignatureChecks(b *testing.B, jwt string, agentKey *ecdsa.PublicKey) {
	parts := strings.Split(jwt, ".")
	header, _ := base64.RawURLEncoding.DecodeString(parts[0])
	var h struct {
		Dlg string `json:"poppy_dlg"`
	}
	json.Unmarshal(header, &h)
	dparts := strings.Split(h.Dlg, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(dparts[1])
	var d struct {
		Cnf struct {
			JWK json.RawMessage `json:"jwk"`
		} `json:"cnf"`
	}
	json.Unmarshal(payload, &d)
	delegated, err := jose.ParseJWK(d.Cnf.JWK)
	if err != nil {
		b.Fatal(err)
	}
	dkey := delegated.Key.(*ecdsa.PublicKey)
	check := func(key *ecdsa.PublicKey, compact []string) bool {
		sig, _ := base64.RawURLEncoding.DecodeString(compact[2])
		sum := sha256.Sum256([]byte(compact[0] + "." + compact[1]))
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		return ecdsa.Verify(key, sum[:], r, s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !check(agentKey, dparts) || !check(dkey, parts) {
			b.Fatal("signature does not verify")
		}
	}
}

func BenchmarkApprovalSignatures(b *testing.B) {
	a := newAgent(b)
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	json.Unmarshal(a.keys.JWKS(), &set)
	k, err := jose.ParseJWK(set.Keys[0])
	if err != nil {
		b.Fatal(err)
	}
	jwt, _ := a.dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
	rawSignatureChecks(b, jwt, k.Key.(*ecdsa.PublicKey))
}
