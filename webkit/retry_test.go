package webkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// awayStore is a store that is away while down is set: Release and Finish
// fail (and count their tries); with loseTake, Take runs and its reply is
// lost, as when Redis runs a Take after its caller gave up.
type awayStore struct {
	storedriver.Store
	down                   atomic.Bool
	loseTake               atomic.Bool
	releases, finishes     atomic.Int64 // tries while down
	releasedOK, finishedOK atomic.Int64 // tries that landed
}

var errAway = errors.New("store away (test)")

func (s *awayStore) Issue(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	return storetest.Issue(ctx, s.Store, o, a, now)
}

func (s *awayStore) Take(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	res, err := s.Store.Take(ctx, o, a, now)
	if s.loseTake.Load() {
		return storedriver.TakeResult{}, errAway
	}
	return res, err
}

func (s *awayStore) Release(ctx context.Context, o store.Owner, token string, now time.Time) (bool, error) {
	if s.down.Load() {
		s.releases.Add(1)
		return false, errAway
	}
	s.releasedOK.Add(1)
	return s.Store.Release(ctx, o, token, now)
}

func (s *awayStore) Finish(ctx context.Context, c store.Claim, o store.Outcome, now time.Time) error {
	if s.down.Load() {
		s.finishes.Add(1)
		return errAway
	}
	s.finishedOK.Add(1)
	return s.Store.Finish(ctx, c, o, now)
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// RULES.md "Claims are never stranded", W144: a claim whose handler never
// ran is released however long the store was away. The Gate's Release
// fails again and again (the store is down for many tries, not the three
// of 0, +1 and +4 s the Gate made before) and lands once the store is
// back; the approval then performs on the next repeat, once.
func TestGateReleaseRetriedUntilTheStoreIsBack(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Config{})
	st := &awayStore{Store: mem.Steps()}
	e := newGateEnv(t, storedriver.AsStore(st), newClock())
	e.kit.retries.delays = []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	approved := e.approve(sesIn, "ord_7", "M")

	st.loseTake.Store(true)
	st.down.Store(true)
	if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code != 503 || e.runs.Load() != 0 {
		t.Fatalf("Take's reply lost: %d runs %d, want 503 and nothing run", rec.Code, e.runs.Load())
	}
	st.loseTake.Store(false)
	// Away for 20 tries of the Release.
	waitFor(t, "20 tries of the Release", func() bool { return st.releases.Load() >= 20 })
	if got := e.lookup(sesIn, approved.Ref); got.Status != storedriver.StatusPerforming {
		t.Fatalf("while the store is away: %s, want performing (its Release can't land)", got.Status)
	}
	if n := e.kit.pendingRetries(); n != 1 {
		t.Errorf("%d steps wait to be retried, want 1", n)
	}
	st.down.Store(false)
	waitFor(t, "the Release to land", func() bool { return e.kit.pendingRetries() == 0 && st.releasedOK.Load() > 0 })
	if got := e.lookup(sesIn, approved.Ref); got.Status != storedriver.StatusApproved {
		t.Fatalf("after the store came back: %s, want approved", got.Status)
	}
	if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code != 200 || e.runs.Load() != 1 {
		t.Fatalf("W144 repeat: %d runs %d, want 200 and one run", rec.Code, e.runs.Load())
	}
	t.Logf("released after %d failed tries", st.releases.Load())
}

// A Finish that failed (the store went away while the handler ran) is
// tried again until it lands: the performed operation reads performed
// soon after the store is back, rather than performing for a day.
func TestGateFinishRetriedUntilTheStoreIsBack(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Config{})
	st := &awayStore{Store: mem.Steps()}
	e := newGateEnv(t, storedriver.AsStore(st), newClock())
	e.kit.retries.delays = []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	approved := e.approve(sesIn, "ord_7", "M")
	st.down.Store(true)
	if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code != 200 || e.runs.Load() != 1 {
		t.Fatalf("performing: %d runs %d", rec.Code, e.runs.Load())
	}
	waitFor(t, "20 tries of the Finish", func() bool { return st.finishes.Load() >= 20 })
	if got := e.lookup(sesIn, approved.Ref); got.Status != storedriver.StatusPerforming {
		t.Fatalf("while the store is away: %s, want performing", got.Status)
	}
	st.down.Store(false)
	waitFor(t, "the Finish to land", func() bool { return e.kit.pendingRetries() == 0 && st.finishedOK.Load() > 0 })
	if got := e.lookup(sesIn, approved.Ref); got.Status != storedriver.StatusPerformed {
		t.Fatalf("after the store came back: %s, want performed", got.Status)
	}
	if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code == 200 || e.runs.Load() != 1 {
		t.Errorf("repeat after performed: %d runs %d, want no second run", rec.Code, e.runs.Load())
	}
}

