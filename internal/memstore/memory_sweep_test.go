package memstore

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
)

// The memory store's background sweep and the size of what it retains
// (webkit/RULES.md "Bounded work"). These tests sit inside the package to
// move the sweep's clock and to hear of its passes; the conformance suite
// (store_test) runs the store with its sweep as every website gets it.

var sweepT0 = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)

// liveHeap is the live heap in bytes after full collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// sweptMemory is a memory store whose sweep measures the callers' silence
// by clock, and reports each of its passes on the channel returned.
func sweptMemory(cfg storekit.MemoryConfig, clock *testclock.Clock) (*memory, chan memSweepReport) {
	reports := make(chan memSweepReport, 1024)
	m := &memory{cfg: cfg}
	m.sweeper.clock, m.sweeper.cpu = clock.Now, threadCPUTime
	m.sweeper.report = func(r memSweepReport) { reports <- r }
	return m, reports
}

// wakeSweep wakes m's sweep now, as its timer would.
func wakeSweep(m *memory) {
	m.mu.Lock()
	wake := m.sweeper.wake
	m.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// sweepHolds is what the passes of a sweep held the lock for: by the
// machine's clock (which counts the time a busy machine takes the thread
// away) and in the thread's CPU time.
type sweepHolds struct {
	passes               int
	wall, cpu            []time.Duration
	maxWall, maxCPU, p99 time.Duration
}

func (h *sweepHolds) add(r memSweepReport) {
	if r.swept == 0 {
		return
	}
	h.passes++
	h.wall, h.cpu = append(h.wall, r.hold), append(h.cpu, r.holdCPU)
	h.maxWall, h.maxCPU = max(h.maxWall, r.hold), max(h.maxCPU, r.holdCPU)
	sorted := slices.Sorted(slices.Values(h.wall))
	h.p99 = sorted[len(sorted)*99/100]
}

func (h sweepHolds) String() string {
	return fmt.Sprintf("%d passes, longest hold %v (%v of CPU), 99th percentile %v", h.passes, h.maxWall, h.maxCPU, h.p99)
}

// awaitSweep reads the sweep's reports until done says so, and returns
// what its passes held the lock for. The minute is a safety net against a
// sweep that never comes, not a measure.
func awaitSweep(tb testing.TB, reports <-chan memSweepReport, done func(memSweepReport) bool) (holds sweepHolds) {
	tb.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case r := <-reports:
			holds.add(r)
			if done(r) {
				return holds
			}
		case <-timeout:
			tb.Fatalf("no sweep after %d passes", holds.passes)
		}
	}
}

func stopped(r memSweepReport) bool { return r.stopped }

// fillWaiting stores n waiting operations at sweepT0, each its own User's,
// with a single-use mark each: a retention shorter than their lifetime
// makes each stored at its 403 (the stored fallback), as
// TestMemoryMassExpiry does.
func fillWaiting(tb testing.TB, m *memory, n int) {
	ctx := context.Background()
	a := storedriver.TakeRequest{Key: "k", Terms: []byte(`{"v":1}`), Summary: "Do k.", Lifetime: time.Minute}
	for i := range n {
		o := store.Owner{Agent: "agent", User: fmt.Sprint("u", i)}
		if res, err := m.Take(ctx, o, a, sweepT0); err != nil || res.Ref == "" {
			tb.Fatalf("Take: %+v, %v", res, err)
		}
		if _, err := m.UseOnce(ctx, fmt.Sprint("jti", i), sweepT0.Add(time.Minute), sweepT0); err != nil {
			tb.Fatal(err)
		}
	}
	if got := m.size(); got < 3*n {
		tb.Fatalf("size = %d after %d operations, want ≥ %d", got, n, 3*n)
	}
}

