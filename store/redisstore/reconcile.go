package redisstore

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// indexBatch is how many slots' indexes one round trip of Performing
// reads (each a ZRANGE of a small or missing key), and indexPage how many
// operations it reads of one index at a time: each step is short, so
// Performing never blocks Redis for other web servers (webkit/RULES.md
// "Claims are never stranded").
const (
	indexBatch = 1024
	indexPage  = 256
)

// Performing implements store.Store. It reads the index of performing
// operations (index.go) of every hash slot, indexBatch slots a round trip
// (on a Cluster, each master reads its own slots' in the same pipeline),
// and each batch's operations with one pipelined HMGET each: its cost
// follows the operations being performed, plus a fixed pass over the
// 16,384 slots, never the keyspace.
//
// A claim never marked started (start.go), made more than unstartedFor
// and claimedBefore ago, is not listed: nothing ran for it and nothing
// will, so Performing undoes it (tidy.lua) and its approval applies again
// (W144). What it lists is what a person has to decide: a handler that
// started and never reported (its web server died mid-handler, or its
// Finish is still being retried), or one that reported an unknown outcome.
func (s *rstore) Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error] {
	return func(yield func(store.Stuck, error) bool) {
		stop := strconv.FormatInt(claimedBefore.UnixMilli(), 10)
		undoBefore := now.Add(-unstartedFor)
		if claimedBefore.Before(undoBefore) {
			undoBefore = claimedBefore
		}
		for lo := 0; lo < hashSlots; lo += indexBatch {
			members, err := s.indexed(ctx, lo, min(lo+indexBatch, hashSlots), stop)
			if err != nil {
				yield(store.Stuck{}, fmt.Errorf("redisstore: performing: %w", err))
				return
			}
			found, err := s.stuck(ctx, members, claimedBefore, undoBefore, now)
			if err != nil {
				yield(store.Stuck{}, fmt.Errorf("redisstore: performing: %w", err))
				return
			}
			for _, st := range found {
				if !yield(st, nil) {
					return
				}
			}
		}
	}
}

// indexed returns the operations that the indexes of slots lo to hi-1 list
// as claimed by stop (Unix ms), with each one's index key.
func (s *rstore) indexed(ctx context.Context, lo, hi int, stop string) ([][2]string, error) {
	var out [][2]string
	type page struct {
		key    string
		offset int64
	}
	pages := make([]page, 0, hi-lo)
	for _, key := range s.indexesToRead(ctx, lo, hi) {
		pages = append(pages, page{key: key})
	}
	for len(pages) > 0 {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.StringSliceCmd, len(pages))
		for i, p := range pages {
			cmds[i] = pipe.ZRangeArgs(ctx, redis.ZRangeArgs{Key: p.key, ByScore: true, Start: "-inf", Stop: stop, Offset: p.offset, Count: indexPage})
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, err
		}
		var more []page
		for i, c := range cmds {
			ms := c.Val()
			for _, m := range ms {
				out = append(out, [2]string{pages[i].key, m})
			}
			if len(ms) == indexPage {
				more = append(more, page{key: pages[i].key, offset: pages[i].offset + indexPage})
			}
		}
		pages = more
	}
	return out, nil
}

// existsGroup is how many index keys one EXISTS asks about on a single
// Redis (indexesToRead).
const existsGroup = 64

// indexesToRead returns the index keys of slots lo to hi-1 that Performing
// reads. On a single Redis (a *redis.Client) one EXISTS asks about
// existsGroup of them at once, and only the groups that have one are read:
// an index exists only while its slot has an operation performing (Redis
// drops an empty sorted set), so a listing costs about hashSlots /
// existsGroup commands plus the groups that hold operations. A Cluster
// (and a proxy in front of one, which refuses keys of many slots in one
// command: CROSSSLOT) reads every index, each on its own master.
func (s *rstore) indexesToRead(ctx context.Context, lo, hi int) []string {
	keys := make([]string, 0, hi-lo)
	for n := lo; n < hi; n++ {
		keys = append(keys, s.indexKeyOfSlot(n))
	}
	c, ok := s.client.(*redis.Client)
	if !ok || s.manySlotsRefused.Load() {
		return keys
	}
	pipe := c.Pipeline()
	var cmds []*redis.IntCmd
	for i := 0; i < len(keys); i += existsGroup {
		cmds = append(cmds, pipe.Exists(ctx, keys[i:min(i+existsGroup, len(keys))]...))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if redis.HasErrorPrefix(err, "CROSSSLOT") {
			s.manySlotsRefused.Store(true)
		}
		return keys // read them all: the ZRANGEs will say what is wrong
	}
	var out []string
	for i, cmd := range cmds {
		if cmd.Val() > 0 {
			out = append(out, keys[i*existsGroup:min((i+1)*existsGroup, len(keys))]...)
		}
	}
	return out
}

