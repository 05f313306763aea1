package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond until it holds, or fails the test after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// joined is how many claims wait for the next round.
func (c *confirmer) joined() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		return 0
	}
	return c.next.claims
}

// confirmFn confirms a claim whose round's send is send, every mark of
// the round found held: the grouping alone, without start marks.
func (c *confirmer) confirmFn(ctx context.Context, send func(context.Context) error) error {
	return c.confirm(ctx, startMark{}, func(ctx context.Context, marks []startMark) ([]bool, error) {
		started := make([]bool, len(marks))
		for i := range started {
			started[i] = true
		}
		return started, send(ctx)
	})
}

type ctxKey struct{}

func TestConfirmer(t *testing.T) {
	t.Parallel()
	t.Run("a lone claim confirms itself at once, under its own context", func(t *testing.T) {
		var c confirmer
		var rounds []int
		c.onSent = func(n int) { rounds = append(rounds, n) }
		ctx := context.WithValue(t.Context(), ctxKey{}, "mine")
		var got any
		err := c.confirmFn(ctx, func(ctx context.Context) error { got = ctx.Value(ctxKey{}); return nil })
		if err != nil || got != "mine" || len(rounds) != 1 || rounds[0] != 1 {
			t.Fatalf("err %v, context value %v, rounds %v", err, got, rounds)
		}
		if c.running {
			t.Error("still running after the only round")
		}
	})

	t.Run("claims finishing during a round share the next one", func(t *testing.T) {
		var c confirmer
		var mu sync.Mutex
		var rounds []int
		c.onSent = func(n int) { mu.Lock(); rounds = append(rounds, n); mu.Unlock() }
		gate := make(chan struct{})
		first := make(chan error)
		go func() {
			first <- c.confirmFn(t.Context(), func(context.Context) error { <-gate; return nil })
		}()
		waitFor(t, "the first round on its way", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.running })
		var sends atomic.Int32
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range errs {
			wg.Go(func() {
				errs[i] = c.confirmFn(t.Context(), func(context.Context) error { sends.Add(1); return nil })
			})
		}
		waitFor(t, "10 claims joined", func() bool { return c.joined() == 10 })
		close(gate)
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if sends.Load() != 1 || len(rounds) != 2 || rounds[0] != 1 || rounds[1] != 10 {
			t.Fatalf("%d sends for the 10, rounds %v; want one round of 10 after the first", sends.Load(), rounds)
		}
		waitFor(t, "nothing on its way", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return !c.running })
	})

	t.Run("a round runs under the latest deadline of its claims, none when one has none", func(t *testing.T) {
		for _, forever := range []bool{false, true} {
			var c confirmer
			gate := make(chan struct{})
			go c.confirmFn(t.Context(), func(context.Context) error { <-gate; return nil })
			waitFor(t, "the first round on its way", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.running })
			later := time.Now().Add(time.Hour)
			deadlines := make(chan time.Time, 1)
			var wg sync.WaitGroup
			for i, d := range []time.Time{time.Now().Add(time.Minute), later, time.Now().Add(2 * time.Minute)} {
				ctx, cancel := context.WithDeadline(t.Context(), d)
				if forever && i == 2 {
					ctx, cancel = context.WithCancel(t.Context())
				}
				defer cancel()
				wg.Go(func() {
					c.confirmFn(ctx, func(ctx context.Context) error {
						d, ok := ctx.Deadline()
						if !ok {
							d = time.Time{}
						}
						deadlines <- d
						return nil
					})
				})
				waitFor(t, "the claim joined", func() bool { return c.joined() == i+1 })
			}
			close(gate)
			wg.Wait()
			got := <-deadlines
			if forever && !got.IsZero() {
				t.Errorf("a claim without a deadline: the round had %v", got)
			}
			if !forever && !got.Equal(later) {
				t.Errorf("the round's deadline %v, want the latest %v", got, later)
			}
		}
	})

	t.Run("a claim leaves at its own deadline and the round still confirms the others", func(t *testing.T) {
		var c confirmer
		var rounds atomic.Int32
		c.onSent = func(int) { rounds.Add(1) }
		gate := make(chan struct{})
		go c.confirmFn(t.Context(), func(context.Context) error { <-gate; return nil })
		waitFor(t, "the first round on its way", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.running })
		short, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		impatient := make(chan error)
		go func() { impatient <- c.confirmFn(short, func(context.Context) error { return nil }) }()
		waitFor(t, "the impatient claim joined", func() bool { return c.joined() == 1 })
		patient := make(chan error)
		go func() { patient <- c.confirmFn(t.Context(), func(context.Context) error { return nil }) }()
		waitFor(t, "the patient claim joined", func() bool { return c.joined() == 2 })
		if err := <-impatient; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the impatient claim: %v", err)
		}
		close(gate)
		if err := <-patient; err != nil {
			t.Fatalf("the patient claim: %v", err)
		}
		waitFor(t, "two rounds", func() bool { return rounds.Load() == 2 })
	})

	t.Run("a round's failure reaches every claim in it and only those", func(t *testing.T) {
		var c confirmer
		gate := make(chan struct{})
		boom := errors.New("WAIT: 0 of 1 replicas")
		go c.confirmFn(t.Context(), func(context.Context) error { <-gate; return nil })
		waitFor(t, "the first round on its way", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.running })
		errs := make([]error, 5)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				errs[i] = c.confirmFn(t.Context(), func(context.Context) error { return boom })
			})
		}
		waitFor(t, "5 joined", func() bool { return c.joined() == 5 })
		close(gate)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, boom) {
				t.Errorf("claim %d: %v", i, err)
			}
		}
		if err := c.confirmFn(t.Context(), func(context.Context) error { return nil }); err != nil {
			t.Errorf("the next claim, alone: %v", err)
		}
	})

	// The soundness of grouping: every claim is confirmed by a mark sent
	// after it finished, never by one already on its way when it came.
	t.Run("no claim is confirmed by a round sent before it came", func(t *testing.T) {
		var c confirmer
		var clock atomic.Int64 // orders events across goroutines
		type round struct{ start, end int64 }
		var mu sync.Mutex
		var sent []round
		send := func(context.Context) error {
			r := round{start: clock.Add(1)}
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			r.end = clock.Add(1)
			mu.Lock()
			sent = append(sent, r)
			mu.Unlock()
			return nil
		}
		var wg sync.WaitGroup
		var bad atomic.Int32
		var claims atomic.Int32
		for range 16 {
			wg.Go(func() {
				for range 200 {
					came := clock.Add(1) // the claim's reply arrived
					if err := c.confirmFn(t.Context(), send); err != nil {
						t.Error(err)
						return
					}
					left := clock.Add(1)
					claims.Add(1)
					// Some round started after the claim came and ended
					// before it left.
					mu.Lock()
					ok := false
					for _, r := range sent {
						if r.start > came && r.end < left {
							ok = true
							break
						}
					}
					mu.Unlock()
					if !ok {
						bad.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if bad.Load() > 0 {
			t.Fatalf("%d of %d claims confirmed by no round sent after they came", bad.Load(), claims.Load())
		}
		if len(sent) >= int(claims.Load()) {
			t.Errorf("%d rounds for %d claims: none shared", len(sent), claims.Load())
		}
		t.Logf("%d claims, %d rounds", claims.Load(), len(sent))
	})
}
