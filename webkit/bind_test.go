package webkit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestJoinCookieHostPrefix: issue 10 "Join": a Secure join cookie uses the
// __Host- prefix, unless its scope (Domain, Path) forbids it. Before the
// fix it was plain opsgate_join.
func TestJoinCookieHostPrefix(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		set  func(c *CookieSessions)
		want string
	}{
		{"Secure", func(*CookieSessions) {}, "__Host-opsgate_join"},
		{"Secure with a Name", func(c *CookieSessions) { c.Name = "j" }, "__Host-j"},
		{"Secure, Name already prefixed", func(c *CookieSessions) { c.Name = "__Host-j" }, "__Host-j"},
		{"Insecure", func(c *CookieSessions) { c.Insecure = true }, "opsgate_join"},
		{"Domain", func(c *CookieSessions) { c.Domain = "shop.example" }, "opsgate_join"},
		{"Path", func(c *CookieSessions) { c.Path = "/shop" }, "opsgate_join"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCookieSessions(testKeys...)
			tt.set(c)
			w := httptest.NewRecorder()
			if err := c.Bind(w, httptest.NewRequest("GET", "/", nil), sesOut); err != nil {
				t.Fatal(err)
			}
			ck := w.Result().Cookies()
			if len(ck) != 2 || ck[0].Name != tt.want || ck[1].Name != tt.want+"_bound" || c.name() != tt.want {
				t.Fatalf("cookies %v, name %q; want %q and its binding marker", ck, c.name(), tt.want)
			}
			if _, ok := sessionOf(c, ck[0]); !ok {
				t.Error("the cookie does not read back")
			}
		})
	}
}

// Bind refuses to rebind a browser bound to another agent's or User's
// Session (issue 10, login CSRF), from the join cookie or, on a
// cross-site POST that carries only the binding marker, from the marker;
// the same agent and User may replace their Session, and an expired
// binding is no conflict.
func TestBindBoundElsewhere(t *testing.T) {
	t.Parallel()
	c := newCookieSessions(testKeys...)
	a := Session{ID: "ses_1", Agent: "https://agent.example/a", User: "usr_1"}
	w := httptest.NewRecorder()
	if err := c.Bind(w, httptest.NewRequest("GET", "/", nil), a); err != nil {
		t.Fatal(err)
	}
	ck := w.Result().Cookies()
	main, mark := ck[0], ck[1]
	for name, cookies := range map[string][]*http.Cookie{"join cookie": {main, mark}, "marker only": {mark}} {
		r := httptest.NewRequest("POST", "/poppy/join", nil)
		for _, x := range cookies {
			r.AddCookie(x)
		}
		other := Session{ID: "ses_2", Agent: "https://agent.example/b", User: "usr_1"}
		if err := c.Bind(httptest.NewRecorder(), r, other); err != ErrBoundElsewhere {
			t.Errorf("%s: another agent's Bind: %v, want ErrBoundElsewhere", name, err)
		}
		same := Session{ID: "ses_3", Agent: a.Agent, User: a.User}
		if err := c.Bind(httptest.NewRecorder(), r, same); err != nil {
			t.Errorf("%s: the same agent and User: %v", name, err)
		}
	}
	t.Run("an expired binding is no conflict", func(t *testing.T) {
		clk := time.Now().Add(defaultJoinMaxAge + time.Hour)
		r := httptest.NewRequest("POST", "/poppy/join", nil)
		r.AddCookie(mark)
		r.AddCookie(main)
		later := newCookieSessions(testKeys...) // the Kit's keys
		later.clock = func() time.Time { return clk }
		if later.boundElsewhere(r, Session{Agent: "https://agent.example/b", User: "usr_1"}) {
			t.Error("an expired binding still conflicts")
		}
	})
}