// stuckFields are what Performing reads of each operation hash.
var stuckFields = []string{"state", "pa", "fu", "ap", "ag", "us", "acct", "k", "st"}

// stuck reads the operations of members ({index key, operation key}) and
// returns those performing since before claimedBefore that a person has
// to decide. On the way it tidies the index (tidy.lua): an operation no
// longer performing (or forgotten) leaves it, and a claim never marked
// started, made before undoBefore, is undone.
func (s *rstore) stuck(ctx context.Context, members [][2]string, claimedBefore, undoBefore, now time.Time) ([]store.Stuck, error) {
	if len(members) == 0 {
		return nil, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.SliceCmd, len(members))
	for i, m := range members {
		cmds[i] = pipe.HMGet(ctx, m[1], stuckFields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	var out []store.Stuck
	for i, c := range cmds {
		f := make([]string, len(stuckFields))
		for j, v := range c.Val() {
			f[j], _ = v.(string)
		}
		state, pa, fu, ap, ag, us, acct, k, started := f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]
		claimedAt, ok := parseTime(pa)
		keep, okK := parseTime(k)
		switch {
		case state != "performing" || !okK || now.After(keep):
			if err := s.tidy(ctx, members[i], ag, us, undoBefore, now); err != nil {
				return nil, err
			}
			continue
		case started == "0" && fu == "" && ok && claimedAt.Before(undoBefore):
			// Never started, and its Take long gone: undone, not listed.
			if err := s.tidy(ctx, members[i], ag, us, undoBefore, now); err != nil {
				return nil, err
			}
			continue
		case started == "0" && fu == "":
			continue // its Take may still be on its way
		case !ok || ap == "" || !claimedAt.Before(claimedBefore):
			continue
		}
		key := members[i][1]
		opID := key[strings.LastIndex(key, ":op:")+len(":op:"):]
		r, err := s.client.HMGet(ctx, key, "t:"+ap, "s:"+ap, "x:"+ap, "a:"+ap, "u:"+ap).Result()
		if err != nil {
			return nil, err
		}
		rs := make([]string, len(r))
		for j, v := range r {
			rs[j], _ = v.(string)
		}
		op, ok := operation([]string{opID, ap, rs[1], rs[0], rs[2]})
		if !ok {
			continue
		}
		a := decodeApproval(rs[3], opID, ap)
		a.UsedAt, _ = parseTime(rs[4])
		out = append(out, store.Stuck{
			Claim:     store.Claim{Owner: store.Owner{Agent: ag, User: us, Account: acct}, Operation: op, Approval: a},
			ClaimedAt: claimedAt,
			Unknown:   fu != "",
		})
	}
	return out, nil
}

// tidy runs tidy.lua for one member of an index ({index key, operation
// key}) of an operation of agent ag and User us.
func (s *rstore) tidy(ctx context.Context, member [2]string, ag, us string, undoBefore, now time.Time) error {
	tokUntil := now.Add(storekit.ClaimTokenTTL)
	owner := store.Owner{Agent: ag, User: us}
	args := append([]any{ns(now), ns(undoBefore), ttlMs(tokUntil, now), ns(tokUntil)}, s.auditArgs(ctx, storekit.EntryReleased, owner, "", nil, now)...)
	_, _, err := withAgentCount(s, owner, member[:], args, func(keys []string, args []any) (string, error) {
		return s.run(ctx, s.client, tidyStep, keys, args...).Text()
	})
	if err != nil {
		s.failed(err)
	}
	return err
}

// masters returns a client for each master: the client itself, or each
// Cluster master's, in a stable order.
func (s *rstore) masters(ctx context.Context) ([]redis.Cmdable, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return []redis.Cmdable{s.client}, nil
	}
	var (
		mu  sync.Mutex
		out []redis.Cmdable
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, c)
		return nil
	})
	return out, err
}

// Resolve implements store.Store: finish.lua, whoever holds the claim.
func (s *rstore) Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, now time.Time) error {
	var o string
	switch outcome {
	case store.OutcomePerformed:
		o = "done"
	case store.OutcomeNotPerformed:
		o = "notdone"
	default:
		return fmt.Errorf("redisstore: resolve: outcome must be performed or not performed, not %v", outcome)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: resolve: %w", err)
	}
	if !storekit.ValidID(operationID) {
		return store.ErrNotPerforming
	}
	what := storekit.EntryResolved
	if outcome == store.OutcomeNotPerformed {
		what = storekit.EntryResolvedNotDo
	}
	keys, args := s.finishArgs(ctx, s.base(owner.Agent, owner.User), owner, operationID, "", o, what, "", nil, now)
	n, err := s.finish(ctx, owner, operationID, keys, args, o, true)
	if err != nil {
		return fmt.Errorf("redisstore: resolve: %w", err)
	}
	if n != 1 {
		return store.ErrNotPerforming
	}
	return nil
}
