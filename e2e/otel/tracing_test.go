package otel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	tracingotel "github.com/opsgate/opsgate/webkit/tracing/otel"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// traced is a shop whose Kit's Observer is the tracing adapter, recording
// every span in memory.
type traced struct {
	site      *webkittest.Site
	rec       *tracetest.SpanRecorder
	tp        *sdktrace.TracerProvider
	performed atomic.Int64 // the handler's runs: repeats run at once
}

func newTraced(t *testing.T, st store.Store) *traced {
	t.Helper()
	s := &traced{site: webkittest.New("https://shop.example"), rec: tracetest.NewSpanRecorder()}
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.rec))
	t.Cleanup(func() { _ = s.tp.Shutdown(t.Context()) })
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Store = st
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Observer = tracingotel.New(s.tp.Tracer("github.com/opsgate/opsgate"), nil)
	mux := http.NewServeMux()
	describe := func(r *http.Request) (webkit.Action, error) {
		order, size := r.PathValue("order"), r.PostFormValue("size")
		return webkit.Action{Key: "exchange:" + order, Kind: "exchange",
			Terms:   map[string]string{"order_id": order, "size": size},
			Summary: "Exchange the jacket on order " + order + " for size " + size + "."}, nil
	}
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.performed.Add(1)
		io.WriteString(w, "exchanged")
	})))
	m, err := endpoint.NewMount(endpoint.Config{Origin: s.site.Origin, Kit: kit, Resolver: s.site.Resolver(), AccessTokens: s.site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	s.site.Handler = m.Handler(mux)
	return s
}

// tree draws the spans, each root
// (a span whose parent was not recorded) with its children indented, each
// with its attributes and status, ordered by start.
func tree(spans []sdktrace.ReadOnlySpan) string {
	ids := map[trace.SpanID]bool{}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && ids[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var draw func(s sdktrace.ReadOnlySpan, depth int)
	draw = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), s.Name())
		var attrs []string
		for _, a := range s.Attributes() {
			attrs = append(attrs, strings.TrimPrefix(string(a.Key), "opsgate.")+"="+a.Value.String())
		}
		sort.Strings(attrs)
		if len(attrs) > 0 {
			fmt.Fprintf(&b, " {%s}", strings.Join(attrs, " "))
		}
		if s.Status().Code.String() == "Error" {
			b.WriteString(" ERROR")
		}
		b.WriteString("\n")
		kids := children[s.SpanContext().SpanID()]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].StartTime().Before(kids[j].StartTime()) })
		for _, k := range kids {
			draw(k, depth+1)
		}
	}
	sort.SliceStable(roots, func(i, j int) bool { return roots[i].StartTime().Before(roots[j].StartTime()) })
	for _, r := range roots {
		draw(r, 0)
	}
	return b.String()
}

// flow runs one whole flow: join, the gated request's 403, the agent's
// look-up and approval at the endpoint, the browser's repeat, performed.
func (s *traced) flow(t *testing.T) {
	t.Helper()
	sess := s.site.NewAgent().Session("usr_1")
	b, err := sess.Join()
	if err != nil {
		t.Fatal(err)
	}
	res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
	if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("gated request: %d %v ref %q", res.StatusCode, res.Err, res.Ref)
	}
	if a := sess.Approve(res.Ref); a.Err != nil || a.StatusCode != http.StatusNoContent {
		t.Fatalf("approval: %d %v %s", a.StatusCode, a.Err, a.Body)
	}
	if again := res.Continue(); again.Err != nil || again.StatusCode != http.StatusOK || s.performed.Load() != 1 {
		t.Fatalf("repeat: %d %v, performed %d times", again.StatusCode, again.Err, s.performed.Load())
	}
	// Nothing the spans carry names the Session, the User, the agent, the
	// operation or its ref.
	for _, sp := range s.rec.Ended() {
		for _, a := range sp.Attributes() {
			v := a.Value.String()
			for _, secret := range []string{sess.SID, "usr_1", "ord_7", res.Ref, "agent"} {
				if secret != "" && strings.Contains(v, secret) {
					t.Errorf("span %s: attribute %s=%q names %q", sp.Name(), a.Key, v, secret)
				}
			}
		}
	}
}

