package memstore

import (
	"hash/maphash"
	"math"
	"runtime"
	"time"
	"weak"
)

// The memory store's bookkeeping that keeps it small and its lock short
// (webkit/RULES.md "Bounded work"): an expiry heap, so that forgetting what expired
// costs O(log n) per record and is done a bounded batch at a time, and maps
// that are rebuilt once they shrink, because a Go map never gives back the
// memory of entries deleted from it.

// The background sweep. Calls drop what their now has made forgettable a
// bounded batch at a time (memSweepBudget), so a store that nobody calls
// after a mass expiry would keep its memory; a goroutine of the store's own
// gives it back. It is started by the first call that leaves a record in
// the store, and it ends once the store holds nothing (the next record
// starts another) or once nothing references the store any more (it holds
// the store only weakly, and a cleanup stops it): a program or a test that
// drops its store leaks nothing. It never holds the lock longer than about
// memSweepHold at a time, and pauses as long between two passes while
// expired records are left, so a call never waits for it long.
//
// Its time is the callers' (store's package doc): it drops what the latest
// now any call passed has made forgettable, like a call would, and only
// once no call has come for memSweepGrace does it count the time since by
// the machine's clock. A caller whose clock stands still (a test's) thus
// sees nothing vanish before it moves its clock, unless it stands still
// for longer than memSweepGrace with records due to expire just after it.

const (
	// memSweepHold is how long one pass holds the lock, at most about: it
	// looks at the clock every memSweepBatch records, each of which costs
	// O(log n) (a microsecond or so at a million records, but now and then
	// tens of microseconds: a shard rebuilt, cold memory), so a pass
	// overruns by a few records at most.
	memSweepHold  = time.Millisecond
	memSweepBatch = 8
	// memSweepPause is the least time between two passes: the lock is the
	// callers' for at least as long as the sweep's.
	memSweepPause = time.Millisecond
	// memSweepGrace is how long the store must go without a call before
	// the sweep counts time on by the machine's clock.
	memSweepGrace = time.Minute
	// memSweepMaxSleep is the longest the sweep sleeps while the store
	// holds records.
	memSweepMaxSleep = time.Minute
)

// memSweeper is the background sweep's state, guarded by memory.mu.
type memSweeper struct {
	running bool
	hw      time.Time // the latest now a call passed
	hwAt    time.Time // clock() when hw was seen
	wake    chan struct{}
	stop    chan struct{} // closed once the store is unreachable

	// For tests: the clock the sweep measures the callers' silence by
	// (nil: time.Now), a function told of every pass, and a clock of the
	// calling thread's CPU time, to measure a pass's hold without the
	// time a busy machine takes the thread away (the pass is then locked
	// to its thread).
	clock  func() time.Time
	report func(memSweepReport)
	cpu    func() time.Duration
}

// memSweepReport is what one pass of the sweep did.
type memSweepReport struct {
	swept   int           // records dropped
	hold    time.Duration // how long it held the lock
	holdCPU time.Duration // the thread's CPU time in it, with memSweeper.cpu
	left    int           // records still in the store
	backlog bool          // it stopped at memSweepHold with expired records left
	stopped bool          // the goroutine ended: the store is empty, or unreachable
}

func (sw *memSweeper) now() time.Time {
	if sw.clock != nil {
		return sw.clock()
	}
	return time.Now()
}

// saw notes the now a call passed.
func (sw *memSweeper) saw(now time.Time) {
	if sw.hw.IsZero() || now.After(sw.hw) {
		sw.hw, sw.hwAt = now, sw.now()
	}
}

// horizon is the sweep's now: the latest now a call passed, moved on by
// the time past memSweepGrace that no call has come.
func (sw *memSweeper) horizon() time.Time {
	if silent := sw.now().Sub(sw.hwAt) - memSweepGrace; silent > 0 && !sw.hw.IsZero() {
		return sw.hw.Add(silent)
	}
	return sw.hw
}

// wakeSweep starts the background sweep when the store holds records and
// none runs, and wakes it when expired records are left. m.mu is held.
func (m *memory) wakeSweep() {
	sw := &m.sweeper
	switch {
	case m.expiry.n == 0:
	case !sw.running:
		sw.running = true
		if sw.stop == nil {
			sw.stop, sw.wake = make(chan struct{}), make(chan struct{}, 1)
			// Once a cleanup per store: the goroutine holds the store
			// only weakly, and ends when it is collected.
			runtime.AddCleanup(m, func(stop chan struct{}) { close(stop) }, sw.stop)
		}
		go memSweepLoop(weak.Make(m), sw.wake, sw.stop, sw.report, m.sweepDelay())
	case instant(sw.hw) > m.expiry.at(0).until:
		select {
		case sw.wake <- struct{}{}:
		default:
		}
	}
}

