package webkit

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The Gate's steps that must land after the request has been answered: the
// Release of a claim whose handler never ran, and the Finish of one whose
// handler did (RULES.md "Claims are never stranded", §7 W144). Each is tried
// at once and, while the store fails, again with backoff
// (defaultRetryDelays: 1 s doubling to 30 s),
// until it lands, until what it settles is no longer kept (a claim token's
// ClaimTokenTTL for a Release; the store's retention for a Finish), or
// until the process exits: a store that was away for minutes gets them
// seconds after it is back, so a claim whose handler never ran is
// released and a performed operation reads performed.
//
// One goroutine per Kit tries them, only while some wait, and at most
// defaultMaxRetries wait at once (a few hundred bytes each: a Finish keeps only
// the claim's owner, operation_id and token), so an outage costs bounded
// memory; a step beyond that is logged and left to the store (a claim
// never started is undone by the next request or Performing) or to
// reconciliation (Performing lists a performed operation whose Finish
// never landed).

// defaultRetryDelays are the waits between tries of one step: then the
// last, again and again.
var defaultRetryDelays = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second}

// defaultMaxRetries bounds the steps waiting to be tried again.
const defaultMaxRetries = 10000

// finishRetryFor is how long a failed Finish is tried again: the store's
// default retention, beyond which the operation is forgotten.
const finishRetryFor = storekit.DefaultRetention

// retryStep is a Release or a Finish to land.
type retryStep struct {
	release bool
	owner   store.Owner
	token   string        // Release
	claim   store.Claim   // Finish: owner, operation_id and token only
	outcome store.Outcome // Finish
	path    string        // the request's, for the logs
	// The Kit's store, deadline, clock and logger when the request ran:
	// read then, so that the steps never race with a change of the Kit.
	st      storedriver.Store
	timeout time.Duration
	now     func() time.Time
	logger  *slog.Logger
	tries   int
	next    time.Time // when to try it again
	until   time.Time // when to give up
	index   int       // in the heap
}

// retries is a Kit's queue of steps to land, soonest first.
type retries struct {
	mu      sync.Mutex
	steps   retryHeap
	running bool          // its goroutine runs
	trying  int           // steps out of the heap while being tried (0 or 1)
	wake    chan struct{} // a step sooner than the goroutine waits for

	// delays and max, when set (tests), replace defaultRetryDelays and
	// defaultMaxRetries.
	delays []time.Duration
	max    int
}

func (q *retries) delay(tries int) time.Duration {
	d := q.delays
	if len(d) == 0 {
		d = defaultRetryDelays
	}
	return d[min(tries-1, len(d)-1)]
}

func (q *retries) limit() int {
	if q.max > 0 {
		return q.max
	}
	return defaultMaxRetries
}

type retryHeap []*retryStep

func (h retryHeap) Len() int           { return len(h) }
func (h retryHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h retryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *retryHeap) Push(x any)        { s := x.(*retryStep); s.index = len(*h); *h = append(*h, s) }
func (h *retryHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return s
}

