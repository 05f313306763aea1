package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// stepHook acts on the store's steps as they pass a client: before names
// the step about to be sent (and may run something first), and lost lists
// steps whose reply is lost: Redis runs them, the caller gets an error, as
// after a stall or dropped replies.
type stepHook struct {
	mu     sync.Mutex
	before func(step string)
	lost   map[string]bool
}

var errReplyLost = errors.New("i/o timeout (reply lost, test)")

func (h *stepHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *stepHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}
func (h *stepHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.process(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *stepHook) process(_ context.Context, cmds []redis.Cmder, next func() error) error {
	h.mu.Lock()
	before, lost := h.before, false
	var names []string
	for _, c := range cmds {
		if n := redisstore.StepOf(c.Args()); n != "" {
			names = append(names, n)
			lost = lost || h.lost[n]
		}
	}
	h.mu.Unlock()
	for _, n := range names {
		if before != nil {
			before(n)
		}
	}
	err := next()
	if lost {
		for _, c := range cmds {
			c.SetErr(errReplyLost)
		}
		return errReplyLost
	}
	return err
}

// startModes are the stores the start mark is tested on: DurableNone on
// miniredis and on a redis-server (its own step), DurableDisk on a
// redis-server (with appendfsync always on 7.0 its own step; with WAITAOF
// on 7.2 and later in the confirmation's round trip), and DurableReplicas
// (the marks are the writes WAIT confirms, confirm.go).
func startModes(t *testing.T) map[string]func(t *testing.T, h *stepHook) (store.Store, store.Store) {
	return map[string]func(t *testing.T, h *stepHook) (store.Store, store.Store){
		"none on miniredis": func(t *testing.T, h *stepHook) (store.Store, store.Store) {
			_, c := redistest.Mini(t)
			other := redis.NewClient(c.Options())
			t.Cleanup(func() { _ = other.Close() })
			c.AddHook(h)
			return redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone}), redisstore.New(other, redisstore.Options{Durability: redisstore.DurableNone})
		},
		"none": func(t *testing.T, h *stepHook) (store.Store, store.Store) {
			c := redistest.Server(t)
			other := redis.NewClient(c.Options())
			t.Cleanup(func() { _ = other.Close() })
			c.AddHook(h)
			return redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone}), redisstore.New(other, redisstore.Options{Durability: redisstore.DurableNone})
		},
		"replicas": func(t *testing.T, h *stepHook) (store.Store, store.Store) {
			if testing.Short() {
				t.Skip("-short: starts a replica")
			}
			master := redistest.Start(t)
			redistest.Replica(t, master)
			c, other := master.Client(t), master.Client(t)
			c.AddHook(h)
			opts := redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: 2 * time.Second}
			return redisstore.New(c, opts), redisstore.New(other, opts)
		},
		"disk": func(t *testing.T, h *stepHook) (store.Store, store.Store) {
			c := redistest.Server(t)
			other := redis.NewClient(c.Options())
			t.Cleanup(func() { _ = other.Close() })
			c.AddHook(h)
			return redisstore.New(c, redisstore.Options{}), redisstore.New(other, redisstore.Options{})
		},
	}
}

// W144, RULES.md "Claims are never stranded": a Take that Redis ran after
// its caller gave up (its reply lost) leaves a claim that was never marked
// started. However long the web server that made it is gone, the next
// request for the action undoes it once it is unstartedFor old and claims
// for itself; Performing undoes it too rather than list it.
func TestUnstartedClaimIsNotStranded(t *testing.T) {
	t.Parallel()
	for name, open := range startModes(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			t.Run("the next request claims it", func(t *testing.T) {
				h := &stepHook{lost: map[string]bool{"take": true}}
				st, other := open(t, h)
				a := action("lost", `{"v":1}`, time.Hour)
				is := takeIssued(t, other, a, at(0))
				recordOK(t, other, is, at(0))
				if _, err := storedriver.Steps(st).Take(ctx, owner, a, at(time.Second)); err == nil {
					t.Fatal("Take with its reply lost: no error")
				}
				// Redis ran it: the operation performs, with no handler.
				wantStatus(t, other, is.Ref, storedriver.StatusPerforming)
				if r, err := storedriver.Steps(other).Take(ctx, owner, a, at(2*time.Second)); err != nil || !r.Busy {
					t.Fatalf("the next request at once: %+v, %v; want busy (its Take may still be on its way)", r, err)
				}
				r, err := storedriver.Steps(other).Take(ctx, owner, a, at(12*time.Second))
				if err != nil || r.Claim == nil {
					t.Fatalf("the next request 11 s on: %+v, %v; want it to claim the approval no handler used", r, err)
				}
				if r.Claim.Operation.ID != is.Operation.ID {
					t.Errorf("claimed %s, want %s", r.Claim.Operation.ID, is.Operation.ID)
				}
			})
			t.Run("Performing undoes it and lists nothing", func(t *testing.T) {
				h := &stepHook{lost: map[string]bool{"take": true}}
				st, other := open(t, h)
				a := action("lost2", `{"v":1}`, time.Hour)
				is := takeIssued(t, other, a, at(0))
				recordOK(t, other, is, at(0))
				if _, err := storedriver.Steps(st).Take(ctx, owner, a, at(time.Second)); err == nil {
					t.Fatal("Take with its reply lost: no error")
				}
				if got := performing(t, other, at(3*time.Second), at(3*time.Second)); len(got) != 0 {
					t.Errorf("Performing listed a claim never started: %v", got)
				}
				wantStatus(t, other, is.Ref, storedriver.StatusPerforming) // 2 s old: left alone
				if got := performing(t, other, at(time.Hour), at(time.Hour)); len(got) != 0 {
					t.Errorf("Performing listed a claim never started: %v", got)
				}
				wantStatus(t, other, is.Ref, storedriver.StatusApproved)
			})
		})
	}
}

