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
	// DefaultMaxPerGroup bounds the sandboxes of one group (in the demo
	// shop: one agent's Users) kept at once.
	DefaultMaxPerGroup = 100
	// DefaultSandboxIdle is how long a sandbox is kept without use.
	DefaultSandboxIdle = 24 * time.Hour
)

// Sandboxes gives each key (in the demo shop: an agent's User) its own copy
// of the demo data, seeded on first use, so that agents sharing one running
// demo never see each other's changes. A sandbox unused for Idle is
// forgotten. Keys belong to groups (Group; in the demo shop, the agent),
// and eviction is fair between groups: a group at MaxPerGroup makes room
// by dropping its own least recently used sandbox, and beyond Max
// sandboxes in all, the least recently used sandbox of the largest group
// goes. So one group filling the cache (one agent joining many made-up
// Users) evicts its own sandboxes, never another group's while it holds
// more than they do. A forgotten sandbox comes back freshly seeded on its
// next use.
type Sandboxes struct {
	// Max is the most sandboxes kept; 0 is DefaultMaxSandboxes.
	Max int
	// MaxPerGroup is the most sandboxes kept of one group; 0 is
	// DefaultMaxPerGroup.
	MaxPerGroup int
	// Group is the group of a key; nil makes every key a group of its own.
	Group func(key string) string
	// Idle is how long an unused sandbox is kept; 0 is DefaultSandboxIdle.
	Idle time.Duration

	mu     sync.Mutex
	byKey  map[string]*list.Element // of *sandbox
	lru    list.List                // most recently used at the front
	groups map[string]*list.List    // each group's *sandbox, most recent at the front
}

type sandbox struct {
	key, group string
	db         *DB
	used       time.Time
	elem       *list.Element // in Sandboxes.lru
	inGroup    *list.Element // in its group's list
}

func (s *Sandboxes) max() int {
	if s.Max > 0 {
		return s.Max
	}
	return DefaultMaxSandboxes
}

func (s *Sandboxes) maxPerGroup() int {
	if s.MaxPerGroup > 0 {
		return s.MaxPerGroup
	}
	return DefaultMaxPerGroup
}

func (s *Sandboxes) groupOf(key string) string {
	if s.Group == nil {
		return key
	}
	return s.Group(key)
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
		s.groups[sb.group].MoveToFront(sb.inGroup)
		return sb.db
	}
	return s.add(key, now)
}

// Reset replaces key's sandbox with a freshly seeded one and returns it.
func (s *Sandboxes) Reset(key string, now time.Time) *DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		s.drop(e)
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

// add seeds key's sandbox, making room first: in its own group when the
// group is full, else in the largest group when all are. Called with mu
// held.
func (s *Sandboxes) add(key string, now time.Time) *DB {
	if s.byKey == nil {
		s.byKey = map[string]*list.Element{}
		s.groups = map[string]*list.List{}
	}
	g := s.groupOf(key)
	for gl := s.groups[g]; gl != nil && gl.Len() >= s.maxPerGroup(); gl = s.groups[g] {
		s.drop(gl.Back().Value.(*sandbox).elem)
	}
	for s.lru.Len() >= s.max() {
		s.drop(s.largestGroupsOldest())
	}
	sb := &sandbox{key: key, group: g, db: New(now), used: now}
	gl := s.groups[g]
	if gl == nil {
		gl = list.New()
		s.groups[g] = gl
	}
	sb.elem = s.lru.PushFront(sb)
	sb.inGroup = gl.PushFront(sb)
	s.byKey[key] = sb.elem
	return sb.db
}

// largestGroupsOldest is the least recently used sandbox of the largest
// groups (the one used least recently of those). Called with mu held, with
// at least one sandbox kept; O(sandboxes), paid only when all are full.
func (s *Sandboxes) largestGroupsOldest() *list.Element {
	size := 0
	for _, gl := range s.groups {
		size = max(size, gl.Len())
	}
	for e := s.lru.Back(); e != nil; e = e.Prev() {
		if s.groups[e.Value.(*sandbox).group].Len() == size {
			return e
		}
	}
	return s.lru.Back() // not reached: some group has size sandboxes
}

// expire forgets the sandboxes unused for Idle: they are at the back.
// Called with mu held.
func (s *Sandboxes) expire(now time.Time) {
	for e := s.lru.Back(); e != nil && now.Sub(e.Value.(*sandbox).used) >= s.idle(); e = s.lru.Back() {
		s.drop(e)
	}
}

func (s *Sandboxes) drop(e *list.Element) {
	sb := e.Value.(*sandbox)
	s.lru.Remove(e)
	delete(s.byKey, sb.key)
	if gl := s.groups[sb.group]; gl != nil {
		gl.Remove(sb.inGroup)
		if gl.Len() == 0 {
			delete(s.groups, sb.group)
		}
	}
}
