package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/spans"
)

// confirmer groups the confirmations of claims on one server, as a
// database groups commits: claims that finish while a confirmation is on
// its way share the next one, a single round trip of their start marks
// (start.lua, one each) and one WAIT (or WAITAOF).
//
// That is sound for the reason one mark confirms one claim (Store.confirm):
// Redis replicates and appends to the AOF in the order it runs commands, and
// a round's marks are written only after every claim in the round had its
// reply, so a confirmed round confirms them all. A claim never joins a round
// whose marks may already have been sent: it joins the next one.
//
// A claim that finds no confirmation on its way confirms itself at once,
// under its own context, so that a claim alone is never delayed. Later
// rounds run on a goroutine of their own, under the latest deadline of
// their claims (none when one of them has none; WAIT and WAITAOF end by
// Options.DurabilityTimeout on the server all the same), and each claim waits for
// its round no longer than its own deadline (BoundByContext): one impatient
// claim never fails the others.
type confirmer struct {
	mu      sync.Mutex
	running bool          // a confirmation is on its way
	next    *confirmRound // the round that claims finishing now join; nil when none
	// onSent, when set (tests), learns of each round sent: how many
	// claims it confirmed.
	onSent func(claims int)
}

// startMark is one claim's start mark: its token key, token and clock
// (now, and at as a time), when the token is forgotten (till, as the
// claim wrote it), and once the claim's reply is read (of) the claimed
// operation's key and the value the claim gave the token key.
type startMark struct {
	key, token, now, till string
	at                    time.Time
	op, claimed           string
}

// sendMarks writes a round's start marks and waits for them: started[i]
// says whether marks[i] found its claim still held (start.lua); err, that
// the round was not confirmed (then no claim of it is).
type sendMarks func(ctx context.Context, marks []startMark) (started []bool, err error)

// errNotStarted is a claim whose start mark found it undone (released, or
// never started and undone by a later request or Performing): its handler
// must not run.
var errNotStarted = errors.New("claim undone before its start mark")

// confirmRound is one round of marks and a wait, for the claims that
// joined it.
type confirmRound struct {
	send     sendMarks // its first claim's: mark and wait
	marks    []startMark
	started  []bool
	done     chan struct{} // closed once err and started are set
	err      error
	deadline time.Time // the latest of its claims' deadlines
	forever  bool      // one of its claims has no deadline
	claims   int
	traced   []context.Context // its traced claims', whose spans link to its own
}

// confirm starts and confirms a claim that has had its reply: send writes
// its start mark on the claim's server and waits for it, in one round
// trip. It returns errNotStarted when the mark found the claim undone.
func (c *confirmer) confirm(ctx context.Context, mark startMark, send sendMarks) error {
	c.mu.Lock()
	if !c.running {
		// Nothing on its way: this claim's own round, at once.
		c.running = true
		c.mu.Unlock()
		started, err := send(ctx, []startMark{mark})
		c.sent(1)
		c.startNext()
		return startedOrNot(started, 0, err)
	}
	r := c.next
	if r == nil {
		r = &confirmRound{send: send, done: make(chan struct{})}
		c.next = r
	}
	i := len(r.marks)
	r.marks = append(r.marks, mark)
	r.claims++
	if spans.From(ctx) != nil {
		r.traced = append(r.traced, ctx)
	}
	if d, ok := ctx.Deadline(); !ok {
		r.forever = true
	} else if d.After(r.deadline) {
		r.deadline = d
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return startedOrNot(r.started, i, r.err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startNext sends the round that claims joined meanwhile, if any, on a
// goroutine of its own, then each one after it.
func (c *confirmer) startNext() {
	if r := c.takeNext(); r != nil {
		go c.run(r)
	}
}

func (c *confirmer) run(r *confirmRound) {
	for ; r != nil; r = c.takeNext() {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if !r.forever {
			ctx, cancel = context.WithDeadline(ctx, r.deadline)
		}
		ctx, sp := spans.Shared(ctx, "opsgate.redis.confirm_round", r.traced, spans.Labels{Batch: r.claims})
		r.started, r.err = r.send(ctx, r.marks)
		sp.End(spans.Labels{}, r.err)
		cancel()
		c.sent(r.claims)
		close(r.done)
	}
}

// takeNext takes the round that claims joined meanwhile, closed to others
// from now on; or, when there is none, notes that nothing is on its way.
func (c *confirmer) takeNext() *confirmRound {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.next
	c.next = nil
	if r == nil {
		c.running = false
	}
	return r
}

func (c *confirmer) sent(claims int) {
	if c.onSent != nil {
		c.onSent(claims)
	}
}

// startedOrNot is one claim's verdict from its round: the round's error,
// or errNotStarted when its mark (the i-th) found the claim undone.
func startedOrNot(started []bool, i int, err error) error {
	if err != nil {
		return err
	}
	if i >= len(started) || !started[i] {
		return errNotStarted
	}
	return nil
}
