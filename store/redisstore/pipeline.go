package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/spans"
)

// defaultPipelines is Options.Pipelines when zero.
const defaultPipelines = 4

// maxBatch bounds the steps one round trip carries.
const maxBatch = 64

// pipeliner sends the steps that many goroutines call at the same moment
// in shared round trips (Options.Pipelines). While that many batches are
// on their way to the server, further calls wait in a queue, and the next
// round trip carries all of them (up to maxBatch) at once. Every step is
// still its own atomic FCALL or EVALSHA; only the connection's reads and
// writes are shared, which at high concurrency is much of what a step
// costs Redis and this process beyond its own commands. A call that finds
// a pipeline free is sent at once by its own goroutine: a lone goroutine
// never waits for a batch, nor hands its call to another.
//
// Each batch is sent by one of its callers (its leader); the others wait
// for their reply or their context. A call whose context ends before its
// batch is sent is never sent; one whose context ends after has an unknown
// outcome, as any call whose reply is lost.
type pipeliner struct {
	client      *redis.Client
	maxInFlight int

	mu       sync.Mutex
	inFlight int       // batches being sent, or handed to a leader to send
	queue    []*queued // calls waiting for a batch, oldest first
}

// queued is one call: its command, and where its caller waits.
type queued struct {
	cmd *redis.Cmd
	ctx context.Context
	// wake is signalled once cmd has its reply, or once lead is set.
	wake chan struct{}

	// Under pipeliner.mu:
	lead []*queued // a batch this call is to send (it is the first)
	left bool      // its caller gave up before it was sent: never send
	sent bool      // its batch is on its way
}

func newPipeliner(client *redis.Client, maxInFlight int) *pipeliner {
	return &pipeliner{client: client, maxInFlight: maxInFlight}
}

// call sends the command args, alone or in a batch, and returns it with its
// reply. A caller whose context ends first gets a command of its own
// carrying that error: the one it queued may be in a batch on its way,
// whose leader still writes its reply.
func (p *pipeliner) call(ctx context.Context, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if err := p.do(ctx, cmd); err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		left := redis.NewCmd(ctx, args...)
		left.SetErr(err)
		return left
	}
	return cmd
}

// do sends cmd, alone or in a batch, and returns its error once it has its
// reply, or ctx's once ctx is done. After ctx's error cmd must not be read:
// a batch on its way may still write it (call).
func (p *pipeliner) do(ctx context.Context, cmd *redis.Cmd) error {
	p.mu.Lock()
	if p.inFlight < p.maxInFlight {
		// A round trip is free, so nothing is queued (calls queue only
		// while every one is taken): this call goes alone, at once.
		p.inFlight++
		p.mu.Unlock()
		_ = p.client.Process(ctx, cmd)
		p.mu.Lock()
		p.releaseLocked()
		p.mu.Unlock()
		return cmd.Err()
	}
	q := &queued{cmd: cmd, ctx: ctx, wake: make(chan struct{}, 1)}
	p.queue = append(p.queue, q)
	p.mu.Unlock()
	return p.wait(q)
}

// wait waits for queued call q: for its reply, to lead a batch, or until
// its context is done.
func (p *pipeliner) wait(q *queued) error {
	ctx, cmd := q.ctx, q.cmd
	woken := false
	select {
	case <-q.wake:
		woken = true
	case <-ctx.Done():
	}
	p.mu.Lock()
	switch {
	case q.lead != nil:
		// Handed a batch to lead.
		if ctx.Err() == nil {
			batch := p.startLocked(q.lead)
			p.mu.Unlock()
			p.send(batch)
			return cmd.Err()
		}
		// Its caller gives up: the next of the batch's calls still
		// waiting leads it instead, and this one is never sent.
		q.left = true
		p.handOnLocked(q.lead[1:])
		p.mu.Unlock()
		return ctx.Err()
	case woken:
		// Its batch was sent and answered.
		p.mu.Unlock()
		return cmd.Err()
	case q.sent:
		// On its way: unless answered just now, its outcome is unknown to
		// the caller.
		p.mu.Unlock()
		select {
		case <-q.wake:
			return cmd.Err()
		default:
			return ctx.Err()
		}
	}
	// Queued, or in a batch not sent yet: never sent.
	q.left = true
	for i, w := range p.queue {
		if w == q {
			p.queue = slices.Delete(p.queue, i, i+1)
			break
		}
	}
	p.mu.Unlock()
	return ctx.Err()
}

// batchLocked is first followed by as many queued calls as a batch takes,
// taken off the queue.
func (p *pipeliner) batchLocked(first *queued) []*queued {
	n := min(len(p.queue), maxBatch-1)
	batch := make([]*queued, 0, n+1)
	batch = append(batch, first)
	batch = append(batch, p.queue[:n]...)
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	return batch
}

// startLocked is batch without the calls whose callers left, each marked
// as sent.
func (p *pipeliner) startLocked(batch []*queued) []*queued {
	out := batch[:0]
	for _, q := range batch {
		if !q.left {
			q.sent = true
			out = append(out, q)
		}
	}
	return out
}

// handOnLocked makes the first call of batch whose caller is still waiting
// its leader, or frees the batch's pipeline when there is none.
func (p *pipeliner) handOnLocked(batch []*queued) {
	for i, q := range batch {
		if !q.left {
			q.lead = batch[i:]
			signal(q.wake)
			return
		}
	}
	p.releaseLocked()
}

// releaseLocked hands a pipeline that has sent its batch to the oldest
// queued call, with the calls queued after it, or frees it.
func (p *pipeliner) releaseLocked() {
	if len(p.queue) == 0 {
		p.inFlight--
		return
	}
	next := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	next.lead = p.batchLocked(next)
	signal(next.wake)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// send sends batch, its leader first, in one round trip, passes the
// pipeline on and wakes the batch's other callers.
func (p *pipeliner) send(batch []*queued) {
	if len(batch) == 1 {
		_ = p.client.Process(batch[0].ctx, batch[0].cmd)
	} else {
		// The batch has its leader's deadline (each caller waits no longer
		// than its own), but not its cancellation: the others' calls go on
		// if the leader's caller goes away.
		lead := batch[0].ctx
		ctx := context.WithoutCancel(lead)
		if d, ok := lead.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d)
			defer cancel()
		}
		// Traced, the round trip is a span of its own, linked to each
		// request's step (and each step to it): a go-redis tracing hook
		// under ctx is then its child, not the leader's alone.
		sp := spans.None
		if spans.From(lead) != nil {
			members := make([]context.Context, len(batch))
			for i, q := range batch {
				members[i] = q.ctx
			}
			ctx, sp = spans.Shared(ctx, "opsgate.redis.round_trip", members, spans.Labels{Batch: len(batch)})
		}
		pipe := p.client.Pipeline()
		for _, q := range batch {
			_ = pipe.Process(ctx, q.cmd)
		}
		_, err := pipe.Exec(ctx) // each command has its own reply or error
		sp.End(spans.Labels{}, ioError(err))
	}
	p.mu.Lock()
	p.releaseLocked()
	p.mu.Unlock()
	for _, q := range batch[1:] {
		signal(q.wake)
	}
}

// ioError is err unless it is a step's own error reply (which Exec returns
// as a batch's first failure): a round trip fails only when it did not
// make it there and back.
func ioError(err error) error {
	var reply redis.Error
	if errors.As(err, &reply) {
		return nil
	}
	return err
}