// sweepAfterSilence fills a store with n waiting operations, makes no call
// after, moves the sweep's clock past their expiry, and waits for the
// sweep to end. It returns the heap before the store was made and after
// the sweep, what its passes held the lock for and how long it took.
func sweepAfterSilence(tb testing.TB, n int) (empty, after uint64, holds sweepHolds, took time.Duration, m *memory) {
	clock := testclock.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) // not the callers' clock
	empty = liveHeap()
	m, reports := sweptMemory(storekit.MemoryConfig{MaxOpenPerAgent: n, Retention: 30 * time.Second}, clock)
	fillWaiting(tb, m, n)
	// Nobody calls again: an hour goes by on the machine's clock.
	clock.Add(time.Hour)
	start := time.Now()
	wakeSweep(m)
	holds = awaitSweep(tb, reports, stopped)
	took = time.Since(start)
	after = liveHeap()
	return empty, after, holds, took, m
}

// webkit/RULES.md "Bounded work": after a mass expiry the store gives its
// memory back with no call at all, within 2× an empty store plus 10 MiB,
// and its goroutine ends once the store is empty.
func TestMemorySweepsWithoutCalls(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 20_000
	}
	empty, after, holds, took, m := sweepAfterSilence(t, n)
	t.Logf("%d operations: heap %.1f MiB empty, %.1f MiB after the sweep in %v: %v", n, mib(empty), mib(after), took, holds)
	if got := m.size(); got != 0 {
		t.Errorf("size = %d after the sweep, want 0", got)
	}
	if mib(after) > 2*mib(empty)+10 {
		t.Errorf("heap %.1f MiB after every record expired, want ≤ 2×%.1f + 10 MiB", mib(after), mib(empty))
	}
	m.mu.Lock()
	running := m.sweeper.running
	m.mu.Unlock()
	if running {
		t.Error("the sweep still runs with the store empty")
	}
	// The next record starts it again.
	reports := make(chan memSweepReport, 16)
	m.mu.Lock()
	m.sweeper.report = func(r memSweepReport) { reports <- r }
	m.mu.Unlock()
	if _, err := m.UseOnce(t.Context(), "again", sweepT0.Add(2*time.Hour), sweepT0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	running = m.sweeper.running
	m.mu.Unlock()
	if !running {
		t.Error("no sweep after a record was added to the empty store")
	}
	runtime.KeepAlive(m)
}

// A call whose now reveals a mass expiry wakes the sweep, which drops
// everything that now has made forgettable without waiting for silence or
// for more calls.
func TestMemorySweepFollowsACall(t *testing.T) {
	const n = 20_000
	clock := testclock.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	m, reports := sweptMemory(storekit.MemoryConfig{MaxOpenPerAgent: n, Retention: 30 * time.Second}, clock)
	fillWaiting(t, m, n)
	// One call an hour later (by the callers' clock; the sweep's stands
	// still) and none after it.
	later := sweepT0.Add(time.Hour)
	if _, err := m.UseOnce(t.Context(), "last", later.Add(time.Minute), later); err != nil {
		t.Fatal(err)
	}
	awaitSweep(t, reports, func(r memSweepReport) bool { return r.left == 1 && !r.backlog })
	if got := m.size(); got != 1 {
		t.Errorf("size = %d after the sweep, want 1 (the last mark)", got)
	}
}

// The sweep follows the callers' clock: a caller whose clock stands still
// (as a test's does) finds every record it hasn't let expire, until it has
// not called for memSweepGrace; only then does the sweep count time on.
func TestMemorySweepWaitsForTheCallersClock(t *testing.T) {
	ctx := t.Context()
	clock := testclock.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	m, reports := sweptMemory(storekit.MemoryConfig{}, clock)
	if first, err := m.UseOnce(ctx, "jti", sweepT0.Add(time.Second), sweepT0); err != nil || !first {
		t.Fatalf("UseOnce: %v, %v", first, err)
	}
	clock.Add(time.Minute) // a minute without a call (memSweepGrace): not yet silence
	wakeSweep(m)
	awaitSweep(t, reports, func(memSweepReport) bool { return true })
	if got := m.size(); got != 1 {
		t.Fatalf("size = %d after a pass within the grace, want 1", got)
	}
	clock.Add(2 * time.Second) // past the grace by more than the mark had left
	wakeSweep(m)
	awaitSweep(t, reports, stopped)
	if got := m.size(); got != 0 {
		t.Errorf("size = %d after the silence, want 0", got)
	}
	// Forgotten, as a call after its until would find it (W139).
	if first, err := m.UseOnce(ctx, "jti", sweepT0.Add(time.Hour), sweepT0.Add(time.Minute)); err != nil || !first {
		t.Errorf("UseOnce after expiry: %v, %v", first, err)
	}
}

