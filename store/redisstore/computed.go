package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/computed"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// Computed waiting operations.
//
// §3: "A Company doesn't have to store operations that haven't been
// performed." The 403 step stores nothing for an
// action that has no live operation: Take only reads (its token's key,
// the action key and the computed operation's key) and answers "compute".
// The operation is then computed from the request, and its ref carries it,
// sealed (internal/computed says how the operation_id, the revision and
// the ref are computed; the ref starts with "<operation_id>.<revision>",
// which storekit.SplitRef reads).
//
// The operation is stored by the first approval sent for it (record.lua
// stores it as Take would have, then records): from then on every step
// sees it as if Take had stored it. Lookup of a ref whose operation is not
// stored answers from the ref itself.
//
// Only operations whose expires_at is at most Retention away are computed:
// a ref then expires before the operation it names can have been performed
// and forgotten, so it can never bring back a performed operation_id. One
// whose expires_at is in the next epoch is stored by Take under the
// operation_id it computed (computed.Crosses), so that the action keeps it
// after the turn.
// Terms too long for a 2048-character ref are stored by Take, and so is
// a new operation of an action whose operation is remembered. An approval stores a computed operation only while no
// other operation of its action is remembered (record.lua; lib.lua
// neighbour_allows): the package doc says why.

// sealKeyName is the key (after the prefix) that holds the store's secret:
// computed.SecretSize random bytes, made once by the first server that
// needs them, and read by every other server sharing the Redis.
const sealKeyName = "seal"

// sealerState caches the store's sealer once it was read or made.
type sealerState struct {
	s  atomic.Pointer[computed.Sealer]
	mu sync.Mutex // held while reading the secret
}

// sealer returns the store's sealer, reading (or making) its secret in
// Redis on first use; an error leaves nothing cached, so the next call
// tries again.
func (s *rstore) sealer(ctx context.Context) (*computed.Sealer, error) {
	if k := s.seal.s.Load(); k != nil {
		return k, nil
	}
	s.seal.mu.Lock()
	defer s.seal.mu.Unlock()
	if k := s.seal.s.Load(); k != nil {
		return k, nil
	}
	key := s.prefix + sealKeyName
	if err := s.client.SetNX(ctx, key, computed.NewSecret(), 0).Err(); err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	secret, err := s.client.Get(ctx, key).Bytes()
	if err != nil {
		return nil, fmt.Errorf("seal key: %w", err)
	}
	k, err := computed.NewSealer(secret)
	if err != nil {
		return nil, fmt.Errorf("seal key %q: %w", key, err)
	}
	s.seal.s.Store(k)
	return k, nil
}

// operationOf is the operation c describes, its revision rev.
func operationOf(c computed.Op, rev string) store.Operation {
	return store.Operation{ID: c.ID, Revision: rev, Summary: c.Summary, Terms: c.Terms, ExpiresAt: c.Expires}
}

// isComputedRef reports whether ref has the form of a computed one.
func isComputedRef(ref string) bool {
	return computed.IsSealed(ref) && storekit.ValidRef(ref)
}

// computable reports whether Take may compute the operation for action
// (its digest) rather than store it, and returns what it would be.
func (s *rstore) computable(owner store.Owner, digest string, action storedriver.TakeRequest, now time.Time) (computed.Op, bool) {
	return computed.New(now, s.retention, digest, owner.Account, action.ExpiresAt, action.Lifetime, action.Terms, action.Summary, storekit.MaxRefLength)
}

// mayCompute lets the step that issues for action (its keys and fields
// f from issueArgs, for the owner whose keys start with base) answer
// "compute" rather than store a new operation, when the operation can be
// computed: it returns the sealer and what to compute, its operation_id
// set. k is nil when the step is to store it (under a random id, or under
// the computed one when it crosses the epoch's turn).
func (s *rstore) mayCompute(ctx context.Context, base string, owner store.Owner, action storedriver.TakeRequest, now time.Time, keys []string, f *issueFields) (c computed.Op, k *computed.Sealer, err error) {
	c, ok := s.computable(owner, strings.TrimPrefix(keys[0], base+"act:"), action, now)
	if !ok {
		// Stored (terms too long for a ref, a lifetime beyond Retention):
		// the seed ends with "." alone (lib.lua issue: ka).
		f.seed += "."
		return c, nil, nil
	}
	if k, err = s.sealer(ctx); err != nil {
		s.failed(err)
		return c, nil, err
	}
	// The seed ends with "." and the operation_id to compute (lib.lua issue),
	// or "!" and it when a revision of it could still be approved after the
	// epoch's turn: the step then stores it under that id (computed.Crosses).
	c.ID = k.ID(base, c)
	// An API's or MCP server's revision is stored too, under that id: its
	// approval names it, not a ref (storedriver.TakeRequest.Via).
	if action.Via != "" || computed.Crosses(now, c.Expires, s.retention) {
		f.seed += "!" + c.ID
		return c, nil, nil
	}
	f.seed += "." + c.ID
	return c, k, nil
}

