package main

// -side-by-side: the Gate beside what a team without the kit would write
// (a hand-rolled gate), in one process and one run, on the same
// redis-server, through one http.Server and 50 keep-alive clients; and each
// store step beside a floor function that makes only the reads and writes
// the step must make.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
)

type sideConfig struct {
	redisURL  string
	requests  int // each phase of each round
	rounds    int
	clients   int // keep-alive HTTP clients
	stepOps   int // operations through each store step (and floor) per round
	approvals int // approval requests (and bare checks) per round
	// labels marks the CPU of each request's handling with its phase
	// (pprof label "phase"), for -cpuprofile: go tool pprof -tagfocus
	// 'phase=kit redis 403 JSON' reads one phase's server side alone (the
	// clients' side and the runtime's carry none, the untimed set-up
	// requests "setup").
	labels bool
	out    io.Writer
}

// sideResult is what the last line reports, for tests.
type sideResult struct {
	// Medians over the rounds of the ratios paired within each round.
	r403, rRepeat, rApproval float64
	// rSteps is the worst step's median ratio of Redis CPU to its floor's,
	// worstStep its name.
	rSteps    float64
	worstStep string
	// rStepsBK is the worst median ratio of Record, the claim and Finish
	// to their floors with bookkeeping (floorBKDoc); not a target.
	rStepsBK float64
	// statuses counts each phase's answers, for tests.
	statuses map[string]map[int]int
}

// callCounter counts the commands a go-redis client sends (a pipeline's
// each): the store calls a request makes.
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// sidePhase is one timed phase of a round.
type sidePhase struct {
	rate              float64       // requests per second
	p50, p99          time.Duration // latency
	procCPU, redisCPU time.Duration // per request; -1 where it can't be read
	calls             float64       // Redis commands sent per request (the kit's and the hand-rolled gate's clients)
	statuses          map[int]int
	errors            int
}

// The phases, in the order each round runs them.
const (
	phBare      = "bare handler"
	phHand403   = "hand-rolled 403"
	phKit403    = "kit redis 403 JSON"
	phKit403H   = "kit redis 403 HTML"
	phMem403    = "kit memory 403 JSON"
	phMem403H   = "kit memory 403 HTML"
	phHandRep   = "hand-rolled repeat"
	phKitRep    = "kit redis repeat"
	phMemRep    = "kit memory repeat"
	sideOrigin  = "https://shop.example"
	handCookie  = "hand_user"
	sideAgentID = "https://agent.example/side-by-side"
)

var sidePhases = []string{phBare, phHand403, phKit403, phKit403H, phMem403, phMem403H, phHandRep, phKitRep, phMemRep}

