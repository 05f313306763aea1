package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// roundTrips is a go-redis hook that counts round trips and their sizes,
// and can hold them until released.
type roundTrips struct {
	name  string // the command counted ("incr" when "")
	mu    sync.Mutex
	sizes []int
	hold  chan struct{} // when not nil, each round trip waits for it
	held  chan struct{} // told when a round trip starts waiting
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != h.command() {
			return next(ctx, cmd) // a new connection's handshake
		}
		h.start(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != h.command() {
			return next(ctx, cmds)
		}
		h.start(len(cmds))
		return next(ctx, cmds)
	}
}

func (h *roundTrips) command() string {
	if h.name == "" {
		return "incr"
	}
	return h.name
}

func (h *roundTrips) start(n int) {
	h.mu.Lock()
	h.sizes = append(h.sizes, n)
	hold, held := h.hold, h.held
	h.mu.Unlock()
	if hold != nil {
		held <- struct{}{}
		<-hold
	}
}

func (h *roundTrips) got() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

func pipelined(t *testing.T, pipelines int) (*pipeliner, *roundTrips, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	h := &roundTrips{}
	c.AddHook(h)
	return newPipeliner(c, pipelines), h, m
}

func reply(c *redis.Cmd) int64 { n, _ := c.Int64(); return n }

func incr(ctx context.Context, key string) *redis.Cmd { return redis.NewCmd(ctx, "incr", key) }

// queuedCalls waits until p has n calls queued.
func queuedCalls(t *testing.T, p *pipeliner, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.mu.Lock()
		got := len(p.queue)
		p.mu.Unlock()
		if got == n {
			return
		}
	}
	t.Fatalf("%d calls never queued", n)
}

func counter(t *testing.T, m *miniredis.Miniredis, key string) int {
	t.Helper()
	v, err := m.Get(key)
	if errors.Is(err, miniredis.ErrKeyNotFound) {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}

func idle(t *testing.T, p *pipeliner) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight != 0 || len(p.queue) != 0 {
		t.Errorf("pipeliner not idle: %d round trips on their way, %d calls queued", p.inFlight, len(p.queue))
	}
}

// busy returns a pipeliner with one round trip, busy with a first call
// that h holds on its way (h.hold lets it go), and that call's result.
func busy(t *testing.T) (*pipeliner, *roundTrips, *miniredis.Miniredis, <-chan error) {
	t.Helper()
	p, h, m := pipelined(t, 1)
	h.hold, h.held = make(chan struct{}), make(chan struct{}, 2)
	first := make(chan error, 1)
	go func() { first <- p.do(t.Context(), incr(t.Context(), "first")) }()
	<-h.held
	return p, h, m, first
}

func TestPipelinerLoneCall(t *testing.T) {
	p, h, m := pipelined(t, 1)
	for i := range 3 {
		cmd := incr(t.Context(), "n")
		if err := p.do(t.Context(), cmd); err != nil || reply(cmd) != int64(i+1) {
			t.Fatalf("call %d: %v, %v", i, cmd.Val(), err)
		}
	}
	// Each alone, sent as a command of its own: no batch, no wait.
	if got := h.got(); len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Errorf("round trips %v, want [1 1 1]", got)
	}
	if counter(t, m, "n") != 3 {
		t.Errorf("n = %d", counter(t, m, "n"))
	}
	idle(t, p)
}

func TestPipelinerSharesRoundTrips(t *testing.T) {
	p, h, m, first := busy(t)
	const n = 10
	errs := make(chan error, n)
	cmds := make([]*redis.Cmd, n)
	for i := range cmds {
		cmds[i] = incr(t.Context(), "k"+strconv.Itoa(i))
		go func() { errs <- p.do(t.Context(), cmds[i]) }()
	}
	queuedCalls(t, p, n)
	h.mu.Lock()
	hold := h.hold
	h.hold = nil // the next round trip goes through
	h.mu.Unlock()
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if reply(c) != 1 || counter(t, m, "k"+strconv.Itoa(i)) != 1 {
			t.Errorf("k%d: reply %v, value %d", i, reply(c), counter(t, m, "k"+strconv.Itoa(i)))
		}
	}
	if got := h.got(); len(got) != 2 || got[0] != 1 || got[1] != n {
		t.Errorf("round trips %v, want [1 %d]: the queued calls share one", got, n)
	}
	idle(t, p)
}

