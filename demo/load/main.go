// Command load is opsgate's load tool: several web servers (Kits) share one
// store, many joined browsers ask for gated actions, their approvals are
// recorded, and every browser then repeats its approved request many times
// at once across all the servers. It reports throughput and latency for
// each phase and checks that every operation was performed exactly once
// (§7). Then the same actions go through each server's JSON API and MCP
// server on the same store (interfaces.go): each approved through both,
// both repeated at once, and each action is still performed once. It only
// talks to servers it starts on loopback, and stops by itself.
//
//	go run ./demo/load                      # embedded miniredis
//	go run ./demo/load -redis redis://127.0.0.1:6379/0 -browsers 500
//	go run ./demo/load -store memory        # one process, one Memory store
//	go run ./demo/load -port 9100 -redis-addr 127.0.0.1:6390   # web servers on 9100, 9101, …; the embedded store's address
//	go run ./demo/load -ceiling              # the store beside Redis's own ceiling (ceiling.go)
//	go run ./demo/load -side-by-side         # the Gate beside a hand-rolled gate; each store step beside its floor (sidebyside.go)
//	go run ./demo/load -side-by-side -runs 3 # three whole runs, each target's min/median/max over them (sideruns.go)
//	go run ./demo/load -faults               # crashes, stalls, failovers, lost replies (faults.go)
//	go run ./demo/load -hostile              # legitimate traffic quiet and under attack (hostile.go)
//
// Without -redis the store is an embedded miniredis: it runs each script
// call in 0.6–1.4 ms with 1,000–2,300 allocations, so those figures describe
// miniredis, not the kit. Measure on a real redis-server (-redis, or
// -ceiling, which starts one).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
)