// The steps waiting to be retried are bounded: past the Kit's cap, a
// failed step is logged and left to the store and to reconciliation, and
// memory stays bounded however long the store is away.
func TestGateRetriesAreBounded(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Config{})
	st := &awayStore{Store: mem.Steps()}
	e := newGateEnv(t, storedriver.AsStore(st), newClock())
	e.kit.retries.delays = []time.Duration{time.Hour}
	e.kit.retries.max = 3
	st.down.Store(true)
	for i := range 10 {
		order := fmt.Sprint("ord_", i)
		e.approve(sesIn, order, "M")
		st.loseTake.Store(true)
		if rec := e.do(e.request(joinedIn, "order="+order+"&size=M", "text/html")); rec.Code != 503 {
			t.Fatalf("Take's reply lost: %d", rec.Code)
		}
		st.loseTake.Store(false)
	}
	waitFor(t, "10 first tries", func() bool { return st.releases.Load() >= 10 })
	if n := e.kit.pendingRetries(); n != 3 {
		t.Errorf("%d steps wait to be retried, want the cap of 3", n)
	}
}

// lostTake is a client hook that loses the reply of the store's take step
// (FCALL of a function named *_take, once Load loaded them): Redis runs it,
// the web server gets an error and never sends the claim's start mark, as
// when it dies right after sending the Take.
type lostTake struct{}

func (lostTake) DialHook(next redis.DialHook) redis.DialHook { return next }
func (lostTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return lose([]redis.Cmder{cmd}, next(ctx, cmd))
	}
}
func (lostTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return lose(cmds, next(ctx, cmds)) }
}

func lose(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		a := c.Args()
		if len(a) > 1 && fmt.Sprint(a[0]) == "fcall" && strings.HasSuffix(fmt.Sprint(a[1]), "_take") {
			for _, c := range cmds {
				c.SetErr(errAway)
			}
			return errAway
		}
	}
	return err
}

// deadServer is the store as a web server sees it that dies right after
// sending its Take: none of its Releases lands.
type deadServer struct{ storedriver.Store }

func (s deadServer) Issue(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	return storetest.Issue(ctx, s.Store, o, a, now)
}

func (s deadServer) Release(context.Context, store.Owner, string, time.Time) (bool, error) {
	return false, errAway
}

// RULES.md "Claims are never stranded", W144: a web server that dies after
// sending its Take (Redis runs it, the reply is lost, no Release lands)
// leaves a claim no handler runs. That claim was never marked started, so
// another web server's request for the action, once the claim is 10 s old,
// undoes it and performs the approval, once; before then it is busy (the
// first Take may still be on its way).
func TestGateClaimOfADeadServerPerformsElsewhere(t *testing.T) {
	t.Parallel()
	inst := sharedRedis(t)
	clock := newClock()
	c := inst.Client(t)
	c.AddHook(lostTake{})
	first := redisstore.New(c, redisstore.Options{Prefix: "dead:"})
	other := redisstore.New(inst.Client(t), redisstore.Options{Prefix: "dead:"})
	for _, st := range []*redisstore.Store{first, other} {
		if err := st.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	dead := newGateEnv(t, storedriver.AsStore(deadServer{storedriver.Steps(first)}), clock)
	alive := newGateEnv(t, other, clock)
	approved := alive.approve(sesIn, "ord_7", "M")

	if rec := dead.do(dead.request(joinedIn, formM, "text/html")); rec.Code != 503 || dead.runs.Load() != 0 {
		t.Fatalf("the dying server: %d runs %d, want 503 and nothing run", rec.Code, dead.runs.Load())
	}
	if got := alive.lookup(sesIn, approved.Ref); got.Status != storedriver.StatusPerforming {
		t.Fatalf("after the lost Take: %s, want performing (Redis ran it)", got.Status)
	}
	clock.Add(time.Second)
	if rec := alive.do(alive.request(joinedIn, formM, "text/html")); rec.Code != 503 || alive.runs.Load() != 0 {
		t.Fatalf("another server at once: %d runs %d, want 503 (busy) and nothing run", rec.Code, alive.runs.Load())
	}
	clock.Add(10 * time.Second)
	if rec := alive.do(alive.request(joinedIn, formM, "text/html")); rec.Code != 200 || alive.runs.Load() != 1 {
		t.Fatalf("another server 11 s on: %d runs %d, want 200 and one run", rec.Code, alive.runs.Load())
	}
	if got := alive.lookup(sesIn, approved.Ref); got.Status != storedriver.StatusPerformed {
		t.Errorf("after: %s, want performed", got.Status)
	}
}