// The start mark decides, atomically, between the claim's own caller and
// whoever undoes a claim never started: Take, then the other side undoes
// it, then the mark fails and Take returns no claim (the handler never
// runs, and only the other request performs); and once marked, the other
// side refuses (busy), however late.
func TestStartMarkDecides(t *testing.T) {
	t.Parallel()
	for name, open := range startModes(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			t.Run("undone before the mark: the mark fails", func(t *testing.T) {
				h := &stepHook{}
				st, other := open(t, h)
				a := action("race", `{"v":1}`, time.Hour)
				is := takeIssued(t, other, a, at(0))
				recordOK(t, other, is, at(0))
				var stolen storedriver.TakeResult
				var stealErr error
				var once sync.Once
				h.before = func(step string) {
					if step == "start" {
						once.Do(func() {
							// The first web server has its claim's reply and is
							// about to mark it; the next request comes late
							// enough to undo a claim never started.
							stolen, stealErr = storedriver.Steps(other).Take(ctx, owner, a, at(time.Minute))
						})
					}
				}
				res, err := storedriver.Steps(st).Take(ctx, owner, a, at(time.Second))
				if stealErr != nil || stolen.Claim == nil {
					t.Fatalf("the other request: %+v, %v; want a claim", stolen, stealErr)
				}
				if res.Claim != nil || !errors.Is(err, storedriver.ErrClaimLost) {
					t.Fatalf("the first Take after its claim was undone: %+v, %v; want no claim, ErrClaimLost", res, err)
				}
				// One claim stands: the other's.
				if err := storedriver.Steps(other).Finish(ctx, *stolen.Claim, store.OutcomePerformed, at(time.Minute)); err != nil {
					t.Fatalf("Finish of the other's claim: %v", err)
				}
				wantStatus(t, other, is.Ref, storedriver.StatusPerformed)
			})
			t.Run("marked: the other side refuses", func(t *testing.T) {
				h := &stepHook{}
				st, other := open(t, h)
				a := action("race2", `{"v":1}`, time.Hour)
				is := takeIssued(t, other, a, at(0))
				recordOK(t, other, is, at(0))
				claim := takeClaim(t, st, a, at(time.Second))
				if r, err := storedriver.Steps(other).Take(ctx, owner, a, at(time.Hour)); err != nil || !r.Busy {
					t.Fatalf("another request an hour after a started claim: %+v, %v; want busy", r, err)
				}
				if got := performing(t, other, at(time.Hour), at(time.Hour)); len(got) != 1 || got[0] != is.Operation.ID {
					t.Errorf("Performing an hour on: %v, want the started claim %s (a person decides)", got, is.Operation.ID)
				}
				if err := storedriver.Steps(st).Finish(ctx, claim, store.OutcomePerformed, at(time.Hour)); err != nil {
					t.Fatalf("Finish of the started claim: %v", err)
				}
			})
		})
	}
}

// performing lists the operation_ids Performing yields.
func performing(t *testing.T, st store.Store, claimedBefore, now time.Time) []string {
	t.Helper()
	var ids []string
	for s, err := range st.Performing(t.Context(), claimedBefore, now) {
		if err != nil {
			t.Fatalf("Performing: %v", err)
		}
		ids = append(ids, s.Operation.ID)
	}
	return ids
}
