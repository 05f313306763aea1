package join

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

var testKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}

const (
	joinOrigin = "https://shop.example"
	joinURL    = joinOrigin + "/poppy/join"
)

// joinEnv is a Kit with the kit's Join, and a server of agents: any path
// under /agent/ is an agent whose client_id is that URL.
type joinEnv struct {
	kit  *webkit.Kit
	join *joinEndpoint
	srv  *httptest.Server

	mu     sync.Mutex
	agents map[string]*agentside.AgentKeys // by client_id
}

func newJoinEnv(t testing.TB) *joinEnv {
	t.Helper()
	e := &joinEnv{agents: map[string]*agentside.AgentKeys{}}
	e.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, jwks := strings.CutSuffix(e.srv.URL+r.URL.Path, "/jwks")
		e.mu.Lock()
		k := e.agents[id]
		e.mu.Unlock()
		if k == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if jwks {
			w.Write(k.JWKS())
			return
		}
		w.Write(k.Metadata(id+"/jwks", "Agent"))
	}))
	t.Cleanup(e.srv.Close)
	e.kit = webkit.New(testKeys...)
	e.kit.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e.join = &joinEndpoint{Kit: e.kit, URL: joinURL, Verifier: &siteverify.Verifier{
		Origin:   joinOrigin,
		Resolver: &identity.Resolver{HTTPClient: e.srv.Client(), AllowLocal: true},
		Replay:   memstore.New(memstore.Config{}),
	}}
	return e
}