// issuedComputed is what Take and Issue answer for a computed operation.
func issuedComputed(k *computed.Sealer, base string, c computed.Op) storedriver.TakeResult {
	rev, ref := k.Issue(base, c)
	return storedriver.TakeResult{Operation: operationOf(c, rev), Ref: ref}
}

// lookupComputed is Lookup for a computed ref: the stored operation when
// its first approval stored it, else the operation the ref seals, while
// it has not expired and its action has no other live operation.
func (s *rstore) lookupComputed(ctx context.Context, owner store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	k, err := s.sealer(ctx)
	if err != nil {
		return storedriver.Found{}, false, err
	}
	base := s.base(owner.Agent, owner.User)
	c, rev, err := k.Open(base, ref)
	if err != nil {
		return storedriver.Found{}, false, nil // W74
	}
	op := operationOf(c, rev)
	before, after := k.Neighbours(base, c)
	var h *redis.MapStringStringCmd
	var act *redis.StringCmd
	var neighbours [2]*redis.SliceCmd
	if _, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, base+"op:"+op.ID)
		act = p.Get(ctx, base+"act:"+c.Action)
		neighbours[0] = p.HMGet(ctx, base+"op:"+before, "state", "k", "pa")
		neighbours[1] = p.HMGet(ctx, base+"op:"+after, "state", "k", "pa")
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return storedriver.Found{}, false, err
	}
	if rec, ok := record(h.Val(), op.ID, now); ok {
		rec.Owner.Agent, rec.Owner.User = owner.Agent, owner.User
		return rec, true, nil
	}
	if now.After(op.ExpiresAt) {
		return storedriver.Found{}, false, nil
	}
	remembered := func(k string) bool {
		until, ok := parseTime(k)
		return ok && !now.After(until)
	}
	for _, n := range neighbours {
		// A neighbour stored since, or performed after this one was
		// minted: this one never will be stored (lib.lua
		// neighbour_allows).
		v := n.Val()
		state, _ := v[0].(string)
		k, _ := v[1].(string)
		pa, _ := v[2].(string)
		claimed, ok := parseTime(pa)
		if remembered(k) && (state != "performed" || !ok || !claimed.Before(c.Minted)) {
			return storedriver.Found{}, false, nil
		}
	}
	if other, _, _ := strings.Cut(act.Val(), " "); other != "" && other != op.ID {
		k, err := s.client.HGet(ctx, base+"op:"+other, "k").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return storedriver.Found{}, false, err
		}
		if remembered(k) {
			// The action has another live operation: this one was
			// never stored, and never will be (record.lua).
			return storedriver.Found{}, false, nil
		}
	}
	return storedriver.Found{Owner: store.Owner{Agent: owner.Agent, User: owner.User, Account: c.Account}, Current: op, Status: storedriver.StatusWaiting}, true, nil
}

// recordComputed runs record.lua for a computed ref: keys and args as
// Record made them, then what storing the operation needs, and the audit
// log of an approval that stores it (firstLine) with its TTL ("" for an
// approval that would not: record.lua approve). The agent's
// count is kept in the same step on a single Redis; on a Cluster it is
// counted first, in a step of its own, so that an approval over the cap
// records nothing (counting an operation already counted changes nothing).
func (s *rstore) recordComputed(ctx context.Context, owner store.Owner, c computed.Op, opID string, keys []string, args []any, line, lineTTL string, now time.Time) ([]string, error) {
	args = append(args, "c", c.Account, c.Terms, c.Summary, ns(c.Expires), owner.Agent, owner.User, s.maxOpenOwner, ttlMs(c.Expires, now), ns(c.Minted),
		ns(c.Expires.Add(s.retention)), ttlMs(c.Expires.Add(s.retention), now), line, lineTTL)
	// The overall cap first: an approval past it stores nothing.
	if full, err := s.open.full(ctx, s.client, now); err != nil {
		return nil, fmt.Errorf("open operations: %w", err)
	} else if full {
		return []string{"limited"}, nil
	}
	if s.maxOpenAgent > 0 && !s.agentInStep.Load() {
		// On a Cluster: count first, then record.
		n, err := s.run(ctx, s.client, agentStep, []string{s.agentKey(owner.Agent)},
			agentMember(owner, opID), ns(c.Expires), ns(now), s.maxOpenAgent).Int()
		if err != nil {
			return nil, fmt.Errorf("agent's open operations: %w", err)
		}
		if n != 1 {
			return []string{"limited"}, nil
		}
	}
	v, _, err := withAgentCount(s, owner, keys, args, func(keys []string, args []any) ([]string, error) {
		return s.run(ctx, s.client, recordStep, keys, args...).StringSlice()
	}, s.maxOpenAgent)
	if err == nil && len(v) > 0 {
		switch v[0] {
		case "notfound", "replayed", "limited", "already":
			// Stored nothing (or stored before).
		default: // stored by this approval (then checked): it counts
			s.open.add(ctx, s.client, c.Expires, 1, now)
		}
	}
	return v, err
}