func runSideBySide(ctx context.Context, c sideConfig) (sideResult, error) {
	res := sideResult{statuses: map[string]map[int]int{}}
	say := func(format string, args ...any) { fmt.Fprintf(c.out, format, args...) }
	var opts *redis.Options
	where := ""
	if c.redisURL != "" {
		o, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return res, fmt.Errorf("-redis: %w", err)
		}
		opts, where = o, "at "+o.Addr
	} else {
		procs, err := redistest.NewProcs()
		if err != nil {
			return res, err
		}
		defer procs.Close()
		srv, err := redistest.StartArgs(procs)
		if err != nil {
			return res, fmt.Errorf("start redis-server (or give -redis): %w", err)
		}
		opts, where = &redis.Options{Addr: srv.Addr}, "started on "+srv.Addr+", no persistence"
	}
	opts.ContextTimeoutEnabled = true
	opts.PoolSize = 64
	// One client for the kit's store, one for the hand-rolled gate, one for
	// the tool's own INFO and set-up: each as a web server has its own.
	kitClient, handClient, toolClient := redis.NewClient(opts), redis.NewClient(opts), redis.NewClient(opts)
	calls := &callCounter{}
	kitClient.AddHook(calls)
	handClient.AddHook(calls)
	defer kitClient.Close()
	defer handClient.Close()
	defer toolClient.Close()
	say("opsgate side by side: redis-server %s %s; %d CPUs (GOMAXPROCS %d); one http.Server, %d keep-alive clients, %d requests per phase, %d rounds\n",
		infoField(ctx, toolClient, "server", "redis_version"), where, runtime.NumCPU(), runtime.GOMAXPROCS(0), c.clients, c.requests, c.rounds)
	say("durability none on both sides; the kit's caps out of reach (its counts kept); the hand-rolled gate: one EVALSHA per request, an HSET of state performed after the handler, a plain cookie\n")

	prefix := fmt.Sprintf("sb%06x:", time.Now().UnixNano()&0xffffff)
	rs := redisstore.New(kitClient, redisstore.Options{Prefix: prefix, Retention: 15 * time.Minute, Durability: redisstore.DurableNone,
		MaxOpenPerOwner: 1 << 30, MaxOpenPerAgent: -1, MaxOpen: 1 << 30, MaxReplayMarkers: 1 << 30})
	if err := rs.Load(ctx); err != nil {
		return res, err
	}
	ms := memstore.New(memstore.Config{MaxOpenPerOwner: -1, MaxOpenPerAgent: -1})
	var performed atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		performed.Add(1)
		io.WriteString(w, "exchanged\n")
	})
	hand := newHandGate(handClient, prefix+"hand:", handler)
	kits := map[string]*webkit.Kit{}
	mux := http.NewServeMux()
	mux.Handle("POST /bare/orders/{order}/exchange", handler)
	mux.Handle("POST /hand/orders/{order}/exchange", hand)
	for name, st := range map[string]store.Store{"redis": rs, "memory": ms} {
		kit := webkit.New(keys...)
		kit.Store = st
		kit.Logger = slog.New(slog.DiscardHandler)
		kit.Sessions.(*webkit.CookieSessions).Insecure = true
		kits[name] = kit
		mux.Handle("POST /kit/"+name+"/orders/{order}/exchange", kit.Gate(describe)(handler))
	}
	var root http.Handler = mux
	if c.labels {
		root = phaseLabels(mux)
	}
	srv := httptest.NewServer(root)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: c.clients, MaxIdleConnsPerHost: c.clients, MaxConnsPerHost: c.clients}}
	defer client.CloseIdleConnections()

	// 50 Users, each with a join cookie of each kit and a plain cookie.
	const users = 50
	sessions := make([]webkit.Session, users)
	cookies := map[string][]*http.Cookie{}
	for i := range users {
		sessions[i] = webkit.Session{ID: fmt.Sprintf("ses_%d", i), Agent: sideAgentID, User: fmt.Sprintf("usr_%d", i), Extensions: map[string]string{"operations": "3"}}
		for name, kit := range kits {
			rec := httptest.NewRecorder()
			if err := kit.Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), sessions[i]); err != nil {
				return res, err
			}
			cookies[name] = append(cookies[name], rec.Result().Cookies()[0])
		}
		cookies["hand"] = append(cookies["hand"], &http.Cookie{Name: handCookie, Value: sessions[i].User})
	}
	stores := map[string]store.Store{"redis": rs, "memory": ms}

	rounds := make([]map[string]sidePhase, 0, c.rounds)
	var approvalRatios []float64
	stepRatios, stepRatiosBK := map[string][]float64{}, map[string][]float64{}
	stepUsec := map[string][]float64{}
	var lastSteps []stepFigure
	for round := range c.rounds {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		got := map[string]sidePhase{}
		order := func(ph string, i int) string { return fmt.Sprintf("r%d%s%d", round, phaseTag[ph], i) }
		// Ordinary requests; then the 403s, each of a new action. The
		// phases of a group run in turn, a slice of each at a time
		// (sideSlices), so that a change in what else the machine runs
		// lands on all of them alike.
		post := func(ph string) func(i int) (int, error) {
			path, who, accept := phaseRoute(ph)
			return func(i int) (int, error) {
				var ck *http.Cookie
				if who != "" {
					ck = cookies[who][i%users]
				}
				return sidePost(ctx, client, srv.URL+path+order(ph, i)+"/exchange", accept, ck)
			}
		}
		interleaved(ctx, c.clients, c.requests, toolClient, calls, got, post, phBare, phHand403, phKit403, phKit403H, phMem403, phMem403H)
		// The repeats: each request's action approved beforehand, untimed.
		if err := hand.approve(ctx, c.requests, func(i int) (string, string) {
			return sessions[i%users].User, order(phHandRep, i)
		}); err != nil {
			return res, fmt.Errorf("hand-rolled approvals: %w", err)
		}
		for _, name := range []string{"redis", "memory"} {
			ph := map[string]string{"redis": phKitRep, "memory": phMemRep}[name]
			if err := kitApprove(ctx, client, stores[name], srv.URL+"/kit/"+name+"/orders/", c.clients, c.requests, func(i int) (string, *http.Cookie, store.Owner) {
				return order(ph, i), cookies[name][i%users], sessions[i%users].Owner()
			}); err != nil {
				return res, fmt.Errorf("kit %s approvals: %w", name, err)
			}
		}
		interleaved(ctx, c.clients, c.requests, toolClient, calls, got, post, phHandRep, phKitRep, phMemRep)
		rounds = append(rounds, got)
		for ph, p := range got {
			if res.statuses[ph] == nil {
				res.statuses[ph] = map[int]int{}
			}
			for s, n := range p.statuses {
				res.statuses[ph][s] += n
			}
			res.statuses[ph][-1] += p.errors
		}

		// The approval request against the two bare signature checks.
		ac, err := approvalCost(ctx, rs, toolClient, c.approvals)
		if err != nil {
			return res, fmt.Errorf("approval: %w", err)
		}
		approvalRatios = append(approvalRatios, float64(ac.latency)/float64(ac.bare))

		// Each store step beside its floor.
		steps, err := stepsAndFloors(ctx, rs, toolClient, prefix, prefix+"floor:", round, c.stepOps)
		if err != nil {
			return res, fmt.Errorf("steps: %w", err)
		}
		for _, s := range steps {
			if round == c.rounds-1 {
				lastSteps = append(lastSteps, s)
			}
			stepUsec[s.name] = append(stepUsec[s.name], s.usec)
			stepUsec[s.name+" floor"] = append(stepUsec[s.name+" floor"], s.floor)
			stepUsec[s.name+" cpu"] = append(stepUsec[s.name+" cpu"], s.cpu)
			stepUsec[s.name+" floor cpu"] = append(stepUsec[s.name+" floor cpu"], s.floorCPU)
			stepRatios[s.name] = append(stepRatios[s.name], s.usec/s.floor)
			stepUsec[s.name+" floor+"] = append(stepUsec[s.name+" floor+"], s.floorBK)
			stepRatiosBK[s.name] = append(stepRatiosBK[s.name], s.usec/s.floorBK)
		}
		say("round %d: 403/hand=%.2f repeat/hand=%.2f memory 403/hand=%.2f memory repeat/hand=%.2f HTML/JSON=%.2f approval/bare=%.2f steps/floor %s\n",
			round+1, got[phKit403].rate/got[phHand403].rate, got[phKitRep].rate/got[phHandRep].rate,
			got[phMem403].rate/got[phHand403].rate, got[phMemRep].rate/got[phHandRep].rate,
			got[phKit403H].rate/got[phKit403].rate, approvalRatios[round], stepLine(steps))
	}

	// Per phase: the median over the rounds of each figure.
	say("\n%-22s %10s %10s %10s %14s %14s %11s  %s\n", "phase (median of rounds)", "req/s", "p50", "p99", "process CPU", "redis CPU", "redis calls", "answers (all rounds)")
	for _, ph := range sidePhases {
		var rate, p50, p99, pc, rc, cl []float64
		for _, r := range rounds {
			p := r[ph]
			rate, p50, p99 = append(rate, p.rate), append(p50, float64(p.p50)), append(p99, float64(p.p99))
			pc, rc, cl = append(pc, float64(p.procCPU)), append(rc, float64(p.redisCPU)), append(cl, p.calls)
		}
		say("%-22s %10.0f %10v %10v %11.1f µs %11.1f µs %11.2f  %s\n", ph, median(rate), time.Duration(median(p50)).Round(time.Microsecond),
			time.Duration(median(p99)).Round(time.Microsecond), median(pc)/1e3, median(rc)/1e3, median(cl), answers(res.statuses[ph]))
	}
	say("(process CPU: this whole process, the 50 clients included, per request; the bare handler's line is what the HTTP round trip alone costs it. redis CPU: redis-server's used_cpu_user+sys per request. redis calls: the commands the kit's store and the hand-rolled gate send per request; the kit's Take checks the Unbind marker in its own step)\n")
	paired := func(a, b string) []float64 {
		var out []float64
		for _, r := range rounds {
			out = append(out, r[a].rate/r[b].rate)
		}
		return out
	}
	for _, p := range []struct{ name, a, b, target string }{
		{"kit redis 403 / hand-rolled 403", phKit403, phHand403, "target ≥ 0.9"},
		{"kit redis repeat / hand-rolled repeat", phKitRep, phHandRep, "target ≥ 0.7"},
		{"kit memory 403 / hand-rolled 403", phMem403, phHand403, ""},
		{"kit memory repeat / hand-rolled repeat", phMemRep, phHandRep, ""},
		{"kit redis 403 HTML / JSON", phKit403H, phKit403, ""},
	} {
		say("%-40s %s %s\n", p.name, spreadOf(paired(p.a, p.b)), p.target)
	}
	say("%-40s %s target ≤ 1.2 (one goroutine, best of 5 batches each round)\n", "approval request / two bare checks", spreadOf(approvalRatios))
	worst := ""
	for _, name := range stepNames {
		m := median(stepRatios[name])
		say("step %-7s functions' CPU %5.1f µs per step, its floor's %5.1f µs: %s target ≤ 1.5; all redis-server's CPU %5.1f µs, its floor's %5.1f µs\n",
			name, median(stepUsec[name]), median(stepUsec[name+" floor"]), spreadOf(stepRatios[name]), median(stepUsec[name+" cpu"]), median(stepUsec[name+" floor cpu"]))
		if m > res.rSteps {
			res.rSteps, worst = m, name
		}
	}
	say("(floors: %s)\n", floorDoc)
	for _, name := range stepNames {
		if name != "403" { // no bookkeeping: its floor's figure
			res.rStepsBK = max(res.rStepsBK, median(stepRatiosBK[name]))
		}
		say("step %-7s beside its floor with bookkeeping, %5.1f µs: %s (not a target: what the kit's other guarantees cost the step's floor)\n",
			name, median(stepUsec[name+" floor+"]), spreadOf(stepRatiosBK[name]))
	}
	say("(floors with bookkeeping: %s)\n", floorBKDoc)
	for _, s := range lastSteps {
		say("step %-7s last round, per step: %s\n", s.name, s.how)
		say("     %-7s its floor:             %s\n", "", s.floorHow)
		if s.name != "403" {
			say("     %-7s with bookkeeping:      %s\n", "", s.floorBKHow)
		}
	}
	res.r403 = median(paired(phKit403, phHand403))
	res.rRepeat = median(paired(phKitRep, phHandRep))
	res.rApproval = median(approvalRatios)
	// The handler ran for every bare request and every repeat, once.
	if want := int64(4 * c.requests * c.rounds); performed.Load() != want {
		return res, fmt.Errorf("the handler ran %d times, want %d (the bare requests and each approved repeat once)", performed.Load(), want)
	}
	res.worstStep = worst
	say("the handler ran %d times: each bare request and each approved repeat once; the worst step: %s\n", performed.Load(), worst)
	say("side by side: 403/hand=%.2f repeat/hand=%.2f approval/bare=%.2f steps/floor=%.2f\n", res.r403, res.rRepeat, res.rApproval, res.rSteps)
	return res, nil
}

