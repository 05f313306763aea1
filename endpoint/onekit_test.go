package endpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// stepLog is an Observer that keeps the store steps it sees, by route.
type stepLog struct {
	mu     sync.Mutex
	steps  []string
	events []string
}

func (l *stepLog) Observe(_ context.Context, e webkit.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e.Route+"/"+e.Outcome)
}

func (l *stepLog) StoreStep(_ context.Context, step string, _ time.Duration, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, step)
}

func (l *stepLog) has(list func(*stepLog) []string, want string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range list(l) {
		if s == want {
			return true
		}
	}
	return false
}

// stalled is a store whose every call waits for its context to end, and
// keeps the deadline it was given.
type stalled struct {
	storedriver.Store
	mu        sync.Mutex
	deadlines []time.Duration
}

func (s *stalled) wait(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		s.mu.Lock()
		s.deadlines = append(s.deadlines, time.Until(d))
		s.mu.Unlock()
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *stalled) Lookup(ctx context.Context, _ store.Owner, _ string, _ time.Time) (storedriver.Found, bool, error) {
	return storedriver.Found{}, false, s.wait(ctx)
}

func (s *stalled) UseOnce(ctx context.Context, _ string, _, _ time.Time) (bool, error) {
	return false, s.wait(ctx)
}

// One Kit (issue 34): the Kit's Store, Clock, Logger, Observer and
// StoreTimeout set after endpoint.NewMount are the ones the endpoint and
// the join use, as the Gate does: an approval is recorded in the store the
// Gate takes it from, on the same clock, seen by the same Observer.
func TestOneKitAfterNewMount(t *testing.T) {
	site := webkittest.New(origin)
	kit := webkit.New(cookieKeys...)
	kit.StoreTimeout = 30 * time.Second
	var runs int
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "exchange:" + r.PathValue("order"), Terms: map[string]string{"size": r.PostFormValue("size")}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprint(w, "exchanged")
	})))
	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: kit, Resolver: site.Resolver()})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = m.Handler(mux)

	// Every setting changed after NewMount.
	before := kit.Store
	kit.Store = memstore.New(memstore.Config{})
	// A clock a year ahead: Session JWTs signed on it are "from the
	// future" to a verifier still on the machine's clock.
	clk := testclock.At(time.Now().Add(365 * 24 * time.Hour))
	kit.Clock, site.Clock = clk.Now, clk.Now
	obs := &stepLog{}
	kit.Observer = obs
	var logs bytes.Buffer
	kit.Logger = slog.New(slog.NewTextHandler(&logs, nil))

	agent := site.NewAgent()
	s := agent.Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatalf("join on the Kit's clock: %v", err)
	}
	res := b.PostForm("/orders/ord_1/exchange", url.Values{"size": {"M"}})
	if res.Err != nil || res.Ref == "" {
		t.Fatalf("gated request: %d %v", res.StatusCode, res.Err)
	}
	if a := s.Approve(res.Ref); a.Err != nil || a.StatusCode != http.StatusNoContent {
		t.Fatalf("approve: %d %v %s", a.StatusCode, a.Err, a.Body)
	}
	// Recorded in the store the Gate reads: Continue performs it.
	if again := res.Continue(); again.Err != nil || again.StatusCode != http.StatusOK || runs != 1 {
		t.Fatalf("continue: %d %v, ran %d; want the approval the endpoint recorded performed", again.StatusCode, again.Err, runs)
	}
	if _, found, _ := storedriver.Steps(before).Lookup(context.Background(), store.Owner{Agent: agent.ClientID(), User: "usr_1"}, res.Ref, clk.Now()); found {
		t.Error("the store replaced after NewMount still got the operation")
	}
	for _, want := range []string{"join/joined", "endpoint/operation", "endpoint/recorded", "gate/waiting", "gate/performed"} {
		if !obs.has(func(l *stepLog) []string { return l.events }, want) {
			t.Errorf("the Observer set after NewMount did not see %s: %v", want, obs.events)
		}
	}
	for _, want := range []string{"use_once", "lookup", "record", "take"} {
		if !obs.has(func(l *stepLog) []string { return l.steps }, want) {
			t.Errorf("the Observer set after NewMount did not see the store step %s: %v", want, obs.steps)
		}
	}

	// StoreTimeout and Logger: a stalled store answers within the new
	// deadline, and the endpoint logs to the new Logger.
	st := &stalled{Store: memstore.New(memstore.Config{}).Steps()}
	kit.Store, kit.StoreTimeout = storedriver.AsStore(st), 50*time.Millisecond
	if look := s.Lookup(res.Ref); look.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("lookup on a stalled store: %d, want 503", look.StatusCode)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.deadlines) == 0 {
		t.Fatal("the stalled store replaced after NewMount was never called")
	}
	for _, d := range st.deadlines {
		if d > time.Second { // the StoreTimeout at NewMount was 30 s
			t.Errorf("a store call had %v to run, want the StoreTimeout set after NewMount (50ms)", d)
		}
	}
	if !strings.Contains(logs.String(), "store unavailable") {
		t.Errorf("the Logger set after NewMount got nothing: %q", logs.String())
	}
}
