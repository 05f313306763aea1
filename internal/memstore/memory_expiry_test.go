package memstore_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
)

// heapMiB is the live heap after a full collection.
func heapMiB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// massExpiry fills a Memory with n waiting operations (each its own owner
// and action, with one single-use mark), lets every one expire, and makes
// calls until the store is empty. It returns the heap before filling and
// after draining, the longest call while filling and while draining (each
// call is one critical section: its duration bounds how long it held the
// lock), and how many calls the drain took. Calls are timed in the
// thread's CPU time, so that a busy machine's preemptions don't count.
func massExpiry(tb testing.TB, n int) (empty, after float64, fillMax, drainMax time.Duration, calls int) {
	ctx := tb.Context()
	clock, done := threadCPU()
	defer done()
	t0 := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	empty = heapMiB()
	// One agent, n Users; a retention shorter than the operations'
	// lifetime, so that each is stored at its 403 rather than computed
	// into its ref (the stored fallback).
	m := memstore.New(memstore.Config{MaxOpenPerAgent: n, Retention: 30 * time.Second})
	size := m.Size
	a := storedriver.TakeRequest{Key: "k", Terms: []byte(`{"v":1}`), Summary: "Do k.", Lifetime: time.Minute}
	for i := range n {
		o := store.Owner{Agent: "agent", User: fmt.Sprint("u", i)}
		start := clock()
		if _, err := storetest.Issue(ctx, m.Steps(), o, a, t0); err != nil {
			tb.Fatal(err)
		}
		fillMax = max(fillMax, clock()-start)
		if _, err := m.UseOnce(ctx, fmt.Sprint("jti", i), t0.Add(time.Minute), t0); err != nil {
			tb.Fatal(err)
		}
	}
	if got := size(); got < 3*n {
		tb.Fatalf("Len = %d after %d operations, want ≥ %d", got, n, 3*n)
	}
	later := t0.Add(time.Hour)
	for size() > 1 {
		calls++
		start := clock()
		if _, err := m.UseOnce(ctx, "tick", later, later); err != nil {
			tb.Fatal(err)
		}
		drainMax = max(drainMax, clock()-start)
		if calls > 100*n {
			tb.Fatalf("Len %d after %d calls", size(), calls)
		}
	}
	// A few more calls finish rebuilding the maps and the heap.
	for range 64 {
		start := clock()
		m.UseOnce(ctx, "tick", later, later)
		drainMax = max(drainMax, clock()-start)
	}
	after = heapMiB()
	runtime.KeepAlive(m)
	return empty, after, fillMax, drainMax, calls
}

// webkit/RULES.md "Bounded work": after a mass expiry the Memory gives its memory
// back (its maps are rebuilt as they shrink), within 2× an empty store plus
// 10 MiB, and no call holds the lock for long while it forgets.
func TestMemoryMassExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: fills 100,000 operations")
	}
	empty, after, _, drainMax, calls := massExpiry(t, 100_000)
	t.Logf("100k operations: heap %.1f MiB empty, %.1f MiB after expiry (%d calls); longest call while forgetting %v", empty, after, calls, drainMax)
	if after > 2*empty+10 {
		t.Errorf("heap %.1f MiB after every record expired, want ≤ 2×%.1f + 10 MiB", after, empty)
	}
	if drainMax > raceSlowdown*5*time.Millisecond {
		t.Errorf("a call held the lock %v while forgetting", drainMax)
	}
}

// go test -run '^$' -bench MemoryMassExpiry -benchtime 1x ./store/
// The figures of webkit/RULES.md "Bounded work" at a million records: heap after a
// mass expiry against an empty store, and the longest call (lock hold)
// while filling and while forgetting.
func BenchmarkMemoryMassExpiry(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				empty, after, fillMax, drainMax, calls := massExpiry(b, n)
				b.ReportMetric(empty, "MiB-empty")
				b.ReportMetric(after, "MiB-after-expiry")
				b.ReportMetric(float64(fillMax.Microseconds()), "µs-max-call-filling")
				b.ReportMetric(float64(drainMax.Microseconds()), "µs-max-call-forgetting")
				b.ReportMetric(float64(calls), "calls-to-forget")
			}
		})
	}
}