func TestPipelinerCallLeavingBeforeSent(t *testing.T) {
	t.Run("queued", func(t *testing.T) {
		p, h, m, first := busy(t)
		ctx, cancel := context.WithCancel(t.Context())
		left := make(chan error, 1)
		go func() { left <- p.do(ctx, incr(ctx, "left")) }()
		queuedCalls(t, p, 1)
		cancel()
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Errorf("left: %v, want context.Canceled", err)
		}
		queuedCalls(t, p, 0)
		close(h.hold)
		<-first
		if counter(t, m, "left") != 0 {
			t.Error("a call that left before its batch was sent was sent")
		}
		idle(t, p)
	})
	// A batch handed to a (queued) call to lead, a then b, from which the
	// calls named leave before it is sent: the others are sent without
	// them, led by the first that stays, and the pipeline is freed.
	for _, c := range []struct{ name, leave string }{
		{"leader", "a"},     // the next call of the batch leads it
		{"in a batch", "b"}, // its leader sends the rest
		{"all", "ab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _, m := pipelined(t, 1)
			p.inFlight = 1 // a round trip on its way
			ctx, cancel := context.WithCancel(t.Context())
			call := map[string]*queued{}
			for _, name := range []string{"a", "b"} {
				cctx := t.Context()
				if strings.Contains(c.leave, name) {
					cctx = ctx
				}
				call[name] = p.queueForTest(cctx, name)
			}
			p.mu.Lock()
			p.releaseLocked() // that round trip is answered: a is to lead a and b
			p.mu.Unlock()
			cancel()
			// The leavers first: each leaves before a call that stays
			// sends the batch.
			order := strings.Split(c.leave, "")
			for _, name := range []string{"a", "b"} {
				if !strings.Contains(c.leave, name) {
					order = append(order, name)
				}
			}
			for _, name := range order {
				err := within(t, p, call[name])
				leaves := strings.Contains(c.leave, name)
				switch {
				case leaves && !errors.Is(err, context.Canceled):
					t.Errorf("%s: %v, want context.Canceled", name, err)
				case !leaves && (err != nil || reply(call[name].cmd) != 1):
					t.Errorf("%s: %v, %v", name, call[name].cmd.Val(), err)
				}
				if want := map[bool]int{true: 0, false: 1}[leaves]; counter(t, m, name) != want {
					t.Errorf("%s ran %d times, want %d", name, counter(t, m, name), want)
				}
			}
			idle(t, p)
		})
	}
}

// within is p.wait(q), failing the test if it doesn't return in seconds.
func within(t *testing.T, p *pipeliner, q *queued) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.wait(q) }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("a call never returned")
		return nil
	}
}

// queueForTest queues a call of INCR key as do does when every pipeline
// is busy.
func (p *pipeliner) queueForTest(ctx context.Context, key string) *queued {
	q := &queued{cmd: incr(ctx, key), ctx: ctx, wake: make(chan struct{}, 1)}
	p.mu.Lock()
	p.queue = append(p.queue, q)
	p.mu.Unlock()
	return q
}