// A store nobody references any more ends its sweep, whatever it holds: a
// program or a test that drops its store leaks no goroutine.
func TestMemorySweepEndsWithItsStore(t *testing.T) {
	clock := testclock.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	m, reports := sweptMemory(storekit.MemoryConfig{}, clock)
	if _, err := m.UseOnce(t.Context(), "jti", sweepT0.Add(24*time.Hour), sweepT0); err != nil {
		t.Fatal(err)
	}
	m = nil // the store is unreachable now, and its sweep sleeps
	timeout := time.After(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-reports:
			if r.stopped {
				return
			}
		case <-tick.C:
			runtime.GC()
		case <-timeout:
			t.Fatal("the sweep of an unreachable store still runs")
		}
	}
}

// retainedOwner is an owner as the Gate makes one: a client_id URL, a
// pairwise User ID and an account, each its own allocation as a parsed
// request's would be.
func retainedOwner(i int) store.Owner {
	return store.Owner{
		Agent:   strings.Clone(fmt.Sprint("https://agent.example/clients/", i%16)),
		User:    fmt.Sprintf("pw_%040d", i),
		Account: fmt.Sprint("acct-", i),
	}
}

// performN performs n operations at sweepT0, each as the Gate and the
// endpoint do: the 403 (Take issues), the approval (Record, with the
// Session JWT's jti), Continue (Take claims) and Finish(Done). stored
// makes each operation stored at its 403 (a lifetime beyond the
// retention) rather than computed into its ref. It returns what the 403s
// of the first and the last answered.
func performN(tb testing.TB, m *memory, n int, stored bool) (first, last storedriver.TakeResult) {
	ctx := context.Background()
	for i := range n {
		o := retainedOwner(i)
		a := storedriver.TakeRequest{
			Key:      fmt.Sprint("exchange:ord_", i),
			Terms:    fmt.Appendf(nil, `{"item_id":"itm_4Qa","order_id":"ord_%d","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`, i),
			Summary:  "Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order.",
			Lifetime: 10 * time.Minute,
		}
		if stored {
			a.Lifetime = m.retention() + time.Hour
		}
		res, err := m.Take(ctx, o, a, sweepT0)
		if err != nil || res.Ref == "" {
			tb.Fatalf("Take: %+v, %v", res, err)
		}
		switch i {
		case 0:
			first = res
		case n - 1:
			last = res
		}
		op := res.Operation
		ap := store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverUser, ApprovedAt: sweepT0, InputType: "button", Reference: "conv_8Hk2/msg_4Qa"}
		rep, err := m.Record(ctx, o, res.Ref, ap, sweepT0, storedriver.RecordOptions{Once: storekit.NewToken(), OnceUntil: sweepT0.Add(5 * time.Minute)})
		if err != nil || rep.Result != storedriver.Recorded {
			tb.Fatalf("Record: %+v, %v", rep, err)
		}
		a.ClaimToken = storekit.NewToken()
		res, err = m.Take(ctx, o, a, sweepT0)
		if err != nil || res.Claim == nil {
			tb.Fatalf("Take: %+v, %v", res, err)
		}
		if err := m.Finish(ctx, *res.Claim, store.OutcomePerformed, sweepT0); err != nil {
			tb.Fatal(err)
		}
	}
	return first, last
}