// phaseLabels runs each request with the pprof label of its phase, read
// from its order (phaseTag), so that a CPU profile of the run tells the
// phases apart on the server's side too. A label costs a few allocations
// a request: only with -cpuprofile.
func phaseLabels(next http.Handler) http.Handler {
	byTag := map[byte]string{}
	for ph, tag := range phaseTag {
		byTag[tag[0]] = ph
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The order is the path's segment before /exchange:
		// r<round><tag><i> (runSideBySide's order).
		ph := "other"
		if r.Header.Get(setupHeader) != "" {
			ph = "setup" // kitApprove's untimed 403s
		}
		seg := strings.TrimSuffix(r.URL.Path, "/exchange")
		seg = strings.TrimLeft(seg[strings.LastIndexByte(seg, '/')+1:], "r0123456789")
		if p, ok := byTag[firstByte(seg)]; ok && ph != "setup" {
			ph = p
		}
		pprof.Do(r.Context(), pprof.Labels("phase", ph), func(ctx context.Context) {
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	})
}

// setupHeader marks the tool's untimed set-up requests (kitApprove), so
// that phaseLabels does not count them in the phase whose orders they
// set up.
const setupHeader = "X-Side-By-Side-Setup"

func firstByte(s string) byte {
	if s == "" {
		return 0
	}
	return s[0]
}

var phaseTag = map[string]string{phBare: "b", phHand403: "h", phKit403: "k", phKit403H: "K", phMem403: "m", phMem403H: "M", phHandRep: "H", phKitRep: "R", phMemRep: "E"}

// phaseRoute is a phase's path, whose cookie it sends ("" none, else the
// key of cookies) and its Accept.
func phaseRoute(ph string) (path, who, accept string) {
	switch ph {
	case phBare:
		return "/bare/orders/", "", "application/json"
	case phHand403, phHandRep:
		return "/hand/orders/", "hand", "application/json"
	case phKit403, phKitRep:
		return "/kit/redis/orders/", "redis", "application/json"
	case phKit403H:
		return "/kit/redis/orders/", "redis", "text/html"
	case phMem403, phMemRep:
		return "/kit/memory/orders/", "memory", "application/json"
	case phMem403H:
		return "/kit/memory/orders/", "memory", "text/html"
	}
	panic("phase " + ph)
}

func sidePost(ctx context.Context, client *http.Client, url, accept string, cookie *http.Cookie) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("sku=stormline-insulated-m"))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", accept)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// sideSlices is how many slices each phase of a group is run in, in
// turn with the group's other phases.
const sideSlices = 8

