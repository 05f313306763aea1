package redisstore

import (
	"context"
	"fmt"
	"github.com/opsgate/opsgate/internal/storekit"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/store"
)

// scanBatch is how many keys one SCAN step asks for: each step is short, so
// Performing never blocks Redis for other web servers (webkit/RULES.md "Claims are
// never stranded").
const scanBatch = 500

// Performing implements store.Store. It SCANs every master (each
// Cluster node in turn) for the store's operation keys, a batch at a time,
// and reads each batch's state with one pipelined HMGET per key: it costs
// O(keys) in total, spread over many short steps, and holds Redis for none
// of them longer than a small command does.
func (s *rstore) Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error] {
	return func(yield func(store.Stuck, error) bool) {
		nodes, err := s.masters(ctx)
		if err != nil {
			yield(store.Stuck{}, fmt.Errorf("redisstore: performing: %w", err))
			return
		}
		match := globEscape(s.prefix) + "{*}:op:*"
		for _, node := range nodes {
			var cursor uint64
			for {
				keys, next, err := node.Scan(ctx, cursor, match, scanBatch).Result()
				if err != nil {
					yield(store.Stuck{}, fmt.Errorf("redisstore: performing: %w", err))
					return
				}
				found, err := s.stuck(ctx, node, keys, claimedBefore, now)
				if err != nil {
					yield(store.Stuck{}, fmt.Errorf("redisstore: performing: %w", err))
					return
				}
				for _, st := range found {
					if !yield(st, nil) {
						return
					}
				}
				cursor = next
				if cursor == 0 {
					break
				}
			}
		}
	}
}

// stuckFields are what Performing reads of each operation hash.
var stuckFields = []string{"state", "pa", "fu", "ap", "ag", "us", "acct", "k"}

// stuck reads keys' operations and returns those performing since before
// claimedBefore.
func (s *rstore) stuck(ctx context.Context, node redis.Cmdable, keys []string, claimedBefore, now time.Time) ([]store.Stuck, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := node.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HMGet(ctx, k, stuckFields...)
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
		state, pa, fu, ap, ag, us, acct, k := f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
		claimedAt, ok := parseTime(pa)
		keep, okK := parseTime(k)
		if state != "performing" || !ok || ap == "" || !okK || now.After(keep) || !claimedAt.Before(claimedBefore) {
			continue
		}
		opID := keys[i][strings.LastIndex(keys[i], ":op:")+len(":op:"):]
		r, err := node.HMGet(ctx, keys[i], "t:"+ap, "s:"+ap, "x:"+ap, "a:"+ap, "u:"+ap).Result()
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

// globEscape escapes the glob characters of a key prefix for SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Resolve implements store.Store: finish.lua, whoever holds the claim.
func (s *rstore) Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, now time.Time) error {
	var o string
	switch outcome {
	case store.Done:
		o = "done"
	case store.NotDone:
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
	base := s.base(owner.Agent, owner.User)
	keys := []string{base + "op:" + operationID}
	args := []any{"", o, ns(now), ns(now.Add(s.retention)), revisionSuffix(), "1", owner.Account, ttlMs(now.Add(s.retention), now)}
	n, err := s.finish(ctx, owner, operationID, keys, args, o, true)
	if err != nil {
		return fmt.Errorf("redisstore: resolve: %w", err)
	}
	if n != 1 {
		return store.ErrNotPerforming
	}
	return nil
}