// The flow's spans, as the memory store makes them: each request's route
// span, the store steps under it, the identity fetches under the Session's
// verification, the handler under the Gate's decision.
const memoryFlow = `opsgate.join {outcome=joined reason=signed_out route=join}
  opsgate.identity.fetch {kind=metadata}
  opsgate.identity.fetch {kind=jwks}
  opsgate.store.use_once {step=use_once}
opsgate.gate {kind=exchange outcome=waiting route=gate}
  opsgate.store.take {step=take}
opsgate.endpoint {outcome=operation route=endpoint}
  opsgate.endpoint.authenticate {route=endpoint}
  opsgate.store.use_once {step=use_once}
  opsgate.store.lookup {step=lookup}
opsgate.endpoint {outcome=recorded route=endpoint}
  opsgate.endpoint.authenticate {route=endpoint}
  opsgate.store.record {step=record}
opsgate.gate {kind=exchange outcome=performed route=gate}
  opsgate.store.take {step=take}
  opsgate.handler {kind=exchange outcome=performed route=gate}
  opsgate.store.finish {step=finish}
`

func TestFlowTreeMemory(t *testing.T) {
	s := newTraced(t, memstore.New(memstore.Config{}))
	s.flow(t)
	if got := tree(s.rec.Ended()); got != memoryFlow {
		t.Errorf("spans:\n%s\nwant:\n%s", got, memoryFlow)
	}
}

// On Redis with DurableReplicas, the claim's durability confirmation (a
// mark and WAIT) is a span under the repeat's take.
func TestFlowTreeRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a Redis and its replica")
	}
	master := redistest.Start(t)
	if _, err := redistest.StartReplica(t, master); err != nil {
		t.Skipf("replica: %v", err)
	}
	st := redisstore.New(master.Client(t), redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: 2 * time.Second})
	s := newTraced(t, st)
	s.flow(t)
	want := strings.Replace(memoryFlow, "  opsgate.store.take {step=take}\n  opsgate.handler",
		"  opsgate.store.take {step=take}\n    opsgate.redis.confirm {step=take}\n  opsgate.handler", 1)
	if got := tree(s.rec.Ended()); got != want {
		t.Errorf("spans:\n%s\nwant:\n%s", got, want)
	}
}

// holdHook is a go-redis hook: it holds the next step (a script or
// function call) once armed, and
// traces each pipeline under the context it is sent with, as a go-redis
// tracing hook (redisotel) does.
type holdHook struct {
	tracer trace.Tracer
	armed  atomic.Bool
	held   chan struct{} // a command is being held
	hold   chan struct{} // closed: let it go
	// waits, when set, holds the first pipeline with a WAIT instead: a
	// claim's durability confirmation.
	waits bool
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if step := cmd.Name() == "evalsha" || cmd.Name() == "fcall"; step && !h.waits && h.armed.CompareAndSwap(true, false) {
			h.held <- struct{}{}
			<-h.hold
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name())
		}
		ctx, sp := h.tracer.Start(ctx, "redis.pipeline", trace.WithAttributes(attribute.String("commands", strings.Join(names, " "))))
		defer sp.End()
		if h.waits && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "wait" }) && h.armed.CompareAndSwap(true, false) {
			h.held <- struct{}{}
			<-h.hold
		}
		return next(ctx, cmds)
	}
}

