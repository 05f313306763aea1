package store

import (
	"container/heap"
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

// memHeap is a min-heap of timers by until.
type memHeap []*memTimer

func (h memHeap) Len() int           { return len(h) }
func (h memHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h memHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *memHeap) Push(x any) {
	t := x.(*memTimer)
	t.i = len(*h)
	*h = append(*h, t)
}
func (h *memHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.i = -1
	return t
}

// add puts t in the heap.
func (h *memHeap) add(t *memTimer) { heap.Push(h, t) }

// extend moves t's until later (never earlier, so that one record's needs
// never cut another's: W102, W137, W138).
func (h *memHeap) extend(t *memTimer, until time.Time) {
	if !until.After(t.until) {
		return
	}
	t.until = until
	if t.i >= 0 {
		heap.Fix(h, t.i)
	}
}

// remove takes t out of the heap, if it is in it.
func (h *memHeap) remove(t *memTimer) {
	if t.i >= 0 {
		heap.Remove(h, t.i)
	}
}

// popExpired removes and returns the earliest timer if it is past now.
func (h *memHeap) popExpired(now time.Time) *memTimer {
	if len(*h) == 0 || !now.After((*h)[0].until) {
		return nil
	}
	return heap.Pop(h).(*memTimer)
}

// compact gives back the heap's backing array once it holds under a quarter
// of its capacity (a slice, like a map, never shrinks by itself).
func (h *memHeap) compact() {
	if cap(*h) >= memShrinkMin && len(*h)*4 < cap(*h) {
		*h = append(make(memHeap, 0, 2*len(*h)), *h...)
	}
}

// memShrinkMin is the least peak size at which a map or the heap is rebuilt
// when it shrinks; below it the memory is not worth the copying.
const memShrinkMin = 4096

// memShrinkStep is how many entries one store call moves from a shrinking
// map into its replacement, so that no call holds the lock for long.
const memShrinkStep = 512

// shrinkMap is a map that is rebuilt once it holds under an eighth of its
// peak: its entries move, memShrinkStep per store call, into a new map sized
// for them, and the old one (with every bucket of the peak) is then dropped.
// Lookups see both while they move.
type shrinkMap[K comparable, V any] struct {
	m, old map[K]V
	peak   int
}

func (s *shrinkMap[K, V]) get(k K) (V, bool) {
	if v, ok := s.m[k]; ok {
		return v, true
	}
	v, ok := s.old[k] // a nil map reads as empty
	return v, ok
}

func (s *shrinkMap[K, V]) put(k K, v V) {
	if s.m == nil {
		s.m = make(map[K]V)
	}
	if s.old != nil {
		delete(s.old, k)
	}
	s.m[k] = v
	if n := s.len(); n > s.peak {
		s.peak = n
	}
}

func (s *shrinkMap[K, V]) del(k K) {
	delete(s.m, k)
	if s.old != nil {
		delete(s.old, k)
	}
}

func (s *shrinkMap[K, V]) len() int { return len(s.m) + len(s.old) }

// step moves up to n entries into the new map, or starts a rebuild when the
// map has shrunk to under an eighth of its peak.
func (s *shrinkMap[K, V]) step(n int) {
	if s.old == nil {
		if s.peak >= memShrinkMin && len(s.m)*8 < s.peak {
			s.old, s.m = s.m, make(map[K]V, len(s.m))
			s.peak = len(s.old)
		}
		return
	}
	for k, v := range s.old {
		if n <= 0 {
			break
		}
		s.m[k] = v
		delete(s.old, k)
		n--
	}
	if len(s.old) == 0 {
		s.old = nil
		s.peak = len(s.m)
	}
}
