package webkit

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func bindCookie(t *testing.T, c *CookieSessions, s Session) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := c.Bind(rec, httptest.NewRequest("GET", "/", nil), s); err != nil {
		t.Fatal(err)
	}
	cs := rec.Result().Cookies()
	if len(cs) != 2 || cs[1].Name != cs[0].Name+"_bound" {
		t.Fatalf("Bind set %v, want the join cookie and its binding marker", cs)
	}
	return cs[0]
}

func sessionOf(c *CookieSessions, cookies ...*http.Cookie) (Session, bool) {
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: "other", Value: "x"})
	for _, ck := range cookies {
		r.AddCookie(ck)
	}
	return c.SessionOf(r)
}

func TestCookieSessionsRoundTrip(t *testing.T) {
	t.Parallel()
	c := newCookieSessions(testKeys...)
	ck := bindCookie(t, c, sesIn)
	got, ok := sessionOf(c, ck)
	if !ok || !reflect.DeepEqual(got, sesIn) {
		t.Fatalf("SessionOf = %+v %v, want %+v", got, ok, sesIn)
	}
	// The cookie's attributes (issue 3): HttpOnly, Secure, SameSite=Lax,
	// bounded lifetime; the __Host- prefix (issue 10).
	if ck.Name != "__Host-"+joinCookieName || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteLaxMode || ck.MaxAge != int(defaultJoinMaxAge/time.Second) || ck.Path != "/" {
		t.Errorf("cookie attributes: %+v", ck)
	}
	// Encrypted: nothing of the Session is readable in it.
	for _, s := range []string{sesIn.ID, sesIn.Account, sesIn.User, "operations"} {
		if strings.Contains(ck.Value, s) {
			t.Errorf("cookie shows %q", s)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(ck)
	if at, ok := c.joinedAt(r); !ok || time.Since(at) > time.Minute {
		t.Errorf("JoinedAt = %v %v", at, ok)
	}
}

func TestCookieSessionsRefuses(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := newCookieSessions(testKeys...)
	c.clock = clk.Now
	ck := bindCookie(t, c, sesOut)

	tampered := *ck
	tampered.Value = ck.Value[:len(ck.Value)-2] + "AA"
	other := newCookieSessions([]byte("another hash key of 32 bytes...."), []byte("another enc key of 32 bytes....."))

	tests := []struct {
		name    string
		c       *CookieSessions
		cookies []*http.Cookie
		move    time.Duration
	}{
		{"no cookie", c, nil, 0},
		{"tampered", c, []*http.Cookie{&tampered}, 0},
		{"other keys", other, []*http.Cookie{ck}, 0},
		{"empty value", c, []*http.Cookie{{Name: c.name(), Value: ""}}, 0},
		{"garbage", c, []*http.Cookie{{Name: c.name(), Value: "not-a-cookie"}}, 0},
		{"past its expiry and the skew on the clock", c, []*http.Cookie{ck}, defaultJoinMaxAge + joinSkew + time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.Add(tt.move)
			defer clk.Add(-tt.move)
			if s, ok := sessionOf(tt.c, tt.cookies...); ok {
				t.Errorf("SessionOf = %+v, want none", s)
			}
			// A join cookie that is there but can't be accepted is not an
			// ordinary browser's: the Gate refuses its gated requests.
			r := httptest.NewRequest("GET", "/", nil)
			for _, ck := range tt.cookies {
				r.AddCookie(ck)
			}
			want := bindUnusable
			if len(tt.cookies) == 0 {
				want = bindNone
			}
			if _, st := tt.c.current(r); st != want {
				t.Errorf("state %d, want %d", st, want)
			}
		})
	}
	if _, ok := sessionOf(c, ck); !ok {
		t.Error("the good cookie no longer works")
	}
}

// A join cookie's validity is its expiry, decided by the server that
// joined it: a server whose clock is behind (the cookie's join time is
// in its future) or ahead (by up to joinSkew past the expiry) still reads
// it as the binding.
func TestCookieSessionsSkew(t *testing.T) {
	t.Parallel()
	ahead, behind := newClock(), newClock()
	ahead.Add(2 * time.Hour) // far more than any real skew: never refused for the future
	joiner := newCookieSessions(testKeys...)
	joiner.clock = ahead.Now
	reader := newCookieSessions(testKeys...)
	reader.clock = behind.Now
	ck := bindCookie(t, joiner, sesOut)
	if s, ok := sessionOf(reader, ck); !ok || s.ID != sesOut.ID {
		t.Fatalf("joined on a server 2 h ahead: %+v %v, want the binding", s, ok)
	}
	// The reader's clock reaches the joiner's expiry, then passes it by
	// less than the skew: still the binding.
	behind.Add(2*time.Hour + defaultJoinMaxAge + joinSkew - time.Second)
	if _, ok := sessionOf(reader, ck); !ok {
		t.Fatal("refused within the skew after its expiry")
	}
	behind.Add(2 * time.Second)
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(ck)
	if _, st := reader.current(r); st != bindUnusable {
		t.Fatalf("past its expiry and the skew: state %d, want unusable", st)
	}
}

func TestCookieSessionsKeyRotation(t *testing.T) {
	t.Parallel()
	oldPair := testKeys
	newPair := [][]byte{[]byte("new hash key of thirty-two bytes"), []byte("new encryption key of 32 bytes!!")}
	old := newCookieSessions(oldPair...)
	ck := bindCookie(t, old, sesIn)
	rotated := newCookieSessions(append(append([][]byte{}, newPair...), oldPair...)...)
	if _, ok := sessionOf(rotated, ck); !ok {
		t.Fatal("a cookie under the old keys is refused after rotation")
	}
	fresh := bindCookie(t, rotated, sesIn)
	if _, ok := sessionOf(old, fresh); ok {
		t.Error("new cookies are still written with the old keys")
	}
	if _, ok := sessionOf(newCookieSessions(newPair...), fresh); !ok {
		t.Error("new cookie not readable with the new keys alone")
	}
}

func TestCookieSessionsOptionsAndUnbind(t *testing.T) {
	t.Parallel()
	c := newCookieSessions(testKeys...)
	c.Insecure, c.MaxAge, c.Name, c.Path = true, time.Hour, "join", "/shop"
	ck := bindCookie(t, c, sesOut)
	if ck.Secure || ck.MaxAge != 3600 || ck.Name != "join" || ck.Path != "/shop" {
		t.Errorf("%+v", ck)
	}
	rec := httptest.NewRecorder()
	if err := c.Unbind(rec, httptest.NewRequest("GET", "/", nil)); err != nil {
		t.Fatal(err)
	}
	gone := rec.Result().Cookies()
	// The join cookie and the join's binding marker (issue 10) both expire.
	if len(gone) != 2 || gone[0].MaxAge >= 0 || gone[0].Name != "join" || gone[0].Value != "" ||
		gone[1].MaxAge >= 0 || gone[1].Name != "join_bound" {
		t.Errorf("Unbind cookies %+v", gone)
	}
}

func TestCookieSessionsBindNeedsIDs(t *testing.T) {
	t.Parallel()
	c := newCookieSessions(testKeys...)
	for _, s := range []Session{{Agent: "a", User: "u"}, {ID: "s", User: "u"}, {ID: "s", Agent: "a"}} {
		if err := c.Bind(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), s); err == nil {
			t.Errorf("Bind(%+v) = nil", s)
		}
	}
}

func TestHasCookie(t *testing.T) {
	for _, tt := range []struct {
		header string
		want   bool
	}{
		{"", false},
		{"opsgate_join=abc", true},
		{"a=1; opsgate_join=abc; b=2", true},
		{"a=1;opsgate_join=abc", true},
		{"xopsgate_join=abc", false},
		{"opsgate_join_x=abc", false},
		{"opsgate_join", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if tt.header != "" {
			r.Header.Set("Cookie", tt.header)
		}
		if got := hasCookie(r, joinCookieName); got != tt.want {
			t.Errorf("hasCookie(%q) = %v", tt.header, got)
		}
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Cookie", "a=1; b=2; session=xyz")
	if n := testing.AllocsPerRun(100, func() { hasCookie(r, joinCookieName) }); n != 0 {
		t.Errorf("hasCookie allocates %v", n)
	}
}