// agent makes an agent at path (under /agent/) and a delegation of it.
func (e *joinEnv) agent(t testing.TB, path string) *agentside.Delegation {
	t.Helper()
	id := e.srv.URL + "/agent/" + path
	k, err := agentside.NewAgentKeys(id, "ES256")
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.agents[id] = k
	e.mu.Unlock()
	d, err := k.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func assertion(t testing.TB, d *agentside.Delegation, sid, user, accessToken, extensions string) string {
	t.Helper()
	a, err := d.BrowserAssertion(agentside.BrowserClaims{
		SessionClaims: agentside.SessionClaims{Audience: joinURL, SID: sid, User: user, AccessToken: accessToken, Lifetime: 30 * time.Second},
		ReturnTo:      joinOrigin + "/after",
		Extensions:    extensions,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// post posts a join form with cookies.
func (e *joinEnv) post(assertion, accessToken string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	form := url.Values{"assertion": {assertion}}
	if accessToken != "" {
		form.Set("access_token", accessToken)
	}
	r := httptest.NewRequest(http.MethodPost, joinURL, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	e.join.ServeHTTP(w, r)
	return w
}

// cookies returns the cookies a join answer set, by name.
func cookies(w *httptest.ResponseRecorder) map[string]*http.Cookie {
	m := map[string]*http.Cookie{}
	for _, c := range w.Result().Cookies() {
		m[c.Name] = c
	}
	return m
}

func (e *joinEnv) sessionOf(cs ...*http.Cookie) (webkit.Session, bool) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for _, c := range cs {
		r.AddCookie(c)
	}
	return e.kit.Sessions.SessionOf(r)
}

const declared = `"operations";v="3"`

func TestJoinBinds(t *testing.T) {
	t.Parallel()
	e := newJoinEnv(t)
	d := e.agent(t, "a")
	w := e.post(assertion(t, d, "ses_1", "usr_1", "", declared), "")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != joinOrigin+"/after" {
		t.Fatalf("join: %d %q", w.Code, w.Header().Get("Location"))
	}
	cs := cookies(w)
	main, mark := cs["__Host-opsgate_join"], cs["__Host-opsgate_join_bound"]
	if main == nil || mark == nil {
		t.Fatalf("cookies %v, want the __Host- join cookie and its marker", cs)
	}
	// Issue 10: when Secure, the __Host- prefix (Secure, Path=/, no Domain).
	for _, c := range []*http.Cookie{main, mark} {
		if !c.Secure || c.Path != "/" || c.Domain != "" || !c.HttpOnly {
			t.Errorf("cookie %s: %+v", c.Name, c)
		}
	}
	if main.SameSite != http.SameSiteLaxMode || mark.SameSite != http.SameSiteNoneMode {
		t.Errorf("SameSite: join %v, marker %v; want Lax and None", main.SameSite, mark.SameSite)
	}
	s, ok := e.sessionOf(main)
	if !ok || s.ID != "ses_1" || s.User != "usr_1" || !headers.DeclaresOperations(s.Extensions) {
		t.Errorf("SessionOf = %+v %v", s, ok)
	}
	// The marker alone is no binding: it authorizes nothing.
	if _, ok := e.sessionOf(mark); ok {
		t.Error("the marker cookie binds the browser")
	}
}

// TestJoinBounded: issue 10 "Join": whatever the claims, a join answers
// 303, 400 or 401, never 5xx; the binding keeps only the operations
// declaration. Before the fix a 2 KB client_id or 500 declared extensions
// overflowed the cookie: 500, after the jti was used up.
func TestJoinBounded(t *testing.T) {
	t.Parallel()
	e := newJoinEnv(t)
	many := make([]string, 500)
	for i := range many {
		many[i] = fmt.Sprintf(`"x%d";v="1"`, i)
	}
	manyExt := strings.Join(append(many, declared), ", ")
	t.Run("client_id of 2 KB is 401", func(t *testing.T) {
		d := e.agent(t, strings.Repeat("a", 2000))
		w := e.post(assertion(t, d, "ses_1", "usr_1", "", declared), "")
		if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != `Poppy-Session error="invalid_session"` {
			t.Errorf("status %d, challenge %q", w.Code, w.Header().Get("WWW-Authenticate"))
		}
	})
	t.Run("500 declared extensions keep only operations", func(t *testing.T) {
		d := e.agent(t, "many")
		w := e.post(assertion(t, d, "ses_1", "usr_1", "", manyExt), "")
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		s, ok := e.sessionOf(cookies(w)["__Host-opsgate_join"])
		if !ok || len(s.Extensions) != 1 || !headers.DeclaresOperations(s.Extensions) {
			t.Errorf("SessionOf = %+v %v, want only operations", s, ok)
		}
	})
	t.Run("an operations version of 1 KB declares nothing", func(t *testing.T) {
		d := e.agent(t, "longversion")
		w := e.post(assertion(t, d, "ses_1", "usr_1", "", `"operations";v="3.`+strings.Repeat("1", 1000)+`"`), "")
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if s, ok := e.sessionOf(cookies(w)["__Host-opsgate_join"]); !ok || len(s.Extensions) != 0 {
			t.Errorf("SessionOf = %+v %v, want no extensions", s, ok)
		}
	})
	t.Run("the largest binding fits", func(t *testing.T) {
		d := e.agent(t, strings.Repeat("b", maxJoinClientID-len(e.srv.URL+"/agent/")))
		e.join.AccessTokens = accessTokens(func(string) (identity.AccessToken, error) {
			return identity.AccessToken{ClientID: d.ClientID, Account: strings.Repeat("c", maxJoinAccount)}, nil
		})
		defer func() { e.join.AccessTokens = nil }()
		w := e.post(assertion(t, d, strings.Repeat("s", 255), strings.Repeat("u", 255), "tok", `"operations";v="3.`+strings.Repeat("9", maxJoinVersion-2)+`"`), "tok")
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if s, ok := e.sessionOf(cookies(w)["__Host-opsgate_join"]); !ok || !(s.Account != "") {
			t.Errorf("SessionOf = %+v %v", s, ok)
		}
	})
	t.Run("sid over 255 bytes is 401", func(t *testing.T) {
		d := e.agent(t, "longsid")
		w := e.post(assertion(t, d, strings.Repeat("s", 256), "usr_1", "", declared), "")
		if w.Code != http.StatusUnauthorized {
			t.Errorf("status %d", w.Code)
		}
	})
	t.Run("sub over 255 bytes is 401", func(t *testing.T) {
		d := e.agent(t, "longsub")
		w := e.post(assertion(t, d, "ses_1", strings.Repeat("u", 256), "", declared), "")
		if w.Code != http.StatusUnauthorized {
			t.Errorf("status %d", w.Code)
		}
	})
	t.Run("an account over 255 bytes is 401", func(t *testing.T) {
		d := e.agent(t, "longaccount")
		e.join.AccessTokens = accessTokens(func(string) (identity.AccessToken, error) {
			return identity.AccessToken{ClientID: d.ClientID, Account: strings.Repeat("c", maxJoinAccount+1)}, nil
		})
		defer func() { e.join.AccessTokens = nil }()
		w := e.post(assertion(t, d, "ses_1", "usr_1", "tok", declared), "tok")
		if w.Code != http.StatusUnauthorized {
			t.Errorf("status %d", w.Code)
		}
	})
}

type accessTokens func(string) (identity.AccessToken, error)

func (f accessTokens) VerifyAccessToken(_ context.Context, token string) (identity.AccessToken, error) {
	return f(token)
}

// TestJoinSpendsJTIOnlyOnSuccess: issue 10 "Join": the jti is used up only
// once the join can succeed, so an assertion refused for another reason (the
// access token's issuer down: 503) can be posted again. Before the fix the
// retry was a replay: 401.
func TestJoinSpendsJTIOnlyOnSuccess(t *testing.T) {
	t.Parallel()
	e := newJoinEnv(t)
	d := e.agent(t, "a")
	var down atomic.Bool
	down.Store(true)
	e.join.AccessTokens = accessTokens(func(string) (identity.AccessToken, error) {
		if down.Load() {
			return identity.AccessToken{}, fmt.Errorf("%w: token server down", identity.ErrUnavailable)
		}
		return identity.AccessToken{ClientID: d.ClientID, Account: "acct_1"}, nil
	})
	a := assertion(t, d, "ses_1", "usr_1", "tok", declared)
	if w := e.post(a, "tok"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("token server down: status %d", w.Code)
	}
	down.Store(false)
	if w := e.post(a, "tok"); w.Code != http.StatusSeeOther {
		t.Fatalf("retry: status %d: %s", w.Code, w.Body)
	}
	// Used up once joined: the same assertion again is a replay.
	if w := e.post(a, "tok"); w.Code != http.StatusUnauthorized {
		t.Errorf("replay after the join: status %d", w.Code)
	}
}

// TestJoinConflict: issue 10 "Join": a join into a browser bound to another
// agent or User is refused with 409 and a short page, and does not touch
// the binding; the same agent and User replace their Session. The join
// cookie (SameSite=Lax) is sent on a same-site join; a cross-site form POST
// (login CSRF) carries only the SameSite=None marker, which is enough.
// Before the fix every join rebound the browser.
func TestJoinConflict(t *testing.T) {
	t.Parallel()
	e := newJoinEnv(t)
	a := e.agent(t, "a")
	b := e.agent(t, "b")
	first := e.post(assertion(t, a, "ses_1", "usr_1", "", declared), "")
	if first.Code != http.StatusSeeOther {
		t.Fatalf("first join: %d", first.Code)
	}
	cs := cookies(first)
	main, mark := cs["__Host-opsgate_join"], cs["__Host-opsgate_join_bound"]
	for _, tt := range []struct {
		name    string
		d       *agentside.Delegation
		user    string
		cookies []*http.Cookie
	}{
		{"another User, same-site", a, "usr_2", []*http.Cookie{main, mark}},
		{"another User, cross-site (marker only)", a, "usr_2", []*http.Cookie{mark}},
		{"another agent, same-site", b, "usr_1", []*http.Cookie{main, mark}},
		{"another agent, cross-site (marker only)", b, "usr_1", []*http.Cookie{mark}},
		{"another agent, join cookie only", b, "usr_1", []*http.Cookie{main}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asr := assertion(t, tt.d, "ses_x", tt.user, "", declared)
			w := e.post(asr, "", tt.cookies...)
			if w.Code != http.StatusConflict || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
				t.Fatalf("status %d %q, want 409 with a page", w.Code, w.Header().Get("Content-Type"))
			}
			if len(w.Result().Cookies()) != 0 {
				t.Error("a refused join set cookies")
			}
			if !strings.Contains(w.Body.String(), "already joined") {
				t.Errorf("page: %s", w.Body)
			}
			// Refused, so not spent: a browser that isn't bound can use it.
			if w := e.post(asr, ""); w.Code != http.StatusSeeOther {
				t.Errorf("the assertion in an unbound browser: %d", w.Code)
			}
		})
	}
	t.Run("same agent and User replace their Session", func(t *testing.T) {
		w := e.post(assertion(t, a, "ses_2", "usr_1", "", declared), "", main, mark)
		if w.Code != http.StatusSeeOther {
			t.Fatalf("status %d", w.Code)
		}
		if s, ok := e.sessionOf(cookies(w)["__Host-opsgate_join"]); !ok || s.ID != "ses_2" {
			t.Errorf("SessionOf = %+v %v, want ses_2", s, ok)
		}
	})
	t.Run("after Unbind another agent may join", func(t *testing.T) {
		rec := httptest.NewRecorder()
		if err := e.kit.Sessions.Unbind(rec, httptest.NewRequest("GET", "/", nil)); err != nil {
			t.Fatal(err)
		}
		gone := cookies(rec)
		if c := gone["__Host-opsgate_join_bound"]; c == nil || c.MaxAge >= 0 {
			t.Fatalf("Unbind did not expire the marker: %v", gone)
		}
		if w := e.post(assertion(t, b, "ses_3", "usr_1", "", declared), ""); w.Code != http.StatusSeeOther {
			t.Errorf("status %d", w.Code)
		}
	})
}

// TestJoinChallenge: every 401 of the join carries WWW-Authenticate
// Poppy-Session error="invalid_session" (RULES.md choice 5; RFC 9110
// §15.5.2). Before the fix it carried none.
func TestJoinChallenge(t *testing.T) {
	t.Parallel()
	e := newJoinEnv(t)
	d := e.agent(t, "a")
	for name, w := range map[string]*httptest.ResponseRecorder{
		"garbage assertion":          e.post("a.b.c", ""),
		"signed-in join, no support": e.post(assertion(t, d, "ses_1", "usr_1", "tok", declared), "tok"),
	} {
		if w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != `Poppy-Session error="invalid_session"` {
			t.Errorf("%s: status %d, challenge %q", name, w.Code, w.Header().Get("WWW-Authenticate"))
		}
	}
}

// FuzzJoin posts arbitrary join forms, content types and cookies: the join
// answers 303, 400, 401 or 409, never 5xx, and every 401 carries its
// challenge. Agents are only those of the env's server: any other host is
// NXDOMAIN (ErrInvalid), so that no input reaches the network.
func FuzzJoin(f *testing.F) {
	e := newJoinEnv(f)
	host := strings.TrimPrefix(e.srv.URL, "https://")
	inner := e.srv.Client().Transport
	e.join.Verifier.Resolver = &identity.Resolver{AllowLocal: true, HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != host {
			return nil, &net.DNSError{Err: "no such host", Name: r.URL.Hostname(), IsNotFound: true}
		}
		return inner.RoundTrip(r)
	})}}
	d := e.agent(f, "a")
	first := e.post(assertion(f, d, "ses_0", "usr_0", "", declared), "")
	bound := ""
	for _, c := range first.Result().Cookies() {
		bound += c.Name + "=" + c.Value + "; "
	}
	form := "application/x-www-form-urlencoded"
	for i, ext := range []string{declared, "", `"operations";v="3", "x";v="1"`, `operations`} {
		body := url.Values{"assertion": {assertion(f, d, fmt.Sprintf("ses_%d", i), "usr_0", "", ext)}}.Encode()
		f.Add(body, form, "")
		f.Add(body, form, bound)
	}
	f.Add(url.Values{"assertion": {assertion(f, d, "ses_x", "usr_other", "", declared)}}.Encode(), form, bound)
	f.Add(url.Values{"assertion": {assertion(f, d, "ses_t", "usr_0", "tok", declared)}, "access_token": {"tok"}}.Encode(), form, "")
	f.Add("assertion=a.b.c", form, "")
	f.Add("assertion=a&assertion=b", form, "")
	f.Add("", form, "")
	f.Add("%zz", form, "")
	f.Add("assertion=x", "multipart/form-data; boundary=x", "")
	f.Fuzz(func(t *testing.T, body, contentType, cookie string) {
		r := httptest.NewRequest(http.MethodPost, joinURL, strings.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		if cookie != "" {
			r.Header.Set("Cookie", cookie)
		}
		w := httptest.NewRecorder()
		e.join.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusSeeOther:
			if !strings.HasPrefix(w.Header().Get("Location"), joinOrigin+"/") || len(w.Result().Cookies()) != 2 {
				t.Fatalf("303 to %q with %d cookies", w.Header().Get("Location"), len(w.Result().Cookies()))
			}
		case http.StatusUnauthorized:
			if w.Header().Get("WWW-Authenticate") != `Poppy-Session error="invalid_session"` {
				t.Fatal("401 without its challenge")
			}
		case http.StatusBadRequest, http.StatusConflict:
		default:
			t.Fatalf("status %d for body %q content type %q: %s", w.Code, body, contentType, w.Body)
		}
		if w.Code != http.StatusSeeOther && len(w.Result().Cookies()) != 0 {
			t.Fatalf("status %d set cookies", w.Code)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
