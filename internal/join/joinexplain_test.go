package join

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/jose"
)

// signAssertion signs claims as a browser join assertion of d, with the
// JOSE header typ given: what a careless agent may send.
func signAssertion(t *testing.T, d *agentside.Delegation, typ string, claims jwt.MapClaims) string {
	t.Helper()
	tok, err := jose.Sign("ES256", d.Signer(), map[string]any{"typ": typ, "poppy_dlg": d.Compact()}, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// With ExplainRefusals, the join's refusal says which check failed, one
// test per check a developer gets wrong; without it, only that the join
// could not be verified.
func TestJoinRefusalSaysWhy(t *testing.T) {
	t.Parallel()
	e := newJoinEnv(t)
	e.kit.ExplainRefusals = true
	d := e.agent(t, "careless")
	claims := func(change func(jwt.MapClaims)) jwt.MapClaims {
		now := time.Now()
		c := jwt.MapClaims{"iss": d.ClientID, "aud": joinURL, "sid": "ses_1", "sub": "usr_1", "iat": now.Unix(), "exp": now.Add(30 * time.Second).Unix(),
			"jti": "j" + time.Now().Format("150405.000000000"), "return_to": joinOrigin + "/after", "extensions": `"operations";v="3"`}
		change(c)
		return c
	}
	// Another key under the same client_id: its kid is not in the JWKS the
	// website loaded.
	rotated, err := agentside.NewAgentKeys(d.ClientID, "ES256")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := rotated.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The website loads the agent's keys with a join that works.
	if w := e.post(assertion(t, d, "ses_0", "usr_1", "", `"operations";v="3"`), ""); w.Code != http.StatusSeeOther {
		t.Fatalf("a good join: %d %s", w.Code, w.Body)
	}
	for _, tc := range []struct {
		name      string
		assertion string
		says      []string
	}{
		{"aud is the origin, not the join's URL", signAssertion(t, d, jose.TypBrowser, claims(func(c jwt.MapClaims) { c["aud"] = joinOrigin })),
			[]string{"browser assertion:", `aud "https://shop.example" is the website's origin: a join assertion's aud is the join's URL, "https://shop.example/poppy/join"`}},
		{"aud has a trailing slash", signAssertion(t, d, jose.TypBrowser, claims(func(c jwt.MapClaims) { c["aud"] = joinURL + "/" })),
			[]string{`aud "https://shop.example/poppy/join/" is not "https://shop.example/poppy/join"`}},
		{"typ of a Session JWT", signAssertion(t, d, jose.TypSession, claims(func(jwt.MapClaims) {})),
			[]string{`typ "poppy-session+jwt" is not "poppy-browser+jwt": that typ is a Session JWT's`}},
		{"return_to on another origin", signAssertion(t, d, jose.TypBrowser, claims(func(c jwt.MapClaims) { c["return_to"] = "https://127.0.0.1/after" })),
			[]string{`return_to "https://127.0.0.1/after" is on https://127.0.0.1, not on this website's origin https://shop.example`, "different origins"}},
		{"extensions as an array", signAssertion(t, d, jose.TypBrowser, claims(func(c jwt.MapClaims) { c["extensions"] = []string{"operations"} })),
			[]string{"claim extensions must be a string in the Poppy-Extensions syntax", "not a JSON array"}},
		{"an unknown key", signAssertion(t, stranger, jose.TypBrowser, claims(func(jwt.MapClaims) {})),
			[]string{"poppy_dlg:", "is not in the key set of " + d.ClientID, "at most every 30s, next after"}},
		{"expired", signAssertion(t, d, jose.TypBrowser, claims(func(c jwt.MapClaims) {
			c["iat"], c["exp"] = time.Now().Add(-5*time.Minute).Unix(), time.Now().Add(-4*time.Minute).Unix()
		})), []string{"exp ", "has passed: the website's clock says"}},
		{"lives too long", signAssertion(t, d, jose.TypBrowser, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(10 * time.Minute).Unix() })),
			[]string{"exp − iat is 10m0s: it must be more than 0 and at most 1m0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.post(tc.assertion, "")
			body := w.Body.String()
			if w.Code != http.StatusUnauthorized || !strings.HasPrefix(body, "the join could not be verified (invalid_session): ") {
				t.Fatalf("%d %q", w.Code, body)
			}
			for _, s := range tc.says {
				if !strings.Contains(body, s) {
					t.Errorf("the refusal %q does not say %q", body, s)
				}
			}
			for _, secret := range []string{tc.assertion, d.Compact()} {
				if strings.Contains(body, secret[:40]) {
					t.Error("the refusal shows a token")
				}
			}
		})
	}
	t.Run("off by default", func(t *testing.T) {
		e := newJoinEnv(t)
		d := e.agent(t, "quiet")
		w := e.post(signAssertion(t, d, jose.TypBrowser, jwt.MapClaims{"iss": d.ClientID, "aud": joinOrigin, "sid": "s", "sub": "u",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix(), "jti": "j", "return_to": joinOrigin + "/"}), "")
		if w.Code != http.StatusUnauthorized || strings.TrimSpace(w.Body.String()) != "the join could not be verified" {
			t.Errorf("%d %q", w.Code, w.Body)
		}
	})
}
