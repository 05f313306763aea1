package opsendpoint_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/testclock"
)

// rawCall posts {ref} to s's endpoint with the Session JWT token as it
// is ("" for no Poppy-Session header), after change has its way with the
// request.
func rawCall(t *testing.T, s *shop, ref, token string, change func(*http.Request)) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/poppy/operations", strings.NewReader(`{"ref":"`+ref+`"}`))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(headers.Session, token)
	}
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, `"operations";v="3"`)
	if change != nil {
		change(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("body %q", raw)
	}
	return res.StatusCode, body
}

// forgeSession signs claims with a's delegated key under the JOSE header
// typ given: a Session JWT as a careless agent may make it.
func forgeSession(t *testing.T, a *agent, typ string, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jose.Sign("ES256", a.dlg.Signer(), map[string]any{"typ": typ, "poppy_dlg": a.dlg.Compact()}, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var jtis atomic.Int64

func sessionClaims(a *agent, sid, user string, change func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"iss": a.clientID(), "aud": origin, "sid": sid, "sub": user, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
		"jti": "jti-" + time.Now().Format("150405") + "-" + string(rune('a'+jtis.Add(1)%26)) + time.Now().Format(".000000000")}
	if change != nil {
		change(c)
	}
	return c
}

// An agent whose Session JWT, access token or ref is wrong learns from the
// endpoint's answer which check failed and why (Kit.ExplainRefusals):
// error_description beside the spec's error, a test per reason. Nothing in
// it is a token, or another agent's or User's data.
func TestEndpointRefusalsSayWhy(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	s.kit.ExplainRefusals = true
	a := newAgent(t)
	b := joinBrowser(t, s, a, "ses_1", "usr_1", "", `"operations";v="3"`)
	r1 := ref(t, b.exchange(s, "ord_7Hk2", "L"), "ses_1")
	good := func(change func(jwt.MapClaims)) string {
		return forgeSession(t, a, jose.TypSession, sessionClaims(a, "ses_1", "usr_1", change))
	}
	// The good JWT works; the same one again is a replay.
	replayed := good(nil)
	if status, body := rawCall(t, s, r1, replayed, nil); status != http.StatusForbidden || body["error"] != "approval_required" || body["error_description"] != nil {
		t.Fatalf("a good lookup: %d %v", status, body)
	}
	other := newAgent(t)
	otherToken, err := agentside.IssueAccessToken(s.tokenKey, "shop-1", origin, other.clientID(), "acct_1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		token  string
		change func(*http.Request)
		code   string
		says   []string
	}{
		{"missing header", "", nil, "invalid_session", []string{"exactly one Poppy-Session header is required"}},
		{"aud with a trailing slash", good(func(c jwt.MapClaims) { c["aud"] = origin + "/" }), nil, "invalid_session",
			[]string{`session JWT: aud "https://shop.example/" has a trailing slash: it must be the origin exactly, "https://shop.example"`}},
		{"aud with a path", good(func(c jwt.MapClaims) { c["aud"] = origin + "/poppy/operations" }), nil, "invalid_session",
			[]string{`has a path: a Session JWT's aud is the website's origin alone`}},
		{"aud of another host", good(func(c jwt.MapClaims) { c["aud"] = "https://127.0.0.1" }), nil, "invalid_session",
			[]string{`names the host 127.0.0.1, and this website is shop.example`}},
		{"aud with two values", good(func(c jwt.MapClaims) { c["aud"] = []string{origin, "https://other.example"} }), nil, "invalid_session",
			[]string{`aud lists 2 values: it must be the one string "https://shop.example"`}},
		{"typ of a join assertion", forgeSession(t, a, jose.TypBrowser, sessionClaims(a, "ses_1", "usr_1", nil)), nil, "invalid_session",
			[]string{`typ "poppy-browser+jwt" is not "poppy-session+jwt": that typ is a browser join assertion's`}},
		{"signed with another key", func() string {
			tok := good(nil)
			other := forgeSession(t, newAgent(t), jose.TypSession, sessionClaims(a, "ses_1", "usr_1", nil))
			return tok[:strings.LastIndexByte(tok, '.')] + other[strings.LastIndexByte(other, '.'):]
		}(), nil, "invalid_session", []string{"the signature does not verify with the delegated key"}},
		{"expired", good(func(c jwt.MapClaims) {
			c["iat"], c["exp"] = time.Now().Add(-10*time.Minute).Unix(), time.Now().Add(-9*time.Minute).Unix()
		}), nil, "invalid_session", []string{"has passed: the website's clock says"}},
		{"lives too long", good(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(time.Hour).Unix() }), nil, "invalid_session",
			[]string{"exp − iat is 1h0m0s: it must be more than 0 and at most 5m0s (the token lives too long)"}},
		{"replay", replayed, nil, "invalid_session", []string{"jti was used before (a replay)"}},
		{"access token of another agent", good(func(c jwt.MapClaims) { c["ath"] = jose.ATH(otherToken) }), func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+otherToken)
		}, "invalid_token", []string{"was issued to", "not to the Session's agent"}},
		{"no declaration", good(nil), func(r *http.Request) { r.Header.Del(headers.Extensions) }, "extension_required",
			[]string{`no Poppy-Extensions header`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawCall(t, s, r1, tc.token, tc.change)
			why, _ := body["error_description"].(string)
			if body["error"] != tc.code || why == "" {
				t.Fatalf("%d %v, want %s with error_description", status, body, tc.code)
			}
			for _, w := range tc.says {
				if !strings.Contains(why, w) {
					t.Errorf("error_description %q does not say %q", why, w)
				}
			}
			if tc.token != "" && strings.Contains(why, tc.token[:30]) || strings.Contains(why, otherToken[:30]) {
				t.Error("the reason shows a token")
			}
		})
	}

	// Refs: another User's, another agent's, altered, expired, stale.
	look := func(ag *agent, user, ref string) (int, map[string]any) {
		return rawCall(t, s, ref, forgeSession(t, ag, jose.TypSession, sessionClaims(ag, "ses_x", user, nil)), nil)
	}
	altered := []byte(r1)
	altered[len(altered)-3] ^= 1
	for _, tc := range []struct {
		name  string
		ag    *agent
		user  string
		ref   string
		says  string
		leaks []string
	}{
		{"another User's", a, "usr_2", r1, "issued to a Session of this agent for another User (another sub)", []string{"usr_1"}},
		{"another agent's", other, "usr_1", r1, "issued to a Session of another agent (another client_id)", []string{a.clientID()}},
		{"altered", a, "usr_1", string(altered), "this website issued no such ref to this Session's agent and User: it was altered or made up", nil},
		{"not of the site's form", a, "usr_1", "exc_5Rt2", "the ref is not of this website's form", nil},
	} {
		t.Run("ref "+tc.name, func(t *testing.T) {
			status, body := look(tc.ag, tc.user, tc.ref)
			why, _ := body["error_description"].(string)
			if status != http.StatusBadRequest || body["error"] != "invalid_request" || body["operation"] != nil || !strings.Contains(why, tc.says) {
				t.Fatalf("%d %v, want 400 invalid_request saying %q", status, body, tc.says)
			}
			for _, l := range tc.leaks {
				if strings.Contains(why, l) {
					t.Errorf("the reason names the other owner's %q", l)
				}
			}
		})
	}
	t.Run("ref expired", func(t *testing.T) {
		clk := testclock.At(time.Now().Add(11 * time.Minute))
		s.kit.Clock = clk.Now
		defer func() { s.kit.Clock = nil }()
		status, body := look(a, "usr_1", r1)
		if why, _ := body["error_description"].(string); status != http.StatusBadRequest || !strings.Contains(why, "expired at") || !strings.Contains(why, "A15") {
			t.Fatalf("%d %v", status, body)
		}
	})
	t.Run("ref stale: the website no longer knows its operation", func(t *testing.T) {
		before := s.kit.Store
		s.kit.Store = memstore.New(memstore.Config{}) // the store was cleared
		defer func() { s.kit.Store = before }()
		status, body := look(a, "usr_1", r1)
		if why, _ := body["error_description"].(string); status != http.StatusBadRequest || !strings.Contains(why, "the ref is stale") {
			t.Fatalf("%d %v", status, body)
		}
	})
	t.Run("approval of a revision the website never returned (check 3)", func(t *testing.T) {
		_, body := look(a, "usr_1", r1)
		op := body["operation"].(map[string]any)
		ap := userApproval(map[string]any{"operation_id": op["operation_id"], "revision": "1791487200-madeUpRevision"})
		status, body := rawCall(t, s, r1, good(nil), func(r *http.Request) { r.Header.Set(headers.Approval, ap) })
		why, _ := body["error_description"].(string)
		if status != http.StatusForbidden || body["error"] != "approval_required" || !strings.Contains(why, `check 3 failed: the approval names revision "1791487200-madeUpRevision"`) {
			t.Fatalf("%d %v", status, body)
		}
	})
	t.Run("off by default: only the code", func(t *testing.T) {
		s2 := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
		status, body := rawCall(t, s2, r1, "", nil)
		if status != http.StatusUnauthorized || len(body) != 1 || body["error"] != "invalid_session" {
			t.Fatalf("%d %v", status, body)
		}
	})
}
