package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The overall caps (Options.MaxOpen, Options.MaxReplayMarkers) bound what
// every agent together can make the store hold: client_ids cost nothing,
// so the caps per owner and per agent alone don't (webkit/RULES.md
// "Bounded work"). Each is kept by an overallCount: what it counts is
// filed in one Redis hash, by the minute it stops counting (an operation's
// first expires_at, a marker's until), and every web server adds what it
// stored to that hash and reads it back at most every
// overallSyncEvery, in one round trip of its own. No step script and no
// ordinary request pays for it: a request that would store something asks
// the count this server last read plus what it stored since. Near the cap
// (overallNear of it, or overallNearBy short of it), every count is sent and read at once, so that the
// cap holds across web servers to within the requests in flight; at the
// cap, a request that would store is refused without storing
// (storedriver.ErrRateLimited, wrapping errOverall) and the count is read again
// at most every overallFullSyncEvery, to see room that a performed or
// expired one left.
//
// What it counts leaves the count when it stops counting by the caller's
// clock (to within the minute), or when the store takes it off (an
// operation performed: Finish(Done)). Like the agent's count on a
// Cluster, an operation being performed still counts.
type overallCount struct {
	key string // the hash: field minute (Unix seconds / 60), value count
	cap int64  // <= 0: no cap

	mu       sync.Mutex
	pending  map[int64]int64 // minute → what this server added and hasn't sent
	read     map[int64]int64 // minute → the hash as last read
	readAt   time.Time       // by the caller's clock; zero: never
	inFlight bool            // a paced read is on its way
}

const (
	overallSyncEvery     = time.Second
	overallFullSyncEvery = 100 * time.Millisecond
	overallNear          = 0.9
	overallNearBy        = 100
	// overallKeep is how long the hash outlives its latest minute: the
	// minute's grace, as every key's (GRACE_MS).
	overallKeep = time.Minute
)

func newOverallCount(key string, cap int) *overallCount {
	return &overallCount{key: key, cap: int64(cap), pending: map[int64]int64{}, read: map[int64]int64{}}
}

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

// countLocked is the count at now: the hash as read plus what this server
// added since, over the minutes that still count.
func (c *overallCount) countLocked(now time.Time) int64 {
	m, n := minuteOf(now), int64(0)
	for min, v := range c.read {
		if min >= m {
			n += v
		}
	}
	for min, v := range c.pending {
		if min >= m {
			n += v
		}
	}
	return n
}

// nearLocked reports whether n is near the cap: within overallNear of
// it, or within overallNearBy (so that a small cap is always near, and
// kept exactly).
func (c *overallCount) nearLocked(n int64) bool {
	return float64(n) >= min(overallNear*float64(c.cap), float64(c.cap-overallNearBy))
}

// full reports whether storing one more would pass the cap. It reads the
// hash first when the last read is older than the pace it is at: every
// overallSyncEvery, every call near the cap, every overallFullSyncEvery
// at it.
func (c *overallCount) full(ctx context.Context, client redis.UniversalClient, now time.Time) (bool, error) {
	if c == nil || c.cap <= 0 {
		return false, nil
	}
	c.mu.Lock()
	if c.readAt.IsZero() {
		// A web server's first call: the hash is read a pace from now, so
		// that no request waits on it while the store is far from its cap
		// (near it, at once, below).
		c.readAt = now
	}
	n := c.countLocked(now)
	age := now.Sub(c.readAt)
	sync := age >= overallSyncEvery || age < 0
	switch {
	case n >= c.cap:
		sync = sync || age >= overallFullSyncEvery
	case c.nearLocked(n):
		sync = true
	case sync && c.inFlight:
		sync = false // another call is reading it: this one goes by the last read
	}
	if sync {
		c.inFlight = true
	}
	c.mu.Unlock()
	if sync {
		if err := c.sync(ctx, client, now); err != nil {
			return false, err
		}
		c.mu.Lock()
		n = c.countLocked(now)
		c.mu.Unlock()
	}
	return n >= c.cap, nil
}

