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
	// DefaultMaxPerSource bounds the sandboxes made from one source (in the
	// demo shop: one client network) kept at once: made-up agents cost
	// nothing, a network of one's own does.
	DefaultMaxPerSource = 100
	// DefaultSandboxIdle is how long a sandbox is kept without use.
	DefaultSandboxIdle = 24 * time.Hour
)

// Sandboxes gives each key (in the demo shop: an agent's User) its own copy
// of the demo data, seeded on first use, so that agents sharing one running
// demo never see each other's changes. A sandbox unused for Idle is
// forgotten. Keys belong to groups (Group; in the demo shop, the agent),
// and each sandbox to the source that made it (GetFrom; in the demo shop,
// the client's network), and eviction is fair between both: a group at
// MaxPerGroup makes room by dropping its own least recently used sandbox,
// a source at MaxPerSource the least recently used of its largest group,
// and beyond Max sandboxes in all, the least
// recently used sandbox of the largest group of the largest source goes.
// So one group filling the cache (one agent joining many made-up Users)
// evicts its own sandboxes, and so does one source (many made-up agents
// from one network): never another's while it holds more than they do. A
// forgotten sandbox comes back freshly seeded on its next use.
type Sandboxes struct {
	// Max is the most sandboxes kept; 0 is DefaultMaxSandboxes.
	Max int
	// MaxPerGroup is the most sandboxes kept of one group; 0 is
	// DefaultMaxPerGroup.
	MaxPerGroup int
	// MaxPerSource is the most sandboxes kept that one source made; 0 is
	// DefaultMaxPerSource.
	MaxPerSource int
	// Group is the group of a key; nil makes every key a group of its own.
	Group func(key string) string
	// Idle is how long an unused sandbox is kept; 0 is DefaultSandboxIdle.
	Idle time.Duration

	mu      sync.Mutex
	byKey   map[string]*list.Element // of *sandbox
	lru     list.List                // most recently used at the front
	groups  map[string]*list.List    // each group's *sandbox, most recent at the front
	sources map[string]*list.List    // each source's *sandbox, most recent at the front
}

type sandbox struct {
	key, group, source string
	db                 *DB
	used               time.Time
	elem               *list.Element // in Sandboxes.lru
	inGroup            *list.Element // in its group's list
	inSource           *list.Element // in its source's list
}

func (s *Sandboxes) maxPerSource() int {
	if s.MaxPerSource > 0 {
		return s.MaxPerSource
	}
	return DefaultMaxPerSource
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
// and marks it used at now. A new one belongs to no source ("").
func (s *Sandboxes) Get(key string, now time.Time) *DB { return s.GetFrom(key, "", now) }

// GetFrom is Get for a request from source: a new sandbox counts against
// source's MaxPerSource. A sandbox kept stays its first source's.
func (s *Sandboxes) GetFrom(key, source string, now time.Time) *DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	if e, ok := s.byKey[key]; ok {
		sb := e.Value.(*sandbox)
		sb.used = now
		s.lru.MoveToFront(e)
		s.groups[sb.group].MoveToFront(sb.inGroup)
		s.sources[sb.source].MoveToFront(sb.inSource)
		return sb.db
	}
	return s.add(key, source, now)
}

// Reset replaces key's sandbox with a freshly seeded one and returns it.
func (s *Sandboxes) Reset(key string, now time.Time) *DB { return s.ResetFrom(key, "", now) }

// ResetFrom is Reset for a request from source.
func (s *Sandboxes) ResetFrom(key, source string, now time.Time) *DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		source = e.Value.(*sandbox).source
		s.drop(e)
	}
	s.expire(now)
	return s.add(key, source, now)
}

// Len is the number of sandboxes kept.
func (s *Sandboxes) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}

// add seeds key's sandbox, making room first: in its own group when the
// group is full, in its own source when the source is, else in the
// largest group of the largest source when all are. Called with mu held.
func (s *Sandboxes) add(key, source string, now time.Time) *DB {
	if s.byKey == nil {
		s.byKey = map[string]*list.Element{}
		s.groups = map[string]*list.List{}
		s.sources = map[string]*list.List{}
	}
	g := s.groupOf(key)
	for gl := s.groups[g]; gl != nil && gl.Len() >= s.maxPerGroup(); gl = s.groups[g] {
		s.drop(gl.Back().Value.(*sandbox).elem)
	}
	for sl := s.sources[source]; source != "" && sl != nil && sl.Len() >= s.maxPerSource(); sl = s.sources[source] {
		s.drop(largestGroupOldest(sl))
	}
	for s.lru.Len() >= s.max() {
		s.drop(s.largestOldest())
	}
	sb := &sandbox{key: key, group: g, source: source, db: New(now), used: now}
	gl := s.groups[g]
	if gl == nil {
		gl = list.New()
		s.groups[g] = gl
	}
	sl := s.sources[source]
	if sl == nil {
		sl = list.New()
		s.sources[source] = sl
	}
	sb.elem = s.lru.PushFront(sb)
	sb.inGroup = gl.PushFront(sb)
	sb.inSource = sl.PushFront(sb)
	s.byKey[key] = sb.elem
	return sb.db
}

// largestGroupOldest is the least recently used sandbox of the largest
// groups within one source's list sl: agents sharing a network make room
// from the one with the most, not from whoever came first. O(len(sl)).
func largestGroupOldest(sl *list.List) *list.Element {
	n := map[string]int{}
	most := 0
	for e := sl.Front(); e != nil; e = e.Next() {
		g := e.Value.(*sandbox).group
		n[g]++
		most = max(most, n[g])
	}
	for e := sl.Back(); e != nil; e = e.Prev() {
		if sb := e.Value.(*sandbox); n[sb.group] == most {
			return sb.elem
		}
	}
	return sl.Back().Value.(*sandbox).elem // not reached
}

// largestOldest is the least recently used sandbox of the largest groups
// among those of the largest sources (the one used least recently of
// those). Called with mu held, with at least one sandbox kept;
// O(sandboxes), paid only when all are full.
func (s *Sandboxes) largestOldest() *list.Element {
	srcSize := 0
	for _, sl := range s.sources {
		srcSize = max(srcSize, sl.Len())
	}
	grpSize := 0
	for e := s.lru.Back(); e != nil; e = e.Prev() {
		if sb := e.Value.(*sandbox); s.sources[sb.source].Len() == srcSize {
			grpSize = max(grpSize, s.groups[sb.group].Len())
		}
	}
	for e := s.lru.Back(); e != nil; e = e.Prev() {
		if sb := e.Value.(*sandbox); s.sources[sb.source].Len() == srcSize && s.groups[sb.group].Len() == grpSize {
			return e
		}
	}
	return s.lru.Back() // not reached: some sandbox is of that source and group
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
	if sl := s.sources[sb.source]; sl != nil {
		sl.Remove(sb.inSource)
		if sl.Len() == 0 {
			delete(s.sources, sb.source)
		}
	}
}
