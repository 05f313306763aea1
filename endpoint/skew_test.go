package endpoint_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// skewServer is one web server of a website: its own Kit and Mount on the
// shared store and cookie keys, its own clock, and a gated handler that
// counts what it runs with an approval and without one.
type skewServer struct {
	kit                  *webkit.Kit
	handler              http.Handler
	approved, unapproved atomic.Int64
	events               *gateLog
}

// gateLog is an Observer that keeps the Gate's outcomes.
type gateLog struct {
	mu  sync.Mutex
	got []string
}

func (l *gateLog) Observe(_ context.Context, e webkit.Event) {
	if e.Route == "gate" {
		l.mu.Lock()
		l.got = append(l.got, e.Outcome+"/"+e.Reason)
		l.mu.Unlock()
	}
}
func (l *gateLog) StoreStep(context.Context, string, time.Duration, error) {}

func (l *gateLog) count(outcome string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.got {
		if strings.HasPrefix(o, outcome+"/") {
			n++
		}
	}
	return n
}

func newSkewServer(t *testing.T, site *webkittest.Site, st store.Store, clock func() time.Time) *skewServer {
	t.Helper()
	s := &skewServer{events: &gateLog{}}
	s.kit = webkit.New(cookieKeys...)
	s.kit.Store, s.kit.Clock, s.kit.Observer = st, clock, s.events
	s.kit.Logger = slog.New(slog.DiscardHandler)
	s.kit.Sessions.(*webkit.CookieSessions).MaxAge = time.Hour
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/exchange", s.kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "exchange:" + r.PathValue("order"), Terms: map[string]string{"order": r.PathValue("order"), "size": r.PostFormValue("size")}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Counted at the handler: a run without a claim is an action
		// performed with no approval.
		if _, ok := webkit.ClaimOf(r); ok {
			s.approved.Add(1)
		} else {
			s.unapproved.Add(1)
		}
		fmt.Fprint(w, "exchanged")
	})))
	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: s.kit, Resolver: site.Resolver()})
	if err != nil {
		t.Fatal(err)
	}
	s.handler = m.Handler(mux)
	return s
}

// Two web servers of one website, sharing the store and the cookie keys,
// whose clocks are two minutes apart: a browser joined on either is the
// Session's on both, so that no gated request ever runs its handler
// without an approval (counted at the handler), and a join cookie one of
// them can't accept is refused there, never served as an ordinary
// browser's (W07, W53, DEPLOYING.md "Clocks").
func TestTwoServersTwoMinutesApart(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memstore.New(memstore.Config{}) },
		"redis": func(t *testing.T) store.Store {
			return redisstore.New(redistest.Start(t).Client(t), redisstore.Options{})
		},
	}
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			for _, joinOn := range []string{"fast", "slow"} {
				t.Run("joined on the "+joinOn+" server", func(t *testing.T) {
					testTwoServers(t, stores[name](t), joinOn)
				})
			}
		})
	}
}

func testTwoServers(t *testing.T, st store.Store, joinOn string) {
	slow := testclock.At(time.Date(2026, 10, 8, 11, 0, 0, 0, time.UTC))
	fast := func() time.Time { return slow.Now().Add(2 * time.Minute) }
	site := webkittest.New(origin)
	// The agent's clock is the server's it joins and approves on: its
	// Session JWTs have 30 s of leeway, which two minutes of skew exceed.
	site.Clock = slow.Now
	if joinOn == "fast" {
		site.Clock = fast
	}
	servers := map[string]*skewServer{
		"fast": newSkewServer(t, site, st, fast),
		"slow": newSkewServer(t, site, st, slow.Now),
	}
	other := map[string]string{"fast": "slow", "slow": "fast"}[joinOn]
	// The join and the endpoint are the joining server's; the browser's
	// gated requests go to each server in turn.
	var turn atomic.Int64
	site.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := joinOn
		if strings.HasPrefix(r.URL.Path, "/orders/") && turn.Add(1)%2 == 0 {
			name = other
		}
		servers[name].handler.ServeHTTP(w, r)
	})
	s := site.NewAgent().Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	unapproved := func() int64 { return servers["fast"].unapproved.Load() + servers["slow"].unapproved.Load() }
	performed := func() int64 { return servers["fast"].approved.Load() + servers["slow"].approved.Load() }

	// Through the binding's life, on both servers: every gated request
	// waits for approval, and an approved one performs once.
	for i := range 6 {
		for range 2 { // one request to each server
			res := b.PostForm(fmt.Sprintf("/orders/ord_%d/exchange", i), url.Values{"size": {"M"}})
			if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Ref == "" {
				t.Fatalf("request %d: %d %v (ref %q), want 403 with a ref on either server", i, res.StatusCode, res.Err, res.Ref)
			}
		}
		res := b.PostForm(fmt.Sprintf("/orders/ord_%d/exchange", i), url.Values{"size": {"M"}})
		if a := s.Approve(res.Ref); a.Err != nil || a.StatusCode != http.StatusNoContent {
			t.Fatalf("approve %d: %d %v %s", i, a.StatusCode, a.Err, a.Body)
		}
		if again := res.Continue(); again.Err != nil || again.StatusCode != http.StatusOK {
			t.Fatalf("continue %d: %d %v", i, again.StatusCode, again.Err)
		}
		slow.Add(10 * time.Minute) // up to and past the joining server's expiry of the cookie
	}
	if n := unapproved(); n != 0 {
		t.Fatalf("the handler ran %d times without an approval", n)
	}
	if n := performed(); n != 6 {
		t.Fatalf("performed %d approvals, want 6", n)
	}
	for name, srv := range servers {
		if n := srv.events.count("passed"); n != 0 {
			t.Errorf("%s server passed %d gated requests to the handler: %v", name, n, srv.events.got)
		}
	}

	// Past the cookie's expiry and the skew on each server's clock: refused
	// as a join the server can't accept, never the handler's.
	slow.Add(time.Hour)
	for range 4 {
		res := b.PostForm("/orders/ord_9/exchange", url.Values{"size": {"M"}})
		if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Ref != "" || !strings.Contains(string(res.Body), "join") {
			t.Fatalf("expired join: %d %v ref %q %.200s, want 403 saying to join again", res.StatusCode, res.Err, res.Ref, res.Body)
		}
	}
	if n := unapproved(); n != 0 {
		t.Fatalf("the handler ran %d times without an approval", n)
	}
	if n := servers["fast"].events.count("join_invalid") + servers["slow"].events.count("join_invalid"); n != 4 {
		t.Errorf("join_invalid observed %d times, want 4", n)
	}
	t.Logf("handler runs: %d approved, %d unapproved", performed(), unapproved())
}