// add counts d more (stored, or -1: taken off) that stop counting at
// until; near the cap it is sent at once.
func (c *overallCount) add(ctx context.Context, client redis.UniversalClient, until time.Time, d int64, now time.Time) {
	if c == nil || c.cap <= 0 {
		return
	}
	c.mu.Lock()
	c.pending[minuteOf(until)] += d
	near := c.nearLocked(c.countLocked(now))
	c.mu.Unlock()
	if near {
		// A failure leaves it pending: the next read sends it.
		_ = c.sync(ctx, client, now)
	}
}

// sync sends what this server added and reads the hash back, in one round
// trip; minutes that no longer count are dropped from it.
func (c *overallCount) sync(ctx context.Context, client redis.UniversalClient, now time.Time) error {
	c.mu.Lock()
	sent := c.pending
	c.pending = map[int64]int64{}
	var stale []string
	latest := minuteOf(now)
	for min := range c.read {
		if min < minuteOf(now) {
			stale = append(stale, strconv.FormatInt(min, 10))
		}
		latest = max(latest, min)
	}
	c.mu.Unlock()
	for min := range sent {
		latest = max(latest, min)
	}
	var all *redis.MapStringStringCmd
	_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for min, d := range sent {
			if d != 0 {
				p.HIncrBy(ctx, c.key, strconv.FormatInt(min, 10), d)
			}
		}
		if len(stale) > 0 {
			p.HDel(ctx, c.key, stale...)
		}
		if len(sent) > 0 {
			// Kept until its latest minute has passed, never shortened.
			keep := time.Unix((latest+1)*60, 0).Sub(now) + overallKeep
			p.ExpireNX(ctx, c.key, keep)
			p.ExpireGT(ctx, c.key, keep)
		}
		all = p.HGetAll(ctx, c.key)
		return nil
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight = false
	if err != nil {
		for min, d := range sent { // sent again next time (HINCRBY may have run: the count is then high, never low)
			c.pending[min] += d
		}
		return fmt.Errorf("overall count: %w", err)
	}
	read := map[int64]int64{}
	for f, v := range all.Val() {
		min, err1 := strconv.ParseInt(f, 10, 64)
		n, err2 := strconv.ParseInt(v, 10, 64)
		if err1 == nil && err2 == nil && n != 0 {
			read[min] = n
		}
	}
	c.read, c.readAt = read, now
	return nil
}

// overallCap is the count of an overall cap set to n (0: def; negative:
// none); nil when uncapped.
func overallCap(key string, n, def int) *overallCount {
	if n == 0 {
		n = def
	}
	if n < 0 {
		return nil
	}
	return newOverallCount(key, n)
}

// errOverallCap is what a step an overall cap refused returns.
var errOverallCap = fmt.Errorf("%w (%w)", storedriver.ErrRateLimited, storekit.ErrOverall)

// countOverall counts an operation Take or Issue just stored (op, its
// first revision) against the overall cap of open operations. Past it, the
// operation is forgotten again (if nothing was recorded for it meanwhile)
// and taken off its agent's count, and the answer is errOverallCap.
func (s *rstore) countOverall(ctx context.Context, owner store.Owner, actKey string, op store.Operation, now time.Time) error {
	if s.open == nil {
		return nil
	}
	full, err := s.open.full(ctx, s.client, now)
	if err != nil {
		return err
	}
	if full {
		base := s.base(owner.Agent, owner.User)
		n, err := s.run(ctx, s.client, undoStep, []string{base + "op:" + op.ID, actKey}, base, op.ID).Int()
		if err != nil {
			s.failed(err)
			return fmt.Errorf("open operations: %w", err)
		}
		if n == 1 {
			if s.maxOpenAgent > 0 {
				_ = s.client.ZRem(ctx, s.agentKey(owner.Agent), agentMember(owner, op.ID)).Err()
			}
			return errOverallCap
		}
		// Something was recorded for it meanwhile: it stays, and counts.
	}
	s.open.add(ctx, s.client, op.ExpiresAt, 1, now)
	return nil
}

// markerRefused reports whether a step that may set a single-use marker
// must not run: the overall cap of markers is reached.
func (s *rstore) markerRefused(ctx context.Context, now time.Time) (bool, error) {
	full, err := s.markers.full(ctx, s.client, now)
	if err != nil {
		s.failed(err)
		return false, fmt.Errorf("single-use markers: %w", err)
	}
	return full, nil
}