// A call whose batch is on its way when its context ends has an unknown
// outcome: the caller gets the context's error, the command runs once.
func TestPipelinerCallLeavingAfterSent(t *testing.T) {
	p, h, m, first := busy(t)
	ctx, cancel := context.WithCancel(t.Context())
	lead, follow := make(chan error, 1), make(chan error, 1)
	go func() { lead <- p.do(t.Context(), incr(t.Context(), "lead")) }()
	queuedCalls(t, p, 1)
	go func() { follow <- p.do(ctx, incr(ctx, "follow")) }()
	queuedCalls(t, p, 2)
	h.hold <- struct{}{} // the first round trip is answered
	<-h.held             // the batch of lead and follow is on its way
	cancel()
	if err := <-follow; !errors.Is(err, context.Canceled) {
		t.Errorf("follow: %v, want context.Canceled", err)
	}
	close(h.hold)
	if err := <-lead; err != nil {
		t.Fatal(err)
	}
	<-first
	if counter(t, m, "follow") != 1 || counter(t, m, "lead") != 1 {
		t.Errorf("follow = %d, lead = %d; want 1, 1", counter(t, m, "follow"), counter(t, m, "lead"))
	}
	if got := h.got(); len(got) != 2 || got[1] != 2 {
		t.Errorf("round trips %v, want [1 2]", got)
	}
	idle(t, p)
}

// The same through call, as the store sends its steps: the caller gets a
// command of its own with its context's error, never the one the batch on
// its way still writes (under -race, reading that one was a data race;
// without the fix its error is nil here, the reply not yet read).
func TestPipelinerCallLeavingAfterSentGetsItsOwn(t *testing.T) {
	p, h, m, first := busy(t)
	ctx, cancel := context.WithCancel(t.Context())
	lead, follow := make(chan error, 1), make(chan *redis.Cmd, 1)
	go func() { lead <- p.do(t.Context(), incr(t.Context(), "lead")) }()
	queuedCalls(t, p, 1)
	go func() { follow <- p.call(ctx, []any{"incr", "follow"}) }()
	queuedCalls(t, p, 2)
	h.hold <- struct{}{} // the first round trip is answered
	<-h.held             // the batch of lead and follow is on its way
	cancel()
	cmd := <-follow
	if err := cmd.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("follow: %v, want context.Canceled", err)
	}
	close(h.hold)
	if err := <-lead; err != nil {
		t.Fatal(err)
	}
	<-first
	if cmd.Err() == nil || counter(t, m, "follow") != 1 {
		t.Errorf("follow's command %v after its batch answered (ran %d times)", cmd, counter(t, m, "follow"))
	}
	idle(t, p)
}

// The batch has its leader's deadline, not its cancellation.
func TestPipelinerBatchOutlivesLeaderCancel(t *testing.T) {
	p, h, m, first := busy(t)
	ctx, cancel := context.WithCancel(t.Context())
	lead, follow := make(chan error, 1), make(chan error, 1)
	go func() { lead <- p.do(ctx, incr(ctx, "lead")) }()
	queuedCalls(t, p, 1)
	go func() { follow <- p.do(t.Context(), incr(t.Context(), "follow")) }()
	queuedCalls(t, p, 2)
	h.hold <- struct{}{}
	<-h.held
	cancel() // the leader's caller goes away while the batch is on its way
	close(h.hold)
	if err := <-follow; err != nil {
		t.Errorf("follow: %v", err)
	}
	<-lead
	<-first
	if counter(t, m, "follow") != 1 {
		t.Errorf("follow = %d", counter(t, m, "follow"))
	}
	idle(t, p)
}

// A stalled server: every caller returns by its own deadline.
func TestPipelinerStalledServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // accepts, and never answers
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	p := newPipeliner(c, 2)
	var wg sync.WaitGroup
	var late atomic.Int32
	for range 20 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			if err := p.do(ctx, incr(ctx, "x")); err == nil {
				t.Error("a stalled server answered")
			}
			if time.Since(start) > 2*time.Second {
				late.Add(1)
			}
		})
	}
	wg.Wait()
	if late.Load() > 0 {
		t.Errorf("%d callers waited past their deadline by seconds", late.Load())
	}
	idle(t, p)
}