func main() {
	var (
		storeKind  = flag.String("store", "redis", "redis (embedded miniredis unless -redis) or memory (then -servers is 1)")
		redisURL   = flag.String("redis", "", "a Redis URL to use instead of an embedded miniredis")
		servers    = flag.Int("servers", 4, "web servers sharing the store")
		browsers   = flag.Int("browsers", 200, "joined browsers, one operation each")
		repeats    = flag.Int("repeats", 8, "concurrent repeats of each approved request")
		ordinary   = flag.Int("ordinary", 5000, "requests from ordinary browsers")
		workers    = flag.Int("concurrency", 32, "requests in flight at once")
		limit      = flag.Duration("timeout", 2*time.Minute, "stop after this long whatever happens")
		ceiling    = flag.Bool("ceiling", false, "measure the store against redis-benchmark's EVALSHA ceiling (starts a redis-server unless -redis)")
		duration   = flag.Duration("duration", 2*time.Second, "-ceiling: length of each throughput measurement (3 rounds); -hostile: each phase")
		memOps     = flag.Int("ops", 100_000, "-ceiling: performed operations measured for bytes per operation")
		durable    = flag.String("durability", "", "the store's durability: disk, replicas 1, none (default: none on miniredis, disk on -redis)")
		faults     = flag.Bool("faults", false, "run the fault suite on redis-server processes it starts (faults.go)")
		short      = flag.Bool("short", false, "-faults: the short version CI runs")
		only       = flag.String("only", "", "-faults: only the scenarios whose key contains this: "+faultKeys())
		hostile    = flag.Bool("hostile", false, "legitimate traffic quiet and under attack (hostile.go)")
		attackRate = flag.Float64("attack-rate", 50, "-hostile: each attacker's requests per second (0: as fast as it can)")
		port       = flag.Int("port", 0, "the first web server's port on 127.0.0.1, the others on the next ones (0: free ports)")
		pipelines  = flag.Int("pipelines", 0, "-ceiling: the store's Options.Pipelines (0: its default; negative: none)")
		redisAddr  = flag.String("redis-addr", "", "the embedded miniredis's address (default: a free port on 127.0.0.1)")
		side       = flag.Bool("side-by-side", false, "the Gate beside a hand-rolled gate on the same redis-server, and each store step beside its floor (sidebyside.go; starts a redis-server unless -redis)")
		requests   = flag.Int("requests", 16_000, "-side-by-side: requests in each phase of each round")
		rounds     = flag.Int("rounds", 5, "-side-by-side: rounds")
		sideRuns   = flag.Int("runs", 1, "-side-by-side: whole runs, then each target's ratio per run with its min/median/max")
		cpuProfile = flag.String("cpuprofile", "", "write this process's CPU profile of the run to this file (go tool pprof)")
	)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "load -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	// Ctrl-C cancels the run, so that every server it started is stopped.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, *limit)
	defer cancel()
	if *faults {
		if *limit == 2*time.Minute { // the default: the full suite needs longer
			cancel()
			ctx, cancel = context.WithTimeout(sigCtx, 20*time.Minute) // about 8 minutes today
			defer cancel()
		}
		results, doubles, err := runFaults(ctx, faultsConfig{only: *only, short: *short, out: os.Stdout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "load -faults:", err)
			os.Exit(1)
		}
		// A durable mode promises no double performance, and nothing left
		// performing that a machine could settle.
		if stranded, stuck := durableLeft(results); doubles+stranded+stuck > 0 {
			os.Exit(1)
		}
		return
	}
	if *hostile {
		res, err := runHostile(ctx, hostileConfig{redisURL: *redisURL, duration: *duration, browsers: 16, attackRate: *attackRate, rounds: 3, out: os.Stdout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "load -hostile:", err)
			os.Exit(1)
		}
		if res.legit5xx+res.attack5xx > 0 {
			os.Exit(1)
		}
		return
	}
	if *side {
		if *limit == 2*time.Minute { // the default: 5 rounds of 9 phases need longer, each run
			cancel()
			ctx, cancel = context.WithTimeout(sigCtx, time.Duration(max(*sideRuns, 1))*30*time.Minute)
			defer cancel()
		}
		if _, err := runSideBySideRuns(ctx, sideConfig{redisURL: *redisURL, requests: *requests, rounds: *rounds, clients: 50, stepOps: 10_000, approvals: 1000, labels: *cpuProfile != "", out: os.Stdout}, *sideRuns); err != nil {
			fmt.Fprintln(os.Stderr, "load -side-by-side:", err)
			os.Exit(1)
		}
		return
	}
	if *ceiling {
		if *limit == 2*time.Minute { // the default: -ceiling's 100,000 operations need longer
			cancel()
			ctx, cancel = context.WithTimeout(sigCtx, 20*time.Minute) // about 8 minutes today
			defer cancel()
		}
		if _, err := runCeiling(ctx, ceilingConfig{redisURL: *redisURL, duration: *duration, memoryOps: *memOps, approvals: 2000, rounds: 3, durabilityClaims: 1000, pipelines: *pipelines}); err != nil {
			fmt.Fprintln(os.Stderr, "load -ceiling:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, config{*storeKind, *redisURL, *durable, *servers, *browsers, *repeats, *ordinary, *workers, *port, *redisAddr}); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

type config struct {
	store, redisURL, durability                   string
	servers, browsers, repeats, ordinary, workers int
	// port is the first web server's port (0: free ports), and redisAddr
	// the embedded miniredis's address ("": a free port): fixed ones let
	// a profiler or redis-cli attach to a run.
	port      int
	redisAddr string
}

var keys = [][]byte{[]byte("load-tool-hash-key-0123456789abc"), []byte("load-tool-encryption-key-0123456")}

func run(ctx context.Context, c config) error {
	stores, closeStores, err := openStores(c)
	if err != nil {
		return err
	}
	defer closeStores()

	var performed sync.Map // operation_id → *atomic.Int32
	var total atomic.Int32
	urls := make([]string, len(stores))
	var kits []*webkit.Kit
	// The agents of the API and MCP phases (interfaces.go), whose
	// Sessions every server's Mount verifies.
	ifc := newInterfaces()
	for i, st := range stores {
		kit := webkit.New(keys...)
		kit.Store = st
		kit.Logger = slog.New(slog.DiscardHandler)
		kit.Sessions.(*webkit.CookieSessions).Insecure = true
		kits = append(kits, kit)
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if claim, ok := webkit.ClaimOf(r); ok {
				n, _ := performed.LoadOrStore(claim.Operation.ID, new(atomic.Int32))
				n.(*atomic.Int32).Add(1)
				total.Add(1)
			}
			io.WriteString(w, "exchanged\n")
		})))
		handler, err := ifc.serve(kit, mux)
		if err != nil {
			return err
		}
		srv := httptest.NewUnstartedServer(handler)
		if c.port > 0 {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port+i)))
			if err != nil {
				return fmt.Errorf("-port: %w", err)
			}
			srv.Listener.Close()
			srv.Listener = ln
		}
		srv.Start()
		defer srv.Close()
		urls[i] = srv.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.workers, MaxConnsPerHost: c.workers}}
	pick := func() string { return urls[rand.IntN(len(urls))] }

	fmt.Printf("opsgate load: %d web servers on a shared %s store, %d browsers, %d repeats each, %d in flight\n",
		len(urls), storeName(c), c.browsers, c.repeats, c.workers)
	if c.store == "redis" {
		{
			if err := stores[0].(*redisstore.Store).Check(ctx); err != nil {
				fmt.Println("store check:", err) // the risk the chosen durability leaves, as Check words it
			}
		}
	}
	if c.store == "redis" && c.redisURL == "" {
		fmt.Println("warning: miniredis costs 0.6–1.4 ms and 1,000–2,300 allocations per script call: these figures describe miniredis, not the kit. Use -redis redis://… or -ceiling.")
	}
	fmt.Println()
	fmt.Printf("%-26s %8s %10s %10s %10s  %s\n", "phase", "requests", "req/s", "p50", "p99", "answers")

	// Ordinary browsers pass straight through (W07).
	res := phase(ctx, c.workers, c.ordinary, func(i int) (int, error) {
		return post(ctx, client, pick(), fmt.Sprintf("ord_plain_%d", i%50), nil)
	})
	res.print("ordinary browser")

	// Joined browsers: each gets 403 with a ref (W53).
	cookies := make([]*http.Cookie, c.browsers)
	sessions := make([]webkit.Session, c.browsers)
	for i := range cookies {
		sessions[i] = webkit.Session{ID: fmt.Sprintf("ses_%d", i), Agent: "https://agent.example/client", User: fmt.Sprintf("usr_%d", i), Extensions: map[string]string{"operations": "3"}}
		rec := httptest.NewRecorder()
		if err := kits[0].Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), sessions[i]); err != nil {
			return err
		}
		cookies[i] = rec.Result().Cookies()[0]
	}
	refs := make([]string, c.browsers)
	res = phase(ctx, c.workers, c.browsers, func(i int) (int, error) {
		return post(ctx, client, pick(), fmt.Sprintf("ord_%d", i), cookies[i], func(h http.Header) {
			_, refs[i], _ = headers.ParseOperation(h.Values("Poppy-Operation"))
		})
	})
	res.print("joined: 403 + ref")

	// The agents' approvals, recorded as the endpoint records them (W90).
	start := time.Now()
	for i, ref := range refs {
		id, _ := storekit.ParseRef(ref)
		rec, found, err := storedriver.Steps(stores[0]).Lookup(ctx, sessions[i].Owner(), ref, time.Now())
		if err != nil || !found {
			return fmt.Errorf("lookup of browser %d's ref %q: found %v, %v", i, ref, found, err)
		}
		reply, err := storedriver.Steps(stores[0]).Record(ctx, sessions[i].Owner(), ref, store.Approval{OperationID: id, Revision: rec.Current.Revision, Approver: "user"}, time.Now(), storedriver.RecordOptions{})
		if err != nil || reply.Result != storedriver.Recorded {
			return fmt.Errorf("record for browser %d: %v, %v", i, reply.Result, err)
		}
	}
	fmt.Printf("%-26s %8d %10.0f\n", "approvals recorded", len(refs), float64(len(refs))/time.Since(start).Seconds())

	// Every browser repeats its approved request many times at once,
	// across all servers: exactly one of them performs (§7 W135).
	res = phase(ctx, c.workers, c.browsers*c.repeats, func(i int) (int, error) {
		b := i % c.browsers
		return post(ctx, client, pick(), fmt.Sprintf("ord_%d", b), cookies[b])
	})
	res.print("approved: repeats")

	twice := 0
	performed.Range(func(_, v any) bool {
		if v.(*atomic.Int32).Load() > 1 {
			twice++
		}
		return true
	})
	fmt.Printf("\nperformed %d of %d approved operations; %d performed more than once\n", total.Load(), c.browsers, twice)
	if twice > 0 || int(total.Load()) != c.browsers {
		return errors.New("at most once, exactly once per approval: FAILED")
	}
	fmt.Println("at most once: ok")

	// The same actions at the API and the MCP server, on the same store
	// (interfaces.go).
	fmt.Println()
	return ifc.run(ctx, c, urls)
}

