package storewrap

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// goroutineID is the current goroutine's number, from its stack's first
// line: only to tell in a test whether a call ran on the caller's goroutine.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// seenStore records, for each Take, the deadline it was given and the
// goroutine it ran on.
type seenStore struct {
	storedriver.Store
	bound     bool // what BoundByContext answers
	deadline  time.Time
	goroutine string
}

func (s *seenStore) BoundByContext() bool { return s.bound }

func (s *seenStore) Take(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	s.deadline, _ = ctx.Deadline()
	s.goroutine = goroutineID()
	return s.Store.Take(ctx, o, a, now)
}

// A store that returns by its context's deadline (storekit.ContextBound, as
// redisstore with ContextTimeoutEnabled) is called on the caller's
// goroutine with StoreTimeout as its deadline; one that doesn't say so, in
// a goroutine abandoned at the deadline, with the same deadline.
func TestStoreTimeoutCallsBoundStoresDirectly(t *testing.T) {
	const d = 300 * time.Millisecond
	for _, c := range []struct {
		bound, observed bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		bound := c.bound
		seen := &seenStore{Store: memstore.New(memstore.Config{}).Steps(), bound: bound}
		var s storedriver.Store = seen
		if c.observed { // Observe passes BoundByContext on
			s = Observe(seen, nopObserver{})
		}
		st := WithTimeout(s, d)
		start := time.Now()
		if _, err := st.Take(t.Context(), store.Owner{Agent: "https://agent.example", User: "usr_1"}, storedriver.TakeRequest{Key: "k", Terms: []byte(`{}`), Lifetime: time.Minute}, time.Now()); err != nil {
			t.Fatal(err)
		}
		if left := seen.deadline.Sub(start); left <= 0 || left > d+time.Since(start) {
			t.Errorf("%+v: the store's deadline was %v after the call began, want StoreTimeout %v", c, left, d)
		}
		if direct := seen.goroutine == goroutineID(); direct != bound {
			t.Errorf("%+v: called on the caller's goroutine: %v", c, direct)
		}
	}
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) StoreStep(context.Context, string, time.Duration, error) {}
