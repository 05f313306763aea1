package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// withAgentCount runs step with the agent's count of open operations added
// to its keys, and its arguments followed by extra, when steps keep that
// count themselves (agentInStep: a single Redis, where opening, claiming,
// releasing and finishing an operation each stay one round trip; see
// new_operation and reopen in lib.lua). counted says whether it did; when
// not, the caller keeps the count apart (countNew, finish).
//
// A server that refuses a script's keys in more than one slot (CROSSSLOT:
// a proxy in front of a Cluster, such as Redis Enterprise's, reached with
// a *redis.Client) ran nothing: the step runs again without the count,
// and the store keeps the count apart from then on.
func withAgentCount[T any](s *rstore, owner store.Owner, keys []string, args []any, step func([]string, []any) (T, error), extra ...any) (v T, counted bool, err error) {
	if !s.agentInStep.Load() {
		v, err = step(keys, args)
		return v, false, err
	}
	v, err = step(append(keys, s.agentKey(owner.Agent)), append(append(args, extra...), agentMember(owner, "")))
	if err == nil || !redis.HasErrorPrefix(err, "CROSSSLOT") {
		return v, true, err
	}
	s.agentInStep.Store(false)
	v, err = step(keys, args)
	return v, false, err
}

// countNew counts a new operation against its agent's cap of open
// operations (Options.MaxOpenPerAgent) when the step that opened it could
// not: on a Cluster, an agent's Users are in many slots, so the count has a
// key (and a slot) of its own and costs one more round trip, only when
// Take or Issue made a new operation. Over the cap, the new operation is
// forgotten again (if nothing was recorded for it meanwhile) and the
// answer is storedriver.ErrRateLimited.
func (s *rstore) countNew(ctx context.Context, owner store.Owner, actKey string, op store.Operation, now time.Time) error {
	if s.maxOpenAgent <= 0 {
		return nil
	}
	n, err := s.run(ctx, s.client, agentStep, []string{s.agentKey(owner.Agent)},
		agentMember(owner, op.ID), ns(op.ExpiresAt), ns(now), s.maxOpenAgent).Int()
	if err != nil {
		s.failed(err)
		return fmt.Errorf("agent's open operations: %w", err)
	}
	if n == 1 {
		return nil
	}
	base := s.base(owner.Agent, owner.User)
	if err := s.run(ctx, s.client, undoStep, []string{base + "op:" + op.ID, actKey}, base, op.ID).Err(); err != nil {
		s.failed(err)
		return fmt.Errorf("agent's open operations: %w", err)
	}
	return storedriver.ErrRateLimited
}

// agentKey is the key of an agent's count of open operations: a slot of its
// own, since the agent's Users are in many.
func (s *rstore) agentKey(agent string) string {
	sum := sha256.Sum256([]byte(agent))
	return s.prefix + "agent:{" + base64.RawURLEncoding.EncodeToString(sum[:15]) + "}"
}

// agentMember is an operation in its agent's count.
func agentMember(owner store.Owner, opID string) string {
	return storekit.Slot(owner.Agent, owner.User) + " " + opID
}

// finish runs finish.lua with outcome o ("done", "notdone", "unknown")
// for operation opID of owner (Finish, and Resolve when exact).
//
// A performed operation leaves its agent's count of open operations, and
// one not performed after all comes back to it. On a single Redis
// (agentInStep) the step does both itself, only when it finishes the
// operation: exact, and one round trip. On a Cluster the count is on
// another node, and its claim did not take the operation off it: Finish
// pipelines a ZREM beside the step for a performed one (one round trip;
// should the step not hold the claim after all, the count is low by one
// until the operation's first revision expires: only the cap sees it),
// and Resolve (exact) removes it after the step has finished it, as does
// a Finish that a CROSSSLOT proxy made keep the count apart
// (withAgentCount).
func (s *rstore) finish(ctx context.Context, owner store.Owner, opID string, keys []string, args []any, o string, exact bool) (int64, error) {
	step := func(keys []string, args []any) (int64, error) {
		return s.run(ctx, s.client, finishStep, keys, args...).Int64()
	}
	if o == "unknown" || s.maxOpenAgent <= 0 {
		return step(keys, args)
	}
	member := agentMember(owner, opID)
	// takeOff takes a performed operation off its agent's count once the
	// step has finished it. Should that fail, the count keeps it until its
	// first revision expires: only the cap sees it.
	takeOff := func(n int64, err error) (int64, error) {
		if err == nil && n == 1 && o == "done" {
			_ = s.client.ZRem(ctx, s.agentKey(owner.Agent), member).Err()
		}
		return n, err
	}
	if o == "notdone" || s.agentInStep.Load() {
		n, counted, err := withAgentCount(s, owner, keys, args, step)
		if counted {
			return n, err
		}
		return takeOff(n, err) // behind a CROSSSLOT proxy: the count is apart now
	}
	if exact {
		return takeOff(step(keys, args))
	}
	var fin *redis.Cmd
	_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.functions.Load() {
			fin = p.FCall(ctx, finishStep.fn, keys, args...)
		} else {
			fin = p.EvalSha(ctx, finishStep.script.Hash(), keys, args...)
		}
		p.ZRem(ctx, s.agentKey(owner.Agent), member)
		return nil
	})
	if err := fin.Err(); err != nil && (noFunction(err) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		// The server lacked the step, so it did not run: run it on its own
		// (loading it as it goes).
		return s.run(ctx, s.client, finishStep, keys, args...).Int64()
	}
	return fin.Int64()
}