// sweepDelay is how long, by the sweep's clock, until the first record in
// the heap is forgettable by its horizon, within [memSweepPause,
// memSweepMaxSleep]. m.mu is held.
func (m *memory) sweepDelay() time.Duration {
	sw := &m.sweeper
	if m.expiry.n == 0 {
		return memSweepMaxSleep
	}
	gap := sinceInstant(m.expiry.at(0).until, sw.horizon())
	if gap >= memSweepMaxSleep {
		return memSweepMaxSleep
	}
	if !sw.horizon().After(sw.hw) {
		// The horizon stands at hw until the grace is over.
		gap += memSweepGrace - sw.now().Sub(sw.hwAt)
	}
	return min(max(gap+time.Nanosecond, memSweepPause), memSweepMaxSleep)
}

// memSweepLoop is the background sweep's goroutine: a pass when woken,
// when its timer fires, or memSweepPause after a pass that left a backlog
// (a wake does not cut that pause short).
func memSweepLoop(wp weak.Pointer[memory], wake, stop <-chan struct{}, report func(memSweepReport), d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	paused := false
	for {
		woken := wake
		if paused {
			woken = nil
		}
		select {
		case <-stop:
			if report != nil {
				report(memSweepReport{stopped: true})
			}
			return
		case <-woken:
		case <-t.C:
		}
		rep, next := memSweepPass(wp)
		if report != nil {
			report(rep)
		}
		if rep.stopped {
			return
		}
		paused = rep.backlog
		t.Reset(next)
	}
}

