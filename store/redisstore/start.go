package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// A claim's handler runs only after its start mark (start.lua): a step,
// atomic with the claim's state, that finds the claim still held by its
// token and marks it started. Take makes it before it returns a claim;
// with DurableDisk on Redis 7.2 and later and with DurableReplicas it is
// the very write the durability confirmation waits for (confirm), so it
// costs no round trip of its own there; with DurableNone, DurableServer
// and DurableDisk before 7.2, it is one more round trip on the claim path
// (startOne).
//
// Until its mark, a claim may be undone by someone other than its holder:
// a Take that Redis ran after its caller gave up (a stall, lost replies)
// claimed an approval nobody will perform. Once it was claimed more than
// unstartedFor ago, the next request for the action undoes it and claims
// for itself (take.lua), and Performing undoes it (tidy.lua); the first
// caller's mark, should it come after all, then finds the claim gone and
// Take fails (storedriver.ErrClaimLost): its handler never runs. Whichever of the
// two steps runs first decides, so correctness never rests on the clock:
// unstartedFor only keeps a claim from being undone while its own Take is
// still on its way.
//
// A claim once marked started is ended only by its holder (Finish, or
// Release when the holder did not run the handler after all: the mark's
// confirmation failed) or by Resolve.

// unstartedFor is how long after it was claimed a claim never marked
// started may be undone by another request or by Performing.
const unstartedFor = 10 * time.Second

// startOne writes one claim's start mark on c (a claim confirmed by its
// reply: DurableNone, DurableServer, DurableDisk before Redis 7.2). An error other than
// errNotStarted wraps errNotConfirmed: the mark may have been written, so
// the claim is released (takeDurable).
func (s *rstore) startOne(ctx context.Context, c caller, m startMark) error {
	n, err := s.run(ctx, c, startStep, m.keys(), m.args()...).Int()
	if err != nil {
		return fmt.Errorf("%w: start mark: %w", errNotConfirmed, err)
	}
	if n != 1 {
		return errNotStarted
	}
	return nil
}

// startMarks sends marks' start steps on conn (a connection of node's)
// and then what wait adds (WAIT, WAITAOF), in one round trip, and reports
// which marks found their claims held. A server that lacks the step
// (SCRIPT FLUSH, a restart, a node added since Load) ran none of the
// marks: the step is loaded and the round sent again, once.
func (s *rstore) startMarks(ctx context.Context, conn *redis.Conn, node *redis.Client, marks []startMark, wait func(redis.Pipeliner)) ([]bool, error) {
	functions := s.functions.Load()
	for attempt := 0; ; attempt++ {
		cmds := make([]*redis.Cmd, len(marks))
		_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range marks {
				if functions {
					cmds[i] = p.FCall(ctx, startStep.fn, m.keys(), m.args()...)
				} else {
					cmds[i] = p.EvalSha(ctx, startStep.script.Hash(), m.keys(), m.args()...)
				}
			}
			wait(p)
			return nil
		})
		started := make([]bool, len(marks))
		missing := false
		for i, c := range cmds {
			n, cerr := c.Int()
			started[i] = cerr == nil && n == 1
			if cerr != nil && (noFunction(cerr) || redis.HasErrorPrefix(cerr, "NOSCRIPT")) {
				missing = true
			}
		}
		if !missing || attempt == 1 {
			var rerr redis.Error
			if err != nil && errors.As(err, &rerr) {
				// One command's own error (a mark refused, MOVED): that mark
				// is not started; the wait's reply still says the rest.
				err = nil
			}
			return started, err
		}
		if lerr := startStep.script.Load(ctx, node).Err(); lerr != nil {
			return nil, fmt.Errorf("load the start step: %w", lerr)
		}
		functions = false
	}
}

// takeNone is Take's step when the reply is enough (DurableNone,
// DurableServer): the claim, then its start mark, each one step (shared
// round trips: Options.Pipelines).
func (s *rstore) takeNone(ctx context.Context, keys []string, args []any, owner store.Owner, mark startMark) ([]string, error) {
	v, err := s.run(ctx, s.client, takeStep, keys, args...).StringSlice()
	if err != nil || len(v) == 0 || v[0] != "claim" {
		return v, err
	}
	if err := s.startOne(ctx, s.client, mark.of(v)); err != nil {
		if errors.Is(err, errNotConfirmed) {
			s.releaseAfter(ctx, owner, mark.token, mark.at)
		}
		return nil, err
	}
	return v, nil
}

// of is the start mark of the claim reply v (take.lua's {'claim', opID,
// ...}): start.lua then finds the claimed operation without deriving its
// key, when the token key still holds what the claim wrote.
func (m startMark) of(v []string) startMark {
	if len(v) > 1 && storekit.ValidID(v[1]) {
		m.op = strings.TrimSuffix(m.key, "tok:"+m.token) + "op:" + v[1]
		m.claimed = v[1] + " " + m.till
	}
	return m
}

// keys and args are start.lua's.
func (m startMark) keys() []string {
	if m.op == "" {
		// No operation named (a claim from a reply that named none):
		// start.lua reads the token key's, as it always can.
		return []string{m.key, m.key}
	}
	return []string{m.key, m.op}
}

func (m startMark) args() []any {
	return []any{m.token, m.now, m.claimed, m.till}
}
