package shop

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// The harness's browsers reach the shop from 192.0.2.1 (webkittest): the
// shop behind a proxy there, each browser's network in X-Forwarded-For.
var harnessProxy = []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32")}

func fromNetwork(b *webkittest.Browser, ip string) *webkittest.Browser {
	if b.Header == nil {
		b.Header = http.Header{}
	}
	b.Header.Set("X-Forwarded-For", ip)
	return b
}

// The public demo's break: 1,000 made-up client_ids, with one User each,
// evicted another agent's sandbox. Made-up agents cost nothing, a network
// does: sandboxes have a budget per source, and the 1,000 agents from one
// network make room from their own.
func TestMadeUpAgentsKeepOthersSandboxes(t *testing.T) {
	t.Parallel()
	c := testclock.At(t0)
	site := webkittest.New("https://shop.test")
	site.Clock = c.Now
	s, err := NewServer(Config{BaseURL: site.Origin, Clock: c.Now, Logger: quiet, HTTPClient: site.Resolver().HTTPClient, TrustedProxies: harnessProxy})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = s.Handler()
	victim := site.NewAgent()
	sv := victim.Session("usr_victim")
	bv := fromNetwork(joinAs(t, sv), "198.51.100.7")
	perform(t, sv, bv, exchangeTo(bv, "stormline-insulated-m"))

	for i := range 1000 {
		b := fromNetwork(joinAs(t, site.NewAgent().Session("usr_1")), fmt.Sprint("203.0.113.", i%250))
		if res := b.Get("/account"); res.StatusCode != 200 {
			t.Fatalf("made-up agent %d: %d", i, res.StatusCode)
		}
	}
	if n := s.Sandboxes(); n > shopdb.DefaultMaxPerSource+2 {
		t.Errorf("%d sandboxes kept after 1,000 made-up agents from one network, want at most its budget %d and the others'", n, shopdb.DefaultMaxPerSource)
	}
	if o, _ := s.Sandbox(victim.ClientID(), "usr_victim").Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-insulated-m" {
		t.Fatalf("1,000 made-up agents evicted another agent's sandbox: the item is %s", o.Items[0].SKU)
	}
	if page := bv.Get("/orders/ord_7Hk2"); !strings.Contains(string(page.Body), "Stormline Insulated Jacket (M)") {
		t.Error("the victim's order page doesn't show its exchange")
	}
}

// The source of a request: the peer, or behind a trusted proxy the last
// address in X-Forwarded-For that isn't a proxy's, counted by network.
func TestSourceOf(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}}}
	for _, tc := range []struct {
		peer, xff, want string
	}{
		{"203.0.113.9:5000", "", "203.0.113.0/24"},
		{"203.0.113.9:5000", "198.51.100.1", "203.0.113.0/24"}, // an untrusted peer's header is its own word
		{"127.0.0.1:5000", "198.51.100.1", "198.51.100.0/24"},
		{"127.0.0.1:5000", "6.6.6.6, 198.51.100.1", "198.51.100.0/24"}, // the client's own claim comes first
		{"127.0.0.1:5000", "198.51.100.1, 10.1.2.3", "198.51.100.0/24"},
		{"127.0.0.1:5000", "", "127.0.0.0/24"},
		{"[2001:db8:1:2::7]:5000", "", "2001:db8:1::/48"},
		{"127.0.0.1:5000", "not-an-address", "127.0.0.0/24"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := s.sourceOf(r); got != tc.want {
			t.Errorf("peer %s, X-Forwarded-For %q: %s, want %s", tc.peer, tc.xff, got, tc.want)
		}
	}
}

// Sign-in, the confirmation's password and the staff credential slow
// down after repeated failures from a network: past five wrong ones in a
// row, each attempt waits a time that doubles, and one made sooner gets
// 429 with Retry-After and is not checked, the right secret too. The
// shop's clock is the test's: nothing sleeps.
func TestWrongSecretsSlowDown(t *testing.T) {
	t.Parallel()
	for _, secret := range []struct {
		name, path, field string
		right             func(*Server) string
		okStatus          int
	}{
		{"customer password", "/signin", "password", func(s *Server) string { return s.cfg.CustomerPassword }, http.StatusSeeOther},
		{"staff credential", "/admin/signin", "staff", func(s *Server) string { return s.cfg.StaffCredential }, http.StatusSeeOther},
	} {
		t.Run(secret.name, func(t *testing.T) {
			t.Parallel()
			c := testclock.At(t0)
			s, err := NewServer(Config{BaseURL: "https://shop.test", Clock: c.Now, Logger: quiet, CustomerPassword: "right-password", StaffCredential: "right-staff"})
			if err != nil {
				t.Fatal(err)
			}
			try := func(peer, value string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "https://shop.test"+secret.path, strings.NewReader(url.Values{secret.field: {value}}.Encode()))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.Header.Set("Origin", "https://shop.test")
				r.RemoteAddr = peer
				w := httptest.NewRecorder()
				s.Handler().ServeHTTP(w, r)
				return w
			}
			const guesser, other = "203.0.113.9:4000", "198.51.100.7:4000"
			for i := range freeFailures {
				if w := try(guesser, fmt.Sprint("guess-", i)); w.Code != http.StatusUnauthorized {
					t.Fatalf("wrong %d: %d, want 401", i+1, w.Code)
				}
			}
			// The fifth wrong one set a wait of a second: anything sooner,
			// even the right secret, is refused unchecked.
			w := try(guesser, secret.right(s))
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
				t.Fatalf("right secret right after 5 wrong: %d Retry-After %q, want 429 and 1", w.Code, w.Header().Get("Retry-After"))
			}
			// Another network is not slowed.
			if w := try(other, "guess"); w.Code != http.StatusUnauthorized {
				t.Errorf("another network's first wrong one: %d, want 401", w.Code)
			}
			// Each further failure doubles the wait: 2 s, 4 s, 8 s.
			for _, want := range []int{2, 4, 8} {
				retry, _ := strconv.Atoi(try(guesser, "x").Header().Get("Retry-After"))
				c.Add(time.Duration(retry) * time.Second)
				if w := try(guesser, "guess"); w.Code != http.StatusUnauthorized {
					t.Fatalf("after waiting %d s: %d, want the guess checked (401)", retry, w.Code)
				}
				if got, _ := strconv.Atoi(try(guesser, "x").Header().Get("Retry-After")); got != want {
					t.Fatalf("wait after another failure: %d s, want %d", got, want)
				}
			}
			// 1,000 guesses made at once are all refused unchecked.
			for range 1000 {
				if w := try(guesser, "guess"); w.Code != http.StatusTooManyRequests {
					t.Fatalf("a guess during the wait: %d, want 429", w.Code)
				}
			}
			// Once the wait is over, the right secret works and clears it.
			c.Add(9 * time.Second)
			if w := try(guesser, secret.right(s)); w.Code != secret.okStatus {
				t.Fatalf("right secret after the wait: %d, want %d", w.Code, secret.okStatus)
			}
			if w := try(guesser, "guess"); w.Code != http.StatusUnauthorized {
				t.Errorf("after the right one: %d, want a fresh start (401)", w.Code)
			}
		})
	}
}