// memSweepPass is one pass: it drops what the sweep's horizon has made
// forgettable, for memSweepHold at most, and says when to pass again.
// It ends the sweep (stopped) when the store is empty or unreachable.
func memSweepPass(wp weak.Pointer[memory]) (rep memSweepReport, next time.Duration) {
	m := wp.Value()
	if m == nil {
		return memSweepReport{stopped: true}, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if cpu := m.sweeper.cpu; cpu != nil {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer func(start time.Duration) { rep.holdCPU = cpu() - start }(cpu())
	}
	start := time.Now()
	horizon := m.sweeper.horizon()
	for m.dropExpired(horizon) {
		rep.swept++
		if rep.swept%memSweepBatch == 0 && time.Since(start) >= memSweepHold {
			rep.backlog = true
			break
		}
	}
	rep.hold = time.Since(start)
	rep.left = m.expiry.n
	switch {
	case m.expiry.n == 0:
		m.sweeper.running = false
		rep.stopped = true
	case rep.backlog:
		next = memSweepPause
	default:
		next = m.sweepDelay()
	}
	return rep, next
}

// memTimer is when one record (an operation, a single-use mark or a claim
// token) is forgotten, and its place in the expiry heap.
type memTimer struct {
	until int64   // an instant (Unix ns): 24 bytes less than a time.Time
	key   memKey  // operation: (slot, id); mark and token: (key, "")
	i     int32   // index in the heap; -1 when not in it
	kind  memKind // what to drop
}

// past says whether now is after the timer's until.
func (t *memTimer) past(now time.Time) bool { return instant(now) > t.until }

// sinceInstant is the time from t to the instant u, saturated.
func sinceInstant(u int64, t time.Time) time.Duration {
	d := u - instant(t)
	switch {
	case u > 0 && instant(t) < 0 && d < 0:
		return math.MaxInt64
	case u < 0 && instant(t) > 0 && d > 0:
		return math.MinInt64
	}
	return time.Duration(d)
}

type memKind uint8

const (
	memKindOp memKind = iota
	memKindOnce
	memKindClaim
	memKindLog // an operation's audit entries
)

// memHeap is a min-heap of timers by until, kept in fixed-size chunks: it
// grows and shrinks a chunk at a time, so no call ever copies (or
// allocates) the whole heap, as doubling a slice of a million timers would.
type memHeap struct {
	chunks [][]*memTimer // each memHeapChunk long
	n      int
}

// memHeapChunk is how many timers one chunk holds.
const memHeapChunk = 1024

func (h *memHeap) at(i int) *memTimer { return h.chunks[i/memHeapChunk][i%memHeapChunk] }

func (h *memHeap) set(i int, t *memTimer) {
	h.chunks[i/memHeapChunk][i%memHeapChunk] = t
	t.i = int32(i)
}

func (h *memHeap) less(i, j int) bool { return h.at(i).until < h.at(j).until }

func (h *memHeap) swap(i, j int) {
	a, b := h.at(i), h.at(j)
	h.set(i, b)
	h.set(j, a)
}

func (h *memHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down moves i down and reports whether it moved.
func (h *memHeap) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= h.n {
			break
		}
		c := l
		if r := l + 1; r < h.n && h.less(r, l) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}

// add puts t in the heap.
func (h *memHeap) add(t *memTimer) {
	if h.n == len(h.chunks)*memHeapChunk {
		h.chunks = append(h.chunks, make([]*memTimer, memHeapChunk))
	}
	h.set(h.n, t)
	h.n++
	h.up(h.n - 1)
}

// extend moves t's until later (never earlier, so that one record's needs
// never cut another's: W102, W137, W138).
func (h *memHeap) extend(t *memTimer, until time.Time) {
	u := instant(until)
	if u <= t.until {
		return
	}
	t.until = u
	if t.i >= 0 {
		h.down(int(t.i)) // later: it can only move down
	}
}

// remove takes t out of the heap, if it is in it.
func (h *memHeap) remove(t *memTimer) {
	i := int(t.i)
	if i < 0 {
		return
	}
	last := h.n - 1
	if i != last {
		h.swap(i, last)
	}
	h.chunks[last/memHeapChunk][last%memHeapChunk] = nil
	h.n--
	t.i = -1
	if i < h.n && !h.down(i) {
		h.up(i)
	}
	// Give back chunks no longer needed, keeping one spare so that a heap
	// hovering at a chunk boundary doesn't allocate on every call.
	for len(h.chunks) > 1 && h.n <= (len(h.chunks)-2)*memHeapChunk {
		h.chunks[len(h.chunks)-1] = nil
		h.chunks = h.chunks[:len(h.chunks)-1]
	}
	if cap(h.chunks) >= 64 && len(h.chunks)*4 < cap(h.chunks) {
		h.chunks = append([][]*memTimer(nil), h.chunks...) // small: chunk pointers only
	}
}

// popExpired removes and returns the earliest timer if it is past now.
func (h *memHeap) popExpired(now time.Time) *memTimer {
	if h.n == 0 {
		return nil
	}
	t := h.at(0)
	if !t.past(now) {
		return nil
	}
	h.remove(t)
	return t
}

// memShards is how many maps a store map is split into, by a hash of the
// key, so that rebuilding one that shrank copies a 256th of the records at
// most: a bounded step, whatever the store's size.
const memShards = 256

// memShrinkMin is the least peak size of a shard rebuilt when it shrinks;
// below it the memory is not worth the copying.
const memShrinkMin = 64

// shrinkMap is a map split into memShards shards, each rebuilt (copied into
// a map sized for what it holds) as soon as it holds under an eighth of its
// peak: a Go map never gives back the memory of deleted entries, and after
// a mass expiry the store must (webkit/RULES.md "Bounded work"). A rebuild copies at
// most an eighth of one shard, amortised against the deletions that
// shrank it. The zero value is ready to use.
type shrinkMap[K comparable, V any] struct {
	seed   maphash.Seed
	seeded bool
	n      int
	shards [memShards]struct {
		m    map[K]V
		peak int
	}
}

func (s *shrinkMap[K, V]) shard(k K) int {
	if !s.seeded {
		s.seed, s.seeded = maphash.MakeSeed(), true
	}
	return int(maphash.Comparable(s.seed, k) % memShards)
}

func (s *shrinkMap[K, V]) get(k K) (V, bool) {
	v, ok := s.shards[s.shard(k)].m[k] // a nil map reads as empty
	return v, ok
}

func (s *shrinkMap[K, V]) put(k K, v V) {
	sh := &s.shards[s.shard(k)]
	if sh.m == nil {
		sh.m = make(map[K]V)
	}
	n := len(sh.m)
	sh.m[k] = v
	if len(sh.m) > n {
		s.n++
	}
	sh.peak = max(sh.peak, len(sh.m))
}

func (s *shrinkMap[K, V]) del(k K) {
	sh := &s.shards[s.shard(k)]
	n := len(sh.m)
	delete(sh.m, k)
	if len(sh.m) == n {
		return
	}
	s.n--
	if sh.peak >= memShrinkMin && len(sh.m)*8 < sh.peak {
		if len(sh.m) == 0 {
			sh.m = nil
		} else {
			m := make(map[K]V, len(sh.m))
			for k, v := range sh.m {
				m[k] = v
			}
			sh.m = m
		}
		sh.peak = len(sh.m)
	}
}

func (s *shrinkMap[K, V]) len() int { return s.n }
