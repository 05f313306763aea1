package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
)

func memoryHarness(t testing.TB) storetest.Harness {
	m := memstore.New(memstore.Config{})
	size := m.Size
	return storetest.Harness{
		Store: m.Steps(),
		// Two more "web servers" over the same Memory: one process, one
		// store, reached from several goroutines.
		Clients: []storedriver.Store{m.Steps(), m.Steps()},
		Size:    func(context.Context) (int, error) { return size(), nil },
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness { return memoryHarness(t) })
}

// The overall caps across agents (Config.MaxOpen, MaxReplayMarkers).
func TestMemoryOverallCaps(t *testing.T) {
	t.Parallel()
	storetest.OverallCaps(t, func(t *testing.T) storetest.Harness {
		m := memstore.New(memstore.Config{MaxOpen: 3, MaxReplayMarkers: 3})
		return storetest.Harness{Store: m.Steps()}
	})
}

// The suite on what a website gets: NewMemory, its defaults.
func TestNewMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return storetest.Harness{Store: memstore.New(memstore.Config{}).Steps()}
	})
}

var (
	t0    = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	owner = store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-1"}
)

func memAction(key, terms string, life time.Duration) storedriver.TakeRequest {
	return storedriver.TakeRequest{Key: key, Terms: []byte(terms), Lifetime: life}
}

// memStoredAction is memAction with a summary too long for a
// 2048-character ref: its operation is stored when its ref is returned
// (the stored fallback, internal/computed), not computed into the ref.
func memStoredAction(key, terms string, life time.Duration) storedriver.TakeRequest {
	a := memAction(key, terms, life)
	a.Summary = strings.Repeat("and then some more ", 120)
	return a
}

// Retention is the memory store's own: a performed operation is kept for it past
// its claim's Finish, and not much longer (W137, W139).
func TestMemoryRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := memstore.New(memstore.Config{Retention: time.Hour})
	a := memAction("k", `{}`, time.Minute)
	is, _ := storetest.Issue(ctx, m.Steps(), owner, a, t0)
	m.Record(ctx, owner, is.Ref, store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: "user"}, t0, storedriver.RecordOptions{})
	res, _ := m.Take(ctx, owner, a, t0)
	if res.Claim == nil {
		t.Fatalf("Take: %+v", res)
	}
	if err := m.Finish(ctx, *res.Claim, store.OutcomePerformed, t0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at    time.Duration
		found bool
	}{{time.Hour, true}, {time.Hour + time.Second, false}} {
		rec, found, err := m.Lookup(ctx, owner, is.Ref, t0.Add(tc.at))
		if err != nil || found != tc.found || found && rec.Status != storedriver.StatusPerformed {
			t.Errorf("Lookup at +%v: %+v, %v, %v; want found=%v", tc.at, rec.Status, found, err, tc.found)
		}
	}
}

// The Memory holds about what is live, however long it runs: sweeps follow
// the caller's clock (webkit/RULES.md "The store": nothing grows without bound).
func TestMemoryBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := memstore.New(memstore.Config{})
	size := m.Size
	maxLen := 0
	for i := range 20000 {
		now := t0.Add(time.Duration(i) * time.Second)
		a := memAction(fmt.Sprint("k", i), fmt.Sprintf(`{"i":%d}`, i), time.Minute)
		if _, err := storetest.Issue(ctx, m.Steps(), owner, a, now); err != nil {
			t.Fatal(err)
		}
		if _, err := m.UseOnce(ctx, fmt.Sprint("jti", i), now.Add(time.Minute), now); err != nil {
			t.Fatal(err)
		}
		maxLen = max(maxLen, size())
	}
	// About 60 s of live operations, actions and marks, plus what a
	// minute between sweeps leaves.
	if maxLen > 2000 {
		t.Errorf("Len reached %d with about 180 live records", maxLen)
	}
	// A month on, every record above has expired: one call with that now
	// drops a budget of them and the store's own sweep, going by the same
	// now, the rest. The call's own mark is live (an hour to go), so no
	// sweep may drop it: the store comes down to exactly that one record.
	// The wait is well under memSweepGrace, the minute after which the
	// sweep would count time on by the machine's clock: what empties the
	// store here is the caller's clock alone.
	later := t0.Add(30 * 24 * time.Hour)
	if ok, err := m.UseOnce(ctx, "last", later.Add(time.Hour), later); err != nil || !ok {
		t.Fatalf("UseOnce(last): %v, %v", ok, err)
	}
	n := size()
	for deadline := time.Now().Add(20 * time.Second); n != 1 && time.Now().Before(deadline); n = size() {
		time.Sleep(time.Millisecond)
	}
	if n != 1 {
		t.Errorf("Len = %d 20 s after every record but the last mark expired, want 1 (the last mark)", n)
	}
	// The one record left is the live mark: it still refuses a replay.
	if ok, err := m.UseOnce(ctx, "last", later.Add(time.Hour), later.Add(time.Second)); err != nil || ok {
		t.Errorf("UseOnce(last) again: %v, %v; want false: the mark is live", ok, err)
	}
}