// interleaved runs n requests of each of phases (post gives a phase's
// request i) in sideSlices turns, a slice of every phase in each, and
// puts each phase's figures over all its slices in got.
func interleaved(ctx context.Context, clients, n int, info *redis.Client, calls *callCounter, got map[string]sidePhase, post func(ph string) func(int) (int, error), phases ...string) {
	type acc struct {
		calls                int64
		elapsed, proc, redis time.Duration
		cpuOK                bool
		lat                  []time.Duration
		statuses             map[int]int
		errors               int
	}
	accs := map[string]*acc{}
	for _, ph := range phases {
		accs[ph] = &acc{cpuOK: true, statuses: map[int]int{}}
	}
	for s := range sideSlices {
		lo, hi := s*n/sideSlices, (s+1)*n/sideSlices
		for _, ph := range phases {
			do := post(ph)
			c0 := calls.n.Load()
			r := sideRun(ctx, clients, hi-lo, info, func(i int) (int, error) { return do(lo + i) })
			a := accs[ph]
			a.calls += calls.n.Load() - c0
			a.elapsed += r.elapsed
			a.lat = append(a.lat, r.lat...)
			if r.procCPU < 0 || r.redisCPU < 0 {
				a.cpuOK = false
			}
			a.proc += r.procCPU
			a.redis += r.redisCPU
			for k, v := range r.statuses {
				a.statuses[k] += v
			}
			a.errors += r.errors
		}
	}
	for ph, a := range accs {
		p := sidePhase{statuses: a.statuses, errors: a.errors, procCPU: -1, redisCPU: -1}
		p.rate = float64(len(a.lat)) / a.elapsed.Seconds()
		p.calls = float64(a.calls) / float64(max(len(a.lat), 1))
		slices.Sort(a.lat)
		if len(a.lat) > 0 {
			p.p50, p.p99 = a.lat[len(a.lat)/2], a.lat[min(len(a.lat)-1, len(a.lat)*99/100)]
		}
		if a.cpuOK && len(a.lat) > 0 {
			p.procCPU, p.redisCPU = a.proc/time.Duration(len(a.lat)), a.redis/time.Duration(len(a.lat))
		}
		got[ph] = p
	}
}

// sideSlice is one slice of a phase, as sideRun measured it: its time,
// its latencies, and this process's and redis-server's CPU in all (-1
// where it can't be read).
type sideSlice struct {
	elapsed  time.Duration
	lat      []time.Duration
	procCPU  time.Duration
	redisCPU time.Duration
	statuses map[int]int
	errors   int
}

// sideRun runs n requests from clients goroutines (phase) and measures
// them: this process's CPU and redis-server's around them.
func sideRun(ctx context.Context, clients, n int, info *redis.Client, do func(i int) (int, error)) sideSlice {
	p := sideSlice{procCPU: -1, redisCPU: -1}
	redis0 := serverCPU(ctx, info)
	cpu0, cpuOK := processCPU()
	r := phase(ctx, clients, n, do)
	cpu1, _ := processCPU()
	redis1 := serverCPU(ctx, info)
	p.elapsed, p.lat, p.statuses, p.errors = r.elapsed, r.latencies, r.statuses, r.errors
	if cpuOK {
		p.procCPU = cpu1 - cpu0
	}
	if redis0 >= 0 && redis1 >= 0 {
		p.redisCPU = redis1 - redis0
	}
	return p
}

