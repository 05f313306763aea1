package store

import (
	"hash/maphash"
	"time"
)

// The memory store's bookkeeping that keeps it small and its lock short
// (webkit/RULES.md "Bounded work"): an expiry heap, so that forgetting what expired
// costs O(log n) per record and is done a bounded batch at a time, and maps
// that are rebuilt once they shrink, because a Go map never gives back the
// memory of entries deleted from it.

// memTimer is when one record (an operation, a single-use mark or a claim
// token) is forgotten, and its place in the expiry heap.
type memTimer struct {
	until time.Time
	i     int     // index in the heap; -1 when not in it
	kind  memKind // what to drop
	key   memKey  // operation: (slot, id); mark and token: (key, "")
}

type memKind uint8

const (
	memKindOp memKind = iota
	memKindOnce
	memKindClaim
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
	t.i = i
}

func (h *memHeap) less(i, j int) bool { return h.at(i).until.Before(h.at(j).until) }

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
	if !until.After(t.until) {
		return
	}
	t.until = until
	if t.i >= 0 {
		h.down(t.i) // later: it can only move down
	}
}

// remove takes t out of the heap, if it is in it.
func (h *memHeap) remove(t *memTimer) {
	i := t.i
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
	if !now.After(t.until) {
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