// retryLater queues st, which failed once, to be tried again after the
// first delay; false when the queue is full.
func (k *Kit) retryLater(st *retryStep) bool {
	q := &k.retries
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.steps) >= q.limit() {
		return false
	}
	st.tries = 1
	st.next = time.Now().Add(q.delay(1))
	heap.Push(&q.steps, st)
	if q.wake == nil {
		q.wake = make(chan struct{}, 1)
	}
	if !q.running {
		q.running = true
		go k.runRetries()
	} else if st.index == 0 {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// pendingRetries is how many steps wait to be tried again, counting the
// one being tried now.
func (k *Kit) pendingRetries() int {
	k.retries.mu.Lock()
	defer k.retries.mu.Unlock()
	return len(k.retries.steps) + k.retries.trying
}

// runRetries tries each queued step when it is due, until none is left.
// After a try that fails, the others due are not tried in the same pass:
// the store is likely still away, and each would cost a StoreTimeout.
func (k *Kit) runRetries() {
	q := &k.retries
	for {
		q.mu.Lock()
		if len(q.steps) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		st := q.steps[0]
		wait := time.Until(st.next)
		if wait > 0 {
			q.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-q.wake:
			}
			t.Stop()
			continue
		}
		heap.Pop(&q.steps)
		q.trying++
		q.mu.Unlock()
		if k.try(st) {
			q.settled()
			continue
		}
		if !time.Now().Before(st.until) {
			k.gaveUp(st)
			q.settled()
			continue
		}
		st.tries++
		q.mu.Lock()
		q.trying--
		d := q.delay(st.tries)
		// Whatever else is due waits for this one's next try at the
		// earliest: the store just failed.
		st.next = time.Now().Add(d)
		for _, o := range q.steps {
			if o.next.Before(st.next) {
				o.next = st.next
			}
		}
		heap.Init(&q.steps)
		heap.Push(&q.steps, st)
		q.mu.Unlock()
	}
}

// settled counts off the step that was being tried.
func (q *retries) settled() {
	q.mu.Lock()
	q.trying--
	q.mu.Unlock()
}

// newRetryStep is a step of a request's, with what it needs of the Kit.
func (k *Kit) newRetryStep(path string) *retryStep {
	now := k.Clock
	if now == nil {
		now = time.Now
	}
	return &retryStep{path: path, st: k.store(), timeout: k.storeTimeout(), now: now, logger: k.logger()}
}

// try runs st once; true when it landed (or there is nothing left to land).
func (k *Kit) try(st *retryStep) bool {
	ctx, cancel := context.WithTimeout(context.Background(), st.timeout)
	defer cancel()
	if st.release {
		released, err := st.st.Release(ctx, st.owner, st.token, st.now())
		if err != nil {
			return false
		}
		if released {
			st.logger.LogAttrs(ctx, slog.LevelInfo, "opsgate: released a claim the Gate could not confirm; its approval applies to the next request (W144)",
				slog.String("path", st.path), slog.Int("tries", st.tries+1))
		}
		return true
	}
	err := st.st.Finish(ctx, st.claim, st.outcome, st.now())
	switch {
	case err == nil:
		st.logger.LogAttrs(ctx, slog.LevelInfo, "opsgate: a Finish that had failed landed",
			slog.String("path", st.path), slog.String("outcome", st.outcome.String()), slog.Int("tries", st.tries+1))
		return true
	case errors.Is(err, storedriver.ErrClaimLost):
		// An earlier try landed after all (its reply was lost), or
		// reconciliation settled it: nothing left to do.
		return true
	}
	return false
}

// gaveUp logs a step that never landed before its time ran out.
func (k *Kit) gaveUp(st *retryStep) {
	what := "release"
	if !st.release {
		what = "finish"
	}
	st.logger.LogAttrs(context.Background(), slog.LevelError, "opsgate: store failed; gave up retrying",
		slog.String("op", what), slog.String("path", st.path), slog.Int("tries", st.tries))
}

// dropped logs a step that found the queue full.
func (k *Kit) dropped(st *retryStep) {
	what, left := "release", "a claim never started is undone by the next request, or by Performing"
	if !st.release {
		what, left = "finish", "the operation stays performing until reconciliation (Performing, Resolve)"
	}
	st.logger.LogAttrs(context.Background(), slog.LevelError, "opsgate: store failed; too many steps wait to be retried",
		slog.String("op", what), slog.String("path", st.path), slog.String("left", left))
}

// slimClaim is what Finish needs of a claim: its owner, operation_id and
// token, so that a retried Finish keeps no terms or approval.
func slimClaim(c store.Claim) store.Claim {
	return store.Claim{Owner: c.Owner, Operation: store.Operation{ID: c.Operation.ID, Revision: c.Operation.Revision}, Token: c.Token}
}