// kitApprove makes n operations approved through a kit: each request's
// 403 (JSON) gives its ref, and its approval is recorded in the store, as
// the endpoint records it (W90).
func kitApprove(ctx context.Context, client *http.Client, st store.Store, base string, clients, n int, of func(i int) (string, *http.Cookie, store.Owner)) error {
	var failed atomic.Pointer[error]
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && failed.Load() == nil; i = int(next.Add(1) - 1) {
				order, cookie, owner := of(i)
				err := func() error {
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+order+"/exchange", strings.NewReader("sku=stormline-insulated-m"))
					if err != nil {
						return err
					}
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					req.Header.Set("Accept", "application/json")
					req.Header.Set(setupHeader, "1") // labelled "setup", not its repeat's phase
					req.AddCookie(cookie)
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					_, ref, err := headers.ParseOperation(resp.Header.Values(headers.Operation))
					if resp.StatusCode != http.StatusForbidden || err != nil {
						return fmt.Errorf("order %s: status %d, Poppy-Operation: %v", order, resp.StatusCode, err)
					}
					id, rev, ok := storekit.SplitRef(ref)
					if !ok {
						return fmt.Errorf("order %s: ref %q", order, ref)
					}
					rep, err := storedriver.Steps(st).Record(ctx, owner, ref, store.Approval{OperationID: id, Revision: rev, Approver: "user"}, time.Now(), storedriver.RecordOptions{})
					if err == nil && rep.Result != storedriver.Recorded {
						err = fmt.Errorf("order %s: record: %v", order, rep.Result)
					}
					return err
				}()
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

// handGate is what a team without the kit would write: the operation is
// one Redis hash per User and action; one EVALSHA either creates it as
// waiting (403, its id in Poppy-Operation) or turns an approved one whose
// terms are the request's into performing (the handler runs); an HSET of
// state performed follows the handler. The User is a plain cookie.
type handGate struct {
	client *redis.Client
	prefix string
	script *redis.Script
	next   http.Handler
}

// handScript: KEYS[1] the operation; ARGV 1 a new operation_id, 2 the
// terms, 3 the summary, 4 expires_at (Unix seconds), 5 its TTL in ms.
const handScript = `
local f = redis.call('HMGET', KEYS[1], 'state', 'id', 'terms')
if f[1] == 'approved' and f[3] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'state', 'performing')
  return {'perform', f[2]}
end
if f[1] then return {f[1], f[2]} end
redis.call('HSET', KEYS[1], 'state', 'waiting', 'id', ARGV[1], 'terms', ARGV[2], 'summary', ARGV[3], 'expires', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {'waiting', ARGV[1]}
`

func newHandGate(client *redis.Client, prefix string, next http.Handler) *handGate {
	return &handGate{client: client, prefix: prefix, script: redis.NewScript(handScript), next: next}
}

// handTerms are the terms a request asks for, as the kit's describe gives
// them (demo/load's describe), encoded as a team would.
func handTerms(r *http.Request, order string) ([]byte, string) {
	terms, _ := json.Marshal(map[string]any{"order_id": order, "replacement_sku": r.PostFormValue("sku"), "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}})
	return terms, "Exchange the jacket on order " + order + " for $70.00 more."
}

func (h *handGate) key(user, order string) string {
	return h.prefix + "{" + user + "}:op:exchange:" + order
}

func (h *handGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(handCookie)
	if err != nil {
		h.next.ServeHTTP(w, r) // an ordinary browser
		return
	}
	order := r.PathValue("order")
	terms, summary := handTerms(r, order)
	var id [15]byte
	rand.Read(id[:])
	expires := time.Now().Add(10 * time.Minute)
	key := h.key(c.Value, order)
	res, err := h.script.Run(r.Context(), h.client, []string{key}, "op_"+base64.RawURLEncoding.EncodeToString(id[:]), terms, summary,
		expires.Unix(), (10 * time.Minute).Milliseconds()).StringSlice()
	if err != nil || len(res) != 2 {
		http.Error(w, `{"error":"temporarily_unavailable"}`, http.StatusServiceUnavailable)
		return
	}
	switch res[0] {
	case "perform":
		h.next.ServeHTTP(w, r)
		h.client.HSet(context.WithoutCancel(r.Context()), key, "state", "performed")
	case "waiting":
		w.Header().Set(headers.Operation, `ref="`+res[1]+`"`)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"error":"approval_required"}`)
	default: // performing, performed
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":"`+res[0]+`"}`)
	}
}

// approve writes n approved operations, as the hand-rolled endpoint would
// on the agent's approval, in pipelines of 500.
func (h *handGate) approve(ctx context.Context, n int, of func(i int) (user, order string)) error {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("sku=stormline-insulated-m"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for start := 0; start < n; start += 500 {
		pipe := h.client.Pipeline()
		for i := start; i < min(n, start+500); i++ {
			user, order := of(i)
			terms, summary := handTerms(r, order)
			key := h.key(user, order)
			pipe.HSet(ctx, key, "state", "approved", "id", "op_hand"+strconv.Itoa(i), "terms", terms, "summary", summary, "expires", time.Now().Add(10*time.Minute).Unix())
			pipe.PExpire(ctx, key, 10*time.Minute)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spreadOf says the median of rounds' ratios and their range.
func spreadOf(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (rounds %.2f–%.2f)", median(v), slices.Min(v), slices.Max(v))
}

func answers(st map[int]int) string {
	var out []string
	for _, s := range slices.Sorted(func(yield func(int) bool) {
		for s := range st {
			if !yield(s) {
				return
			}
		}
	}) {
		if s == -1 {
			if st[s] > 0 {
				out = append(out, fmt.Sprintf("%d errors", st[s]))
			}
			continue
		}
		out = append(out, fmt.Sprintf("%d×%d", st[s], s))
	}
	return strings.Join(out, " ")
}

var errNoFunctions = errors.New("the server has no functions (Redis 7 or later): no floors")

// stepNames are the store's steps a gated action goes through, in order.
var stepNames = []string{"403", "record", "claim", "finish"}

// stepFigure is one step's Redis CPU per call and its floor's, in µs.
type stepFigure struct {
	name        string
	usec, floor float64 // the functions' server CPU per step (perStep)
	// cpu, floorCPU: redis-server's whole CPU per step, its I/O too.
	cpu, floorCPU float64
	// how, floorHow: the commands each took, per step (perStep).
	how, floorHow string
	// floorBK, floorBKHow: the floor with the bookkeeping the kit's other
	// guarantees need (floorBKDoc), its functions' µs and commands.
	floorBK    float64
	floorBKHow string
}

func stepLine(steps []stepFigure) string {
	var parts []string
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%s %.2f", s.name, s.usec/s.floor))
	}
	return strings.Join(parts, ", ")
}

// floorDoc says what each floor does.
const floorDoc = "403: one EXISTS of the claim token's, the action's, the computed operation's and the Unbind marker's keys (the Gate names the marker of the browser's join cookie, storekit.MarkedInTake); " +
	"record: that EXISTS, then the operation written with its revision and approval (one HSET), its TTL, the action's pointer (SET PX); " +
	"claim: the token, action and Unbind marker keys read (MGET), the operation's state and revision read (HMGET), it marked performing with the token (HSET), the token's key (SET PX), then in a second call the start mark (GET of the token key, HMGET of state and claim, HSET); " +
	"finish: the state and claim read (HMGET), performed (HSET), its retention (PEXPIRE), the token's key deleted; " +
	"and record, claim and finish each append an audit entry as long as the store's own (APPEND, PEXPIRE), composed by the caller. " +
	"Each is a function called with FCALL from go-redis at 50 goroutines, as the store calls its steps; a step's CPU is its functions' usec in INFO commandstats (the commands they call included: the per-command lines below count those twice)"

// floorBKDoc says what each floor with bookkeeping adds to its floor:
// the writes that the kit's other guarantees need of the step, which the
// floors (floorDoc) leave out.
const floorBKDoc = "403: nothing (its floor's figure); " +
	"record: the owner's open operations counted against the owner's cap and this one added to them (ZCARD, ZADD, PEXPIRE: issue 26's caps); " +
	"claim: taken off them (ZREM) and listed among the slot's performing operations (ZADD, PEXPIRE: issue 24, a claim never stranded); " +
	"finish: off that list (ZREM), and the action's pointer dropped when it still names the operation (GET, DEL: W141, the action's next request gets a new operation). " +
	"Not in it: Finish writing the performed operation's hash anew (DEL, HSET), which keeps a performed operation at about 300 bytes"

// floorLibrary holds the floor functions (floorDoc, floorBKDoc).
const floorLibrary = `#!lua name=opsgate_sbs_floor
redis.register_function('sbs_floor_403', function(KEYS, ARGV)
  return redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
end)
local function entry(log, e, ttl)
  if e and e ~= '' then
    redis.call('APPEND', log, e)
    redis.call('PEXPIRE', log, ttl)
  end
end
redis.register_function('sbs_floor_record', function(KEYS, ARGV)
  if redis.call('EXISTS', KEYS[1], KEYS[2]) ~= 0 then return 0 end
  local r = ARGV[2]
  redis.call('HSET', KEYS[1], 'state', 'open', 'acct', ARGV[1], 'cur', r, 'al', r,
    't:' .. r, ARGV[3], 's:' .. r, ARGV[4], 'x:' .. r, ARGV[5], 'a:' .. r, ARGV[6])
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('SET', KEYS[2], ARGV[8], 'PX', ARGV[7])
  if KEYS[4] then -- with bookkeeping: the owner's open operations
    if redis.call('ZCARD', KEYS[4]) >= 1073741824 then return 0 end
    redis.call('ZADD', KEYS[4], ARGV[10], ARGV[11])
    redis.call('PEXPIRE', KEYS[4], ARGV[7])
  end
  entry(KEYS[3], ARGV[9], ARGV[7])
  return 1
end)
redis.register_function('sbs_floor_claim', function(KEYS, ARGV)
  redis.call('MGET', KEYS[1], KEYS[2], KEYS[5])
  local r = ARGV[2]
  local f = redis.call('HMGET', KEYS[3], 'state', 'acct', 't:' .. r, 's:' .. r, 'x:' .. r, 'a:' .. r)
  if f[1] ~= 'open' then return {} end
  redis.call('HSET', KEYS[3], 'state', 'performing', 'claim', ARGV[1], 'ap', r, 'u:' .. r, ARGV[3])
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
  if KEYS[6] then -- with bookkeeping: off the open ones, on the performing index
    redis.call('ZREM', KEYS[6], ARGV[4])
    redis.call('ZADD', KEYS[7], ARGV[3], KEYS[3])
    redis.call('PEXPIRE', KEYS[7], ARGV[5])
  end
  entry(KEYS[4], ARGV[6], ARGV[5])
  return f
end)
redis.register_function('sbs_floor_start', function(KEYS, ARGV)
  redis.call('GET', KEYS[1])
  local f = redis.call('HMGET', KEYS[2], 'state', 'claim')
  if f[1] ~= 'performing' or f[2] ~= ARGV[1] then return 0 end
  redis.call('HSET', KEYS[2], 'st', '1')
  return 1
end)
redis.register_function('sbs_floor_finish', function(KEYS, ARGV)
  local f = redis.call('HMGET', KEYS[1], 'state', 'claim')
  if f[1] ~= 'performing' or f[2] ~= ARGV[1] then return 0 end
  redis.call('HSET', KEYS[1], 'state', 'performed')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if KEYS[4] then -- with bookkeeping: the action's pointer, the performing index
    if redis.call('GET', KEYS[4]) == ARGV[4] then
      redis.call('DEL', KEYS[2], KEYS[4])
    else
      redis.call('DEL', KEYS[2])
    end
    redis.call('ZREM', KEYS[5], KEYS[1])
  else
    redis.call('DEL', KEYS[2])
  end
  entry(KEYS[3], ARGV[3], ARGV[2])
  return 1
end)`

// commandStats is INFO commandstats: each command's calls and µs, every
// command but INFO (the tool's own); nil when it can't be read.
func commandStats(ctx context.Context, c *redis.Client) map[string]scriptCalls {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil
	}
	out := map[string]scriptCalls{}
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		var s scriptCalls
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				s.calls = x
			case "usec":
				s.usec = x
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out
}

// scriptCommands are the commands that run the store's steps and the
// floors; the commands a function calls are counted in its own time too.
var scriptCommands = map[string]bool{"fcall": true, "fcall_ro": true, "eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true}

// perStep is what the commands took between two commandStats, per step
// of n: the functions' and scripts' µs (the commands they call included),
// and each command's calls and µs, largest first.
func perStep(before, after map[string]scriptCalls, n int) (float64, string) {
	type cmd struct {
		name        string
		calls, usec float64
	}
	var cmds []cmd
	scripts := 0.0
	for name, a := range after {
		b := before[name]
		if a.calls == b.calls {
			continue
		}
		c := cmd{name, (a.calls - b.calls) / float64(n), (a.usec - b.usec) / float64(n)}
		if c.calls < 0.005 {
			continue // a connection's HELLO, a CLIENT SETINFO
		}
		if scriptCommands[name] {
			scripts += c.usec
		}
		cmds = append(cmds, c)
	}
	slices.SortFunc(cmds, func(a, b cmd) int { return int(1000 * (b.usec - a.usec)) })
	var parts []string
	for _, c := range cmds {
		parts = append(parts, fmt.Sprintf("%s %.2f× %.1f µs", strings.ToUpper(c.name), c.calls, c.usec))
	}
	return scripts, strings.Join(parts, ", ")
}

// each runs f for 0..n-1 from g goroutines; the first error ends it.
func each(ctx context.Context, g, n int, f func(i int) error) error {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && failed.Load() == nil && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}

// paired runs each of fs (a step, then its floors) for 0..n-1, each from
// 50 goroutines, in sideSlices turns of a slice of each (before, when not
// nil, runs after the step's first slice), and returns each one's server
// CPU per call: its functions' µs (INFO commandstats), redis-server's
// whole CPU in µs (used_cpu_user+sys: its I/O too), and what commands
// made it.
func paired(ctx context.Context, info *redis.Client, n int, fs []func(i int) error, before func()) ([]stepCost, error) {
	type acc struct {
		diff map[string]scriptCalls
		cpu  time.Duration
	}
	accs := make([]acc, len(fs))
	for k := range accs {
		accs[k].diff = map[string]scriptCalls{}
	}
	for s := range sideSlices {
		lo, hi := s*n/sideSlices, (s+1)*n/sideSlices
		for k, f := range fs {
			b, cpu0 := commandStats(ctx, info), serverCPU(ctx, info)
			if err := each(ctx, 50, hi-lo, func(i int) error { return f(lo + i) }); err != nil {
				return nil, err
			}
			a, cpu1 := commandStats(ctx, info), serverCPU(ctx, info)
			if a == nil || b == nil || cpu0 < 0 || cpu1 < 0 {
				return nil, errors.New("INFO: unreadable")
			}
			for name, x := range a {
				d := accs[k].diff[name]
				d.calls += x.calls - b[name].calls
				d.usec += x.usec - b[name].usec
				accs[k].diff[name] = d
			}
			accs[k].cpu += cpu1 - cpu0
			if k == 0 && s == 0 && before != nil {
				before()
			}
		}
	}
	out := make([]stepCost, len(fs))
	for k := range accs {
		out[k].usec, out[k].how = perStep(map[string]scriptCalls{}, accs[k].diff, n)
		out[k].cpu = float64(accs[k].cpu) / float64(time.Microsecond) / float64(n)
	}
	return out, nil
}

// stepCost is one step's server CPU, as measured says.
type stepCost struct {
	usec, cpu float64
	how       string
}

// stepsAndFloors takes n new actions through the store's steps (the 403's
// Take, Record, the Take that claims, Finish), each step for all of them
// in turn, and n through the floor functions the same way, and returns
// each step's server CPU beside its floor's.
func stepsAndFloors(ctx context.Context, st store.Store, client *redis.Client, storePrefix, prefix string, round, n int) ([]stepFigure, error) {
	if err := client.FunctionLoadReplace(ctx, floorLibrary).Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoFunctions, err)
	}
	owners := make([]store.Owner, 50)
	for i := range owners {
		owners[i] = store.Owner{Agent: sideAgentID, User: "usr_step_" + strconv.Itoa(i)}
	}
	action := func(i int) storedriver.TakeRequest {
		id := strconv.Itoa(round) + "_" + strconv.Itoa(i)
		return storedriver.TakeRequest{
			Key:      "exchange:step" + id,
			Terms:    []byte(`{"order_id":"ord_` + id + `","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`),
			Summary:  "Exchange the jacket on order " + id + " for $70.00 more.",
			Lifetime: 10 * time.Minute,
		}
	}
	refs := make([]string, n)
	claims := make([]store.Claim, n)
	// The floors' keys, each chain of them (floor, floor+) its own.
	keysOf := func(chain string, i int) (tok, act, op, log, open, idx string) {
		base := prefix + chain + "{" + strconv.Itoa(round) + "u" + strconv.Itoa(i%50) + "}:"
		id := strconv.Itoa(i)
		return base + "tok:" + id, base + "act:" + id, base + "op:op_" + id, base + "lg:op_" + id, base + "open", base + "pf"
	}
	// The audit entry each committing step appends, as long as the
	// store's own (none when its scripts write none): the floor's is
	// composed by the caller, one APPEND and its TTL. entry is the length
	// of the store's k-th entry of its first operation (a line of its log,
	// redisstore's audit.go), read once its step has run for it.
	entry := func(k int) string {
		id, _, _ := storekit.SplitRef(refs[0])
		log := storePrefix + "{" + storekit.Slot(owners[0].Agent, owners[0].User) + "}:lg:" + id
		v, err := client.Get(ctx, log).Result()
		if err != nil {
			return ""
		}
		lines := strings.SplitAfter(v, "\n")
		if k+1 >= len(lines) {
			return ""
		}
		return strings.Repeat("e", len(lines[k+1]))
	}
	const rev = "1796052877-abcdefghijklmnop"
	ttl := strconv.FormatInt((10 * time.Minute).Milliseconds(), 10)
	keep := strconv.FormatInt((15 * time.Minute).Milliseconds(), 10)
	var pad string
	kit, floor, floorBK := map[string]stepCost{}, map[string]stepCost{}, map[string]stepCost{}
	// Each step, its floor and its floor with bookkeeping (none: the
	// floor's figure), for all n operations, in sideSlices turns of a
	// slice of each: what else the machine runs lands on all alike.
	run := func(name string, step, fl, bk func(i int) error, before func()) error {
		fs := []func(int) error{step, fl}
		if bk != nil {
			fs = append(fs, bk)
		}
		c, err := paired(ctx, client, n, fs, before)
		if err != nil {
			return err
		}
		kit[name], floor[name], floorBK[name] = c[0], c[1], c[len(c)-1]
		return nil
	}
	// The Gate's Takes name the marker Unbind would leave for the
	// browser's join cookie (storekit.MarkedInTake): never set here.
	marked := func(i int) context.Context {
		o := owners[i%50]
		return storekit.WithMarker(ctx, storekit.OnceKey(o.Agent, o.User, "unbound:"+strconv.Itoa(round)+":"+strconv.Itoa(i)))
	}
	if err := run("403", func(i int) error {
		r, err := storedriver.Steps(st).Take(marked(i), owners[i%50], action(i), time.Now())
		if err == nil && r.Ref == "" {
			err = fmt.Errorf("the 403's Take: %+v", r)
		}
		refs[i] = r.Ref
		return err
	}, func(i int) error {
		tok, act, op, _, _, _ := keysOf("", i)
		return client.FCall(ctx, "sbs_floor_403", []string{tok, act, op, op + ":m"}).Err()
	}, nil, nil); err != nil {
		return nil, err
	}
	if err := run("record", func(i int) error {
		id, rev, _ := storekit.SplitRef(refs[i])
		rep, err := storedriver.Steps(st).Record(ctx, owners[i%50], refs[i], store.Approval{OperationID: id, Revision: rev, Approver: "user"}, time.Now(), storedriver.RecordOptions{})
		if err == nil && rep.Result != storedriver.Recorded {
			err = fmt.Errorf("record: %v", rep.Result)
		}
		return err
	}, func(i int) error {
		_, act, op, log, _, _ := keysOf("", i)
		a := action(i)
		return client.FCall(ctx, "sbs_floor_record", []string{op, act, log}, "", rev, a.Terms, a.Summary, "1796052877",
			`{"approver":"user","approved_at":"2026-12-01T16:00:00Z"}`, ttl, "op_"+strconv.Itoa(i)+" "+rev, pad).Err()
	}, func(i int) error {
		_, act, op, log, open, _ := keysOf("bk:", i)
		a := action(i)
		return client.FCall(ctx, "sbs_floor_record", []string{op, act, log, open}, "", rev, a.Terms, a.Summary, "1796052877",
			`{"approver":"user","approved_at":"2026-12-01T16:00:00Z"}`, ttl, "op_"+strconv.Itoa(i)+" "+rev, pad,
			time.Now().Add(10*time.Minute).UnixMilli(), "op_"+strconv.Itoa(i)).Err()
	}, func() { pad = entry(0) }); err != nil {
		return nil, err
	}
	if err := run("claim", func(i int) error {
		r, err := storedriver.Steps(st).Take(marked(i), owners[i%50], action(i), time.Now())
		if err == nil && r.Claim == nil {
			err = fmt.Errorf("the claiming Take: %+v", r)
		}
		if err == nil {
			claims[i] = *r.Claim
		}
		return err
	}, func(i int) error {
		tok, act, op, log, _, _ := keysOf("", i)
		token := "tok" + strconv.Itoa(i)
		if err := client.FCall(ctx, "sbs_floor_claim", []string{tok, act, op, log, op + ":m"}, token, rev, time.Now().UnixNano(), "op_"+strconv.Itoa(i), keep, pad).Err(); err != nil {
			return err
		}
		// The start mark, after the claim's reply, as the store makes it.
		return client.FCall(ctx, "sbs_floor_start", []string{tok, op}, token).Err()
	}, func(i int) error {
		tok, act, op, log, open, idx := keysOf("bk:", i)
		token := "tok" + strconv.Itoa(i)
		if err := client.FCall(ctx, "sbs_floor_claim", []string{tok, act, op, log, op + ":m", open, idx}, token, rev, time.Now().UnixNano(), "op_"+strconv.Itoa(i), keep, pad).Err(); err != nil {
			return err
		}
		return client.FCall(ctx, "sbs_floor_start", []string{tok, op}, token).Err()
	}, func() { pad = entry(1) }); err != nil {
		return nil, err
	}
	if err := run("finish", func(i int) error {
		return storedriver.Steps(st).Finish(ctx, claims[i], store.OutcomePerformed, time.Now())
	}, func(i int) error {
		tok, _, op, log, _, _ := keysOf("", i)
		return client.FCall(ctx, "sbs_floor_finish", []string{op, tok, log}, "tok"+strconv.Itoa(i), keep, pad).Err()
	}, func(i int) error {
		tok, act, op, log, _, idx := keysOf("bk:", i)
		return client.FCall(ctx, "sbs_floor_finish", []string{op, tok, log, act, idx}, "tok"+strconv.Itoa(i), keep, pad, "op_"+strconv.Itoa(i)+" "+rev).Err()
	}, func() { pad = entry(2) }); err != nil {
		return nil, err
	}
	var out []stepFigure
	for _, name := range stepNames {
		k, f, b := kit[name], floor[name], floorBK[name]
		out = append(out, stepFigure{name: name, usec: k.usec, floor: f.usec, cpu: k.cpu, floorCPU: f.cpu, how: k.how, floorHow: f.how,
			floorBK: b.usec, floorBKHow: b.how})
	}
	return out, nil
}