// storeName says which store the figures measure.
func storeName(c config) string {
	switch {
	case c.store == "memory":
		return "memory (store.NewMemory, in process)"
	case c.redisURL == "":
		return "embedded miniredis"
	}
	return "redis-server"
}

func describe(r *http.Request) (webkit.Action, error) {
	order := r.PathValue("order")
	return webkit.Action{
		Key:     "exchange:" + order,
		Terms:   map[string]any{"order_id": order, "replacement_sku": r.PostFormValue("sku"), "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}},
		Summary: "Exchange the jacket on order " + order + " for $70.00 more.",
	}, nil
}

func openStores(c config) ([]store.Store, func(), error) {
	if c.store == "memory" {
		return []store.Store{memstore.New(memstore.Config{})}, func() {}, nil
	}
	if c.store != "redis" {
		return nil, nil, fmt.Errorf("-store %q: want redis or memory", c.store)
	}
	var opts *redis.Options
	closeAll := []func(){}
	if c.redisURL != "" {
		o, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis: %w", err)
		}
		opts = o
	} else {
		mr := miniredis.NewMiniRedis()
		addr := c.redisAddr
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		if err := mr.StartAddr(addr); err != nil {
			return nil, nil, fmt.Errorf("embedded miniredis: %w", err)
		}
		closeAll = append(closeAll, mr.Close)
		opts = &redis.Options{Addr: mr.Addr()}
	}
	opts.ContextTimeoutEnabled = true
	mode := c.durability
	if mode == "" {
		// miniredis persists nothing: it is a demo store. A real Redis gets
		// the store's safe default.
		mode = map[bool]string{true: "none", false: "disk"}[c.redisURL == ""]
	}
	storeOpts, why := durabilityOptions(mode)
	if why != "" {
		return nil, nil, fmt.Errorf("-durability: %s", why)
	}
	storeOpts.Prefix = fmt.Sprintf("opsgate-load-%d:", time.Now().UnixNano()) // a fresh run on a shared Redis; every key has a TTL
	var stores []store.Store
	// One client each, as separate web servers have.
	for i := range max(c.servers, 1) {
		cl := redis.NewClient(opts)
		closeAll = append(closeAll, func() { cl.Close() })
		stores = append(stores, loadHalf(i, redisstore.New(cl, storeOpts)))
	}
	return stores, func() {
		for _, f := range slices.Backward(closeAll) {
			f()
		}
	}, nil
}