// Many goroutines, some giving up at random moments: each call that
// answered ran once, none ran twice, and the pipeliner ends idle.
func TestPipelinerConcurrent(t *testing.T) {
	p, _, m := pipelined(t, 2)
	const g, calls = 16, 200
	var answered atomic.Int64
	var wg sync.WaitGroup
	for i := range g {
		wg.Go(func() {
			for j := range calls {
				ctx, cancel := context.WithCancel(t.Context())
				if rand.IntN(4) == 0 {
					go func() {
						time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
						cancel()
					}()
				}
				key := "k" + strconv.Itoa(i) + "_" + strconv.Itoa(j)
				cmd := incr(ctx, key)
				err := p.do(ctx, cmd)
				cancel()
				switch {
				case err == nil:
					answered.Add(1)
					if reply(cmd) != 1 {
						t.Errorf("%s: reply %d", key, reply(cmd))
					}
				case !errors.Is(err, context.Canceled):
					t.Errorf("%s: %v", key, err)
				}
			}
		})
	}
	wg.Wait()
	ran := 0
	for _, k := range m.Keys() {
		if n := counter(t, m, k); n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
		ran++
	}
	if int64(ran) < answered.Load() {
		t.Errorf("%d answered, %d ran", answered.Load(), ran)
	}
	idle(t, p)
}

// The store's steps go through the pipeliner: 64 Takes at once, while the
// first round trips are held, share the next ones; with Pipelines < 0 each
// is a round trip of its own. With the default durability (DurableDisk,
// on redis-server) the Take shares them too: only a claim's confirmation
// goes on its own.
func TestStoreSharesRoundTrips(t *testing.T) {
	const n = 64
	mini := func(t *testing.T) *redis.Client {
		m := miniredis.RunT(t)
		return redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, PoolSize: 2 * n})
	}
	server := func(t *testing.T) *redis.Client {
		addr := redistest.Start(t).Addr
		return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 2 * n})
	}
	none := DurableNone
	for _, c := range []struct {
		name    string
		client  func(*testing.T) *redis.Client
		opts    Options
		command string // how the steps are sent
	}{
		{"pipelines 0", mini, Options{Durability: none}, "evalsha"},
		{"pipelines -1", mini, Options{Durability: none, Pipelines: -1}, "evalsha"},
		{"durability disk", server, Options{}, "fcall"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := c.client(t)
			defer client.Close()
			shared := c.opts.Pipelines >= 0
			h := &roundTrips{name: c.command}
			client.AddHook(h)
			st := New(client, c.opts).s
			if err := st.load(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !shared && st.pipe != nil {
				t.Fatal("Pipelines < 0 made a pipeliner")
			}
			if shared {
				h.hold, h.held = make(chan struct{}), make(chan struct{}, n)
			}
			ids := make(chan string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					a := storedriver.TakeRequest{Key: "exchange:" + strconv.Itoa(i), Terms: []byte(`{"n":` + strconv.Itoa(i) + `}`), Summary: "s", Lifetime: time.Minute}
					r, err := st.Take(t.Context(), store.Owner{Agent: "https://agent.example", User: "usr_" + strconv.Itoa(i%8)}, a, time.Now())
					if err != nil || r.Ref == "" {
						t.Errorf("take %d: %+v, %v", i, r, err)
						return
					}
					ids <- r.Operation.ID
				})
			}
			if shared {
				queuedCalls(t, st.pipe, n-defaultPipelines) // the first ones are held on their way
				close(h.hold)
			}
			wg.Wait()
			close(ids)
			seen := map[string]bool{}
			for id := range ids {
				if seen[id] {
					t.Errorf("operation %s issued twice", id)
				}
				seen[id] = true
			}
			got := h.got()
			total, most := 0, 0
			for _, size := range got {
				total += size
				most = max(most, size)
			}
			if total != n || len(seen) != n {
				t.Errorf("%d steps in round trips %v, %d operations; want %d", total, got, len(seen), n)
			}
			switch {
			case shared && (len(got) > 2*defaultPipelines || most < 2):
				t.Errorf("round trips %v: the waiting steps did not share them", got)
			case !shared && most != 1:
				t.Errorf("round trips %v with Pipelines -1", got)
			}
		})
	}
}