// A done context fails every call, as a store that cannot answer does.
func TestMemoryContextDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	m := memstore.New(memstore.Config{})
	a := memAction("k", `{}`, time.Minute)
	errs := map[string]error{}
	_, errs["Issue"] = storetest.Issue(ctx, m.Steps(), owner, a, t0)
	_, errs["Take"] = m.Take(ctx, owner, a, t0)
	errs["Finish"] = m.Finish(ctx, store.Claim{Owner: owner, Token: "x"}, store.OutcomePerformed, t0)
	_, _, errs["Lookup"] = m.Lookup(ctx, owner, "op_x.1-x", t0)
	_, errs["storedriver.Found"] = m.Record(ctx, owner, "op_x.1-x", store.Approval{}, t0, storedriver.RecordOptions{})
	_, errs["UseOnce"] = m.UseOnce(ctx, "jti", t0, t0)
	for name, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled", name, err)
		}
	}
	if err := m.Finish(t.Context(), store.Claim{Owner: owner, Token: "x"}, store.Outcome(0), t0); err == nil || errors.Is(err, storedriver.ErrClaimLost) {
		t.Errorf("Finish with an invalid outcome: %v", err)
	}
}

// Run with -race: many goroutines approve, take and finish the same few
// actions, and no operation is ever performed twice (W135, W37).
func TestMemoryConcurrentAtMostOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := memstore.New(memstore.Config{})
	var mu sync.Mutex
	performed := map[string]int{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 300 {
				now := t0.Add(time.Duration(i) * time.Second)
				a := memAction(fmt.Sprint("k", i%3), fmt.Sprintf(`{"v":%d}`, (g+i)%2), time.Minute)
				res, err := m.Take(ctx, owner, a, now)
				if err != nil {
					t.Error(err)
					return
				}
				switch {
				case res.Claim != nil:
					out := store.OutcomePerformed
					if i%4 == 0 {
						out = store.OutcomeNotPerformed
					}
					if out == store.OutcomePerformed {
						mu.Lock()
						performed[res.Claim.Operation.ID]++
						mu.Unlock()
					}
					if err := m.Finish(ctx, *res.Claim, out, now); err != nil {
						t.Error(err)
					}
				case res.Ref != "":
					op := res.Operation
					m.Record(ctx, owner, res.Ref, store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: "agent"}, now, storedriver.RecordOptions{})
				}
				m.Lookup(ctx, owner, fmt.Sprint("op_x.", i), now)
			}
		})
	}
	wg.Wait()
	if len(performed) == 0 {
		t.Fatal("nothing was performed")
	}
	for id, n := range performed {
		if n != 1 {
			t.Errorf("operation %s performed %d times", id, n)
		}
	}
}

// An agent's open operations are capped across its Users
// (webkit/RULES.md "Bounded work"): for operations stored when their ref
// is returned, the next one is ErrRateLimited, and a performed one frees
// its place. (storetest judges the caps at approval, for computed ones.)
func TestMemoryAgentCap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	m := memstore.New(memstore.Config{MaxOpenPerAgent: 3})
	a := memStoredAction("k", `{}`, time.Minute)
	var first storedriver.TakeResult
	for i := range 3 {
		is, err := storetest.Issue(ctx, m.Steps(), store.Owner{Agent: "agent-a", User: fmt.Sprint("u", i)}, a, t0)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = is
		}
	}
	if _, err := storetest.Issue(ctx, m.Steps(), store.Owner{Agent: "agent-a", User: "u9"}, a, t0); !errors.Is(err, storedriver.ErrRateLimited) {
		t.Fatalf("fourth: %v, want storedriver.ErrRateLimited", err)
	}
	if _, err := storetest.Issue(ctx, m.Steps(), store.Owner{Agent: "agent-b", User: "u9"}, a, t0); err != nil {
		t.Fatalf("another agent: %v", err)
	}
	u0 := store.Owner{Agent: "agent-a", User: "u0"}
	m.Record(ctx, u0, first.Ref, store.Approval{OperationID: first.Operation.ID, Revision: first.Operation.Revision, Approver: "user"}, t0, storedriver.RecordOptions{})
	res, err := m.Take(ctx, u0, a, t0)
	if err != nil || res.Claim == nil {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	if err := m.Finish(ctx, *res.Claim, store.OutcomePerformed, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Issue(ctx, m.Steps(), store.Owner{Agent: "agent-a", User: "u9"}, a, t0); err != nil {
		t.Fatalf("after one was performed: %v", err)
	}
}