func post(ctx context.Context, client *http.Client, base, order string, cookie *http.Cookie, seen ...func(http.Header)) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders/"+order+"/exchange", strings.NewReader(url.Values{"sku": {"stormline-insulated-m"}}.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if cookie != nil {
		req.AddCookie(cookie)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	for _, f := range seen {
		f(res.Header)
	}
	return res.StatusCode, nil
}

type result struct {
	n         int
	elapsed   time.Duration
	latencies []time.Duration
	statuses  map[int]int
	errors    int
}

// phase runs n requests with at most workers in flight.
func phase(ctx context.Context, workers, n int, do func(i int) (int, error)) result {
	r := result{n: n, latencies: make([]time.Duration, n), statuses: map[int]int{}}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				t := time.Now()
				status, err := do(i)
				r.latencies[i] = time.Since(t)
				mu.Lock()
				if err != nil {
					r.errors++
				} else {
					r.statuses[status]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}

func (r result) print(name string) {
	slices.Sort(r.latencies)
	q := func(p float64) time.Duration {
		if len(r.latencies) == 0 {
			return 0
		}
		return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))].Round(time.Microsecond)
	}
	var answers []string
	for _, s := range slices.Sorted(func(yield func(int) bool) {
		for s := range r.statuses {
			if !yield(s) {
				return
			}
		}
	}) {
		answers = append(answers, fmt.Sprintf("%d×%d", r.statuses[s], s))
	}
	if r.errors > 0 {
		answers = append(answers, fmt.Sprintf("%d errors", r.errors))
	}
	fmt.Printf("%-26s %8d %10.0f %10v %10v  %s\n", name, r.n, float64(r.n)/r.elapsed.Seconds(), q(0.5), q(0.99), strings.Join(answers, " "))
}

// loadHalf has the even-numbered web servers call the store's steps as
// functions (Load; on miniredis, which has none, scripts) and the others
// as scripts, on the same records, as during a rolling deploy. Load's error
// (a durability the server can't give yet) only means that claims fail
// closed, which a fault scenario shows.
func loadHalf(i int, st *redisstore.Store) *redisstore.Store {
	if i%2 == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = st.Load(ctx)
		cancel()
	}
	return st
}