// The Redis store sends the steps of requests that arrive together in one
// round trip: that round trip is a span of its own, a root, linked to each
// request's step and each step to it, and a go-redis hook's span of the
// batch is its child, in no request's trace. The steps are each gated
// request's first: the Take (which checks that Unbind did not end its
// binding, in the same step).
func TestSharedRoundTripLinks(t *testing.T) {
	_, client := redistest.Mini(t)
	hook := &holdHook{held: make(chan struct{}, 1), hold: make(chan struct{})}
	client.AddHook(hook)
	st := redisstore.New(client, redisstore.Options{Durability: redisstore.DurableNone, Pipelines: 1})
	s := newTraced(t, st)
	hook.tracer = s.tp.Tracer("redis")

	var browsers []*webkittest.Browser
	for i := range 3 {
		b, err := s.site.NewAgent().Session(fmt.Sprint("usr_", i)).Join()
		if err != nil {
			t.Fatal(err)
		}
		browsers = append(browsers, b)
	}
	const first = "opsgate.store.take" // each gated request's first step
	stepsStarted := func() int {
		n := 0
		for _, sp := range s.rec.Started() {
			if sp.Name() == first {
				n++
			}
		}
		return n
	}
	var wg sync.WaitGroup
	post := func(b *webkittest.Browser, order string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := b.PostForm("/orders/"+order+"/exchange", url.Values{"size": {"L"}}); res.Err != nil || res.StatusCode != http.StatusForbidden {
				t.Errorf("order %s: %d %v", order, res.StatusCode, res.Err)
			}
		}()
	}
	hook.armed.Store(true)
	post(browsers[0], "ord_1") // its first step holds the one round trip
	<-hook.held
	post(browsers[1], "ord_2") // these two queue behind it
	post(browsers[2], "ord_3")
	for deadline := time.Now().Add(5 * time.Second); stepsStarted() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the queued steps never started")
		}
	}
	time.Sleep(50 * time.Millisecond) // from their spans' start into the pipeliner's queue
	close(hook.hold)
	wg.Wait()

	// The queued first steps rode one shared round trip; the takes after
	// them may have shared others.
	var trips, steps, pipelines []sdktrace.ReadOnlySpan
	stepIDs := map[trace.SpanID]bool{}
	for _, sp := range s.rec.Ended() {
		switch sp.Name() {
		case "opsgate.redis.round_trip":
			trips = append(trips, sp)
		case first:
			steps = append(steps, sp)
			stepIDs[sp.SpanContext().SpanID()] = true
		case "redis.pipeline": // a batch's, not a new connection's handshake
			if c, _ := attr(sp, "commands"); c == "evalsha evalsha" || c == "fcall fcall" {
				pipelines = append(pipelines, sp)
			}
		}
	}
	trips = slices.DeleteFunc(trips, func(trip sdktrace.ReadOnlySpan) bool {
		return !slices.ContainsFunc(trip.Links(), func(l sdktrace.Link) bool { return stepIDs[l.SpanContext.SpanID()] })
	})
	if len(trips) != 1 || len(steps) != 3 {
		t.Fatalf("%d shared round trips of the first steps, %d first steps; want 1 and 3\n%s", len(trips), len(steps), tree(s.rec.Ended()))
	}
	trip := trips[0]
	var pipeline sdktrace.ReadOnlySpan
	for _, p := range pipelines {
		if p.Parent().SpanID() == trip.SpanContext().SpanID() {
			pipeline = p
		}
	}
	if trip.Parent().IsValid() {
		t.Errorf("the shared round trip is a child of %v: want a root", trip.Parent().SpanID())
	}
	if size, ok := attr(trip, "opsgate.batch.size"); !ok || size != "2" {
		t.Errorf("batch size %q", size)
	}
	if pipeline == nil {
		t.Errorf("the go-redis hook's span is not the shared round trip's child\n%s", tree(s.rec.Ended()))
	}
	linkedFrom := map[trace.SpanID]bool{}
	for _, l := range trip.Links() {
		linkedFrom[l.SpanContext.SpanID()] = true
	}
	rode := 0
	for _, step := range steps {
		toTrip := slices.ContainsFunc(step.Links(), func(l sdktrace.Link) bool {
			return l.SpanContext.SpanID() == trip.SpanContext().SpanID()
		})
		if toTrip != linkedFrom[step.SpanContext().SpanID()] {
			t.Errorf("step %v: links to the round trip %v, linked from it %v", step.SpanContext().SpanID(), toTrip, linkedFrom[step.SpanContext().SpanID()])
		}
		if toTrip {
			rode++
		}
	}
	if rode != 2 || len(trip.Links()) != 2 {
		t.Errorf("%d steps rode the shared round trip, which links to %d: want 2 and 2", rode, len(trip.Links()))
	}
}