// retainedCost performs n operations, lets an hour go by (their approvals,
// marks and claim tokens are forgotten; the operations are kept for the
// retention, §7 W137) and returns the heap each one costs.
func retainedCost(tb testing.TB, n int, stored bool) (perOp float64, m *memory, first, last storedriver.TakeResult) {
	clock := testclock.At(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	empty := liveHeap()
	m, reports := sweptMemory(storekit.MemoryConfig{MaxOpenPerAgent: -1}, clock)
	first, last = performN(tb, m, n, stored)
	later := sweepT0.Add(time.Hour)
	// One call that adds nothing tells the store the time.
	if _, _, err := m.Lookup(context.Background(), store.Owner{Agent: "a", User: "u"}, "op_x.1-x", later); err != nil {
		tb.Fatal(err)
	}
	// Left: each operation, its audit log (approval recorded, claimed,
	// performed) in it.
	awaitSweep(tb, reports, func(r memSweepReport) bool { return r.left == n && !r.backlog })
	after := liveHeap()
	return (float64(after) - float64(empty)) / float64(n), m, first, last
}

// A retained performed operation costs at most 800 bytes (issue 36):
// once performed the store keeps its account, its id and the names of
// its revisions (store.Record), not its terms, summary, approvals or
// claim, and its audit log of three entries, approval recorded, claimed
// and performed (store.Entry), each saying only what differs from the
// entry before (memlog.go). About 660 bytes computed, 780 stored (its
// action, marked ka, is kept too), with the spec's example's sizes: a
// 131-character summary, a 43-character pairwise User ID.
func TestMemoryRetainedOperation(t *testing.T) {
	for _, stored := range []bool{false, true} {
		name := map[bool]string{false: "computed", true: "stored"}[stored]
		t.Run(name, func(t *testing.T) {
			n := 50_000
			if testing.Short() {
				n = 25_000
			}
			perOp, m, first, last := retainedCost(t, n, stored)
			t.Logf("%s: %.0f bytes per retained performed operation", name, perOp)
			if perOp > 800 {
				t.Errorf("a retained performed operation costs %.0f bytes, want ≤ 800", perOp)
			}
			// What it keeps still answers (W108, W109, §7 W137).
			for i, is := range map[int]storedriver.TakeResult{0: first, n - 1: last} {
				rec, found, err := m.Lookup(t.Context(), retainedOwner(i), is.Ref, sweepT0.Add(time.Hour))
				if err != nil || !found || rec.Status != storedriver.StatusPerformed || rec.Current.ID != is.Operation.ID || rec.Current.Revision != is.Operation.Revision || rec.Owner != retainedOwner(i) {
					t.Errorf("Lookup %d: %+v, %v, %v", i, rec, found, err)
				}
				rep, err := m.Record(t.Context(), retainedOwner(i), is.Ref, store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: store.ApproverUser}, sweepT0.Add(time.Hour), storedriver.RecordOptions{})
				if err != nil || rep.Result != storedriver.AlreadyPerformed {
					t.Errorf("storedriver.Found %d: %v, %v", i, rep.Result, err)
				}
			}
		})
	}
}

// go test -run '^$' -bench 'MemorySweep|MemoryRetained' -benchtime 1x ./store/
// The figures of webkit/RULES.md "Bounded work" for the sweep: the heap
// after a mass expiry that no call follows, against an empty store's, and
// the longest time one pass held the lock (the sweep's own measure, by the
// machine's clock, under the lock).
func BenchmarkMemorySweep(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				empty, after, holds, took, m := sweepAfterSilence(b, n)
				b.ReportMetric(mib(empty), "MiB-empty")
				b.ReportMetric(mib(after), "MiB-after-sweep")
				b.ReportMetric(float64(holds.maxWall.Microseconds()), "µs-max-hold")
				b.ReportMetric(float64(holds.p99.Microseconds()), "µs-p99-hold")
				b.ReportMetric(float64(holds.maxCPU.Microseconds()), "µs-max-hold-cpu")
				b.ReportMetric(float64(holds.passes), "passes")
				b.ReportMetric(float64(took.Milliseconds()), "ms-to-sweep")
				runtime.KeepAlive(m)
			}
		})
	}
}

// The heap one retained performed operation costs, computed into its ref
// at its 403 (the usual case) or stored (terms too long for a ref, or a
// lifetime beyond the retention).
func BenchmarkMemoryRetained(b *testing.B) {
	for _, stored := range []bool{false, true} {
		b.Run(map[bool]string{false: "computed", true: "stored"}[stored], func(b *testing.B) {
			for range b.N {
				perOp, m, _, _ := retainedCost(b, 100_000, stored)
				b.ReportMetric(perOp, "B/retained-op")
				runtime.KeepAlive(m)
			}
		})
	}
}
