package shopdb

import (
	"container/list"
	"sync"
	"time"
)

// Defaults of Sandboxes.
const (
	// DefaultMaxSandboxes bounds the sandboxes kept at once. One holds the
	// demo account's orders, subscription and deliveries with their last
	// MaxHistory changes (the catalog is shared): about 12 KiB measured with
	// every history full, so the default costs about 12 MiB at most.
	DefaultMaxSandboxes = 1000
	// DefaultSandboxIdle is how long a sandbox is kept without use.
	DefaultSandboxIdle = 24 * time.Hour
)

// Sandboxes gives each key (in the demo shop: an agent's User) its own copy
// of the demo data, seeded on first use, so that agents sharing one running
// demo never see each other's changes. A sandbox unused for Idle is
// forgotten; beyond Max sandboxes, the least recently used goes first. A
// forgotten sandbox comes back freshly seeded on its next use.
type Sandboxes struct {
	// Max is the most sandboxes kept; 0 is DefaultMaxSandboxes.
	Max int
	// Idle is how long an unused sandbox is kept; 0 is DefaultSandboxIdle.
	Idle time.Duration

	mu    sync.Mutex
	byKey map[string]*list.Element // of *sandbox
	lru   list.List                // most recently used at the front
}

type sandbox struct {
	key  string
	db   *DB
	used time.Time
}

func (s *Sandboxes) max() int {
	if s.Max > 0 {
		return s.Max
	}
	return DefaultMaxSandboxes
}

func (s *Sandboxes) idle() time.Duration {
	if s.Idle > 0 {
		return s.Idle
	}
	return DefaultSandboxIdle
}

// Get returns key's sandbox, seeded with dates around now when it is new,
// and marks it used at now.
func (s *Sandboxes) Get(key string, now time.Time) *DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	if e, ok := s.byKey[key]; ok {
		sb := e.Value.(*sandbox)
		sb.used = now
		s.lru.MoveToFront(e)
		return sb.db
	}
	return s.add(key, now)
}

// Reset replaces key's sandbox with a freshly seeded one and returns it.
func (s *Sandboxes) Reset(key string, now time.Time) *DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		s.lru.Remove(e)
		delete(s.byKey, key)
	}
	s.expire(now)
	return s.add(key, now)
}

// Len is the number of sandboxes kept.
func (s *Sandboxes) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

// add seeds key's sandbox, making room first. Called with mu held.
func (s *Sandboxes) add(key string, now time.Time) *DB {
	if s.byKey == nil {
		s.byKey = map[string]*list.Element{}
	}
	for s.lru.Len() >= s.max() {
		s.drop(s.lru.Back())
	}
	sb := &sandbox{key: key, db: New(now), used: now}
	s.byKey[key] = s.lru.PushFront(sb)
	return sb.db
}

// expire forgets the sandboxes unused for Idle: they are at the back.
// Called with mu held.
func (s *Sandboxes) expire(now time.Time) {
	for e := s.lru.Back(); e != nil && now.Sub(e.Value.(*sandbox).used) >= s.idle(); e = s.lru.Back() {
		s.drop(e)
	}
}

func (s *Sandboxes) drop(e *list.Element) {
	s.lru.Remove(e)
	delete(s.byKey, e.Value.(*sandbox).key)
}