// Claims made while a durability confirmation is on its way share the
// next one (a mark and WAIT): that round is a span of its own, a root,
// linked both ways with each claim's confirmation span.
func TestSharedConfirmationLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a Redis and its replica")
	}
	master := redistest.Start(t)
	if _, err := redistest.StartReplica(t, master); err != nil {
		t.Skipf("replica: %v", err)
	}
	client := master.Client(t)
	hook := &holdHook{held: make(chan struct{}, 1), hold: make(chan struct{}), waits: true}
	client.AddHook(hook)
	st := redisstore.New(client, redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: 5 * time.Second})
	s := newTraced(t, st)
	hook.tracer = s.tp.Tracer("redis")

	// Three approved operations, each waiting for its browser's repeat.
	var waiting []*webkittest.Response
	for i := range 3 {
		sess := s.site.NewAgent().Session(fmt.Sprint("usr_", i))
		b, err := sess.Join()
		if err != nil {
			t.Fatal(err)
		}
		res := b.PostForm(fmt.Sprintf("/orders/ord_%d/exchange", i), url.Values{"size": {"L"}})
		if a := sess.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
			t.Fatalf("approval %d: %d %v", i, a.StatusCode, a.Err)
		}
		waiting = append(waiting, res)
	}
	confirmsStarted := func() int {
		n := 0
		for _, sp := range s.rec.Started() {
			if sp.Name() == "opsgate.redis.confirm" {
				n++
			}
		}
		return n
	}
	var wg sync.WaitGroup
	repeat := func(res *webkittest.Response) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if again := res.Continue(); again.Err != nil || again.StatusCode != http.StatusOK {
				t.Errorf("repeat: %d %v", again.StatusCode, again.Err)
			}
		}()
	}
	hook.armed.Store(true)
	repeat(waiting[0]) // its confirmation is held on its way
	<-hook.held
	repeat(waiting[1]) // these two claim meanwhile, and share the next
	repeat(waiting[2])
	for deadline := time.Now().Add(5 * time.Second); confirmsStarted() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the other claims never reached their confirmation")
		}
	}
	time.Sleep(50 * time.Millisecond) // from their spans' start into the next round
	close(hook.hold)
	wg.Wait()

	var rounds, confirms, waits []sdktrace.ReadOnlySpan
	for _, sp := range s.rec.Ended() {
		switch sp.Name() {
		case "opsgate.redis.confirm_round":
			rounds = append(rounds, sp)
		case "opsgate.redis.confirm":
			confirms = append(confirms, sp)
		case "redis.pipeline":
			waits = append(waits, sp)
		}
	}
	if len(rounds) != 1 || len(confirms) != 3 {
		t.Fatalf("%d shared confirmations, %d claims' confirmations: want 1 and 3", len(rounds), len(confirms))
	}
	round := rounds[0]
	if round.Parent().IsValid() || len(round.Links()) != 2 {
		t.Errorf("the shared confirmation: parent %v, %d links; want a root linked to 2 claims", round.Parent().SpanID(), len(round.Links()))
	}
	if size, _ := attr(round, "opsgate.batch.size"); size != "2" {
		t.Errorf("batch size %q", size)
	}
	if !slices.ContainsFunc(waits, func(w sdktrace.ReadOnlySpan) bool { return w.Parent().SpanID() == round.SpanContext().SpanID() }) {
		t.Error("the shared mark and WAIT's go-redis span is not the round's child")
	}
	linked := 0
	for _, c := range confirms {
		if slices.ContainsFunc(c.Links(), func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == round.SpanContext().SpanID() }) {
			linked++
		}
	}
	if linked != 2 {
		t.Errorf("%d claims' confirmations link to the shared one, want 2", linked)
	}
}

func attr(sp sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, a := range sp.Attributes() {
		if string(a.Key) == key {
			return a.Value.String(), true
		}
	}
	return "", false
}

// counting is a metrics Observer behind the tracer.
type counting struct {
	mu     sync.Mutex
	events []string
	steps  []string
}

func (c *counting) Observe(_ context.Context, e webkit.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e.Route+":"+e.Outcome)
}

func (c *counting) StoreStep(_ context.Context, step string, _ time.Duration, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.steps = append(c.steps, step)
}

// The tracer passes every Event and store step on to the Observer behind
// it, so metrics go on as before; a route whose outcome is "unavailable"
// is an error span.
func TestPassesEventsOn(t *testing.T) {
	s := newTraced(t, memstore.New(memstore.Config{}))
	next := &counting{}
	tracer := tracingotel.New(s.tp.Tracer("github.com/opsgate/opsgate"), next)
	ctx, sp := tracer.(spans.Tracer).StartSpan(t.Context(), "opsgate.gate", spans.Labels{Route: "gate"})
	tracer.Observe(ctx, webkit.Event{Route: "gate", Outcome: "unavailable", Kind: "exchange"})
	tracer.StoreStep(ctx, "take", time.Millisecond, nil)
	sp.End(spans.Labels{}, nil)
	if fmt.Sprint(next.events, next.steps) != "[gate:unavailable] [take]" {
		t.Errorf("passed on: %v %v", next.events, next.steps)
	}
	ended := s.rec.Ended()
	if len(ended) != 1 || ended[0].Status().Code != codes.Error {
		t.Fatalf("spans %d, want one with status Error", len(ended))
	}
	if got := tree(ended); got != "opsgate.gate {kind=exchange outcome=unavailable route=gate} ERROR\n" {
		t.Errorf("span: %q", got)
	}
}
