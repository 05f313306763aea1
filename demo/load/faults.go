package main

// -faults: what happens to at-most-once when Redis crashes, stalls, fails
// over or loses a reply, and when a web server dies mid-handler. Every
// scenario runs joined browsers through whole cycles (403, the agent's
// approval, repeats across web servers) while the fault happens, then
// repeats every approved request after recovery: an operation whose
// handler runs twice is a double performance (§7), an approval recorded
// but never performed is an approval lost.
//
// A quarter of the cycles ask through the JSON API and a quarter through
// the MCP tool instead (interfaces.go, behind every server's Mount), on
// the same stores: the agent sends its approval on the repeat itself, and
// their performances are counted at the handler by operation ID with the
// page's, in performed and doubles ("api/mcp performed N" says how many).
//
// Then it counts what is left performing once everything is answered
// again, from the handler's side (which operation IDs it ran and returned
// from) against the store's (Store.Performing and Lookup): a claim whose
// handler never ran is stranded, one whose handler returned but is still
// performing 10 s after recovery is stuck (its Finish never landed). Only
// a handler that started and never returned (a web server that died in
// it) is for a person to settle with Resolve (webkit/RULES.md "Claims are
// never stranded").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

type faultsConfig struct {
	only  string    // run only the scenarios whose name contains it ("" all)
	short bool      // the CI version: fewer browsers, shorter phases
	out   io.Writer // where the lines go
}

// faultResult is one scenario's line.
type faultResult struct {
	name, mode string
	durable    bool   // a durable mode: a double performance fails the suite
	skipped    string // why the scenario did not run; "" when it ran
	performed  int
	doubles    int
	lost       int
	stranded   int           // performing after recovery, the handler never ran
	stuck      int           // performing 10 s after recovery, the handler returned
	viaIfc     int           // performances through the API and the MCP tool (in performed)
	ifcDoubles int           // operations of theirs performed more than once (in doubles)
	noIfc      bool          // the scenario sends no API or MCP traffic
	maxWait    time.Duration // the longest gated request
	recovery   time.Duration // from the fault healed until gated requests are answered again
	note       string
}

func (r faultResult) String() string {
	name := r.name + " [" + r.mode + "]"
	if r.skipped != "" {
		return fmt.Sprintf("%-62s skipped: %s", name, r.skipped)
	}
	recovery := r.recovery.Round(time.Millisecond).String()
	if r.recovery < 0 {
		recovery = "never"
	}
	s := fmt.Sprintf("%-62s performed %5d  doubles %3d  approvals lost %3d  stranded %3d  stuck %3d  max wait %7v  recovery %7s",
		name, r.performed, r.doubles, r.lost, r.stranded, r.stuck, r.maxWait.Round(time.Millisecond), recovery)
	ifc := fmt.Sprintf("api/mcp performed %d, %d doubles", r.viaIfc, r.ifcDoubles)
	if r.noIfc {
		ifc = "no api/mcp traffic"
	}
	s += "  (" + join(ifc, r.note) + ")"
	return s
}

// durableLeft returns what the durable modes' scenarios left performing
// that a machine could have settled: stranded and stuck operations, which
// must be 0 (webkit/RULES.md "Claims are never stranded").
func durableLeft(results []faultResult) (stranded, stuck int) {
	for _, r := range results {
		if r.durable && r.skipped == "" {
			stranded += r.stranded
			stuck += r.stuck
		}
	}
	return stranded, stuck
}

// runFaults runs every scenario and returns the double performances in
// durable modes, which must be 0.
func runFaults(ctx context.Context, c faultsConfig) (results []faultResult, durableDoubles int, err error) {
	procs, err := redistest.NewProcs()
	if err != nil {
		return nil, 0, err
	}
	defer procs.Close()
	// go-redis logs every failed dial; during a fault that is thousands of
	// lines saying what the scenario line says.
	redis.SetLogger(quietLogger{})
	fmt.Fprintf(c.out, "opsgate faults: redis-server processes on loopback, %s run\n", map[bool]string{true: "short", false: "full"}[c.short])
	total, skipped := 0, 0
	for _, sc := range faultScenarios {
		if ctx.Err() != nil {
			return results, durableDoubles, ctx.Err()
		}
		if c.only != "" && !strings.Contains(sc.key, c.only) || c.short && !sc.short {
			continue
		}
		before := runtime.NumGoroutine()
		r := sc.run(ctx, procs, c)
		if ctx.Err() != nil { // interrupted: its figures mean nothing
			return results, durableDoubles, ctx.Err()
		}
		// Everything the scenario started (web servers, clients, the
		// kit's releases) should be gone once it is torn down.
		if extra := settleGoroutines(ctx, before, 3*time.Second); extra > 0 && r.skipped == "" {
			r.note = join(r.note, fmt.Sprintf("%d goroutines more than before it, 3 s after", extra))
		}
		fmt.Fprintln(c.out, r)
		results = append(results, r)
		switch {
		case strings.HasPrefix(r.skipped, couldNotRun):
			err = errors.Join(err, fmt.Errorf("%s [%s]: %s", r.name, r.mode, r.skipped))
		case r.skipped != "":
			skipped++
		default:
			total += r.doubles
			if r.durable {
				durableDoubles += r.doubles
			}
		}
	}
	stranded, stuck := durableLeft(results)
	fmt.Fprintf(c.out, "faults: %d scenarios, %d double performances (%d in durable modes; stranded %d, stuck %d in durable modes; %d scenarios skipped)\n", len(results), total, durableDoubles, stranded, stuck, skipped)
	return results, durableDoubles, err
}

// settleGoroutines waits up to d for the goroutine count to fall back to
// baseline, and returns how many more there still are.
func settleGoroutines(ctx context.Context, baseline int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		n := runtime.NumGoroutine() - baseline
		if n <= 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return max(n, 0)
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// faultScenario is one scenario of the suite.
type faultScenario struct {
	key   string // what -only matches
	short bool   // in the short run (go test) too, shortened
	run   func(context.Context, *redistest.Procs, faultsConfig) faultResult
}

// faultScenarios are the suite, in order. The short run (CI) keeps it
// about a minute: a 10 s stall and 10 s of lost replies (longer than the
// kit's first retries), a kill with handlers running, the older snapshot
// (so that the count of doubles is seen to work) and the dead web server.
// The lagging replica, the Cluster failover and the master restart have
// tests of their own in store/redisstore (TestDurableReplicas,
// TestClusterFailover, TestReplicasMasterRestart).
var faultScenarios = []faultScenario{
	{"kill", false, faultKillAOF},
	{"kill mid-handler", true, faultKillMidHandler},
	{"older", true, faultRestartOlder},
	{"stall 5s", false, faultStall(5 * time.Second)},
	{"stall 10s", true, faultStall(10 * time.Second)},
	{"stall 25s", false, faultStall(25 * time.Second)},
	{"replica none", false, faultLaggingReplica("none")},
	{"replica durable", false, faultLaggingReplica("replicas 1")},
	{"master restart aof", false, faultMasterRestart("aof")},
	{"master restart rdb", false, faultMasterRestart("rdb")},
	{"master restored rdb", false, faultMasterRestart("restored")},
	{"cluster", false, faultClusterKill},
	{"web server", true, faultWebServerKilled},
	{"lost reply", false, faultLostReply(500 * time.Millisecond)},
	{"lost reply 10s", true, faultLostReply(10 * time.Second)},
}

// faultKeys are the scenarios' keys, for -only's help.
func faultKeys() string {
	var keys []string
	for _, sc := range faultScenarios {
		keys = append(keys, sc.key)
	}
	return strings.Join(keys, ", ")
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

const couldNotRun = "could not run: "

// sizes of a run.
func (c faultsConfig) browsers() int { return map[bool]int{true: 8, false: 24}[c.short] }
func (c faultsConfig) servers() int  { return map[bool]int{true: 3, false: 4}[c.short] }
func (c faultsConfig) load() time.Duration {
	return map[bool]time.Duration{true: 1500 * time.Millisecond, false: 6 * time.Second}[c.short]
}

// redisClient is a client as a website would configure it: context
// deadlines bound calls; the rest is go-redis's defaults.
func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// ---- the shop under test ----

// rig is several web servers (Kits) sharing one store, with joined
// browsers, and the books of what was approved and performed.
type rig struct {
	stores  []store.Store
	kits    []*webkit.Kit
	urls    []string
	servers []*httptest.Server
	client  *http.Client
	cookies []*http.Cookie
	owners  []store.Owner
	pending []pendingOrder // approved, not yet used (preparePending)
	short   bool           // the CI run: shorter waits

	// block, when set, makes the handler wait on it after counting the
	// performance (a handler that never ends: a web server killed in it).
	block     chan struct{}
	blockOnly atomic.Int32 // the server index that blocks, +1; 0: none
	// delay, when set, is how long the handler takes (nanoseconds): a
	// fault can strike while handlers run.
	delay atomic.Int64

	// The agents' API and MCP traffic (interfaces.go): every server also
	// serves the exchange on its JSON API and as an MCP tool behind its
	// Mount; a quarter of the cycles ask through each instead of the
	// browser, and send the approval on the repeat itself.
	ifc       *interfaces
	ifcRoutes *http.Transport       // the site's proxy to the server a request names
	sessions  []*webkittest.Session // browser → its agent's Session, for API and MCP calls
	noIfc     bool                  // the scenario sends no API or MCP traffic

	mu          sync.Mutex
	runs        map[string]int      // operation ID → handler runs (started), every interface
	returned    map[string]int      // operation ID → handler runs that returned
	approved    map[string]approval // operation ID → its approval, confirmed or not
	ifcOps      map[string]bool     // operation IDs asked through the API or MCP
	ifcApproved []ifcApproval       // the approvals the agents sent on API and MCP repeats
	gated       []wait              // the website's gated requests
}

// ifcApproval is an approval an agent sent on an API or MCP repeat.
type ifcApproval struct {
	browser  int
	order    string
	via      string // "api" or "mcp"
	approval *store.Approval
}

// serverKey is the context key of the server an API or MCP request of
// the rig goes to (its index in urls).
type serverKey struct{}

// wait is one gated request: when it started, how long it took.
type wait struct {
	start  time.Time
	d      time.Duration
	status int // 0: no answer
}

// firstPerformedAfter returns how long after t the first gated request
// that started after it was answered 200 (its handler ran: a claim was
// confirmed), or -1 if none was.
func (r *rig) firstPerformedAfter(t time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := time.Duration(-1)
	for _, w := range r.gated {
		if w.status == http.StatusOK && !w.start.Before(t) {
			if d := w.start.Add(w.d).Sub(t); first < 0 || d < first {
				first = d
			}
		}
	}
	return first
}

// waitsDuring returns how many gated requests started between from and to,
// and their p99 wait.
func (r *rig) waitsDuring(from, to time.Time) (int, time.Duration) {
	r.mu.Lock()
	var ds []time.Duration
	for _, w := range r.gated {
		if !w.start.Before(from) && w.start.Before(to) {
			ds = append(ds, w.d)
		}
	}
	r.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return len(ds), ds[min(len(ds)-1, len(ds)*99/100)]
}

// approval is one approval the agents sent, by operation.
type approval struct {
	id        string // the operation's ID (set by drain)
	browser   int
	order     string
	ref       string
	confirmed bool // Record answered Recorded; false: the reply was lost
}

func newRig(stores []store.Store, browsers int, short bool) (*rig, error) {
	r := &rig{stores: stores, short: short, runs: map[string]int{}, returned: map[string]int{}, approved: map[string]approval{}, ifcOps: map[string]bool{}}
	r.ifc = newInterfaces()
	r.ifc.handle = func(_ context.Context, id string) {
		r.mu.Lock()
		r.runs[id]++
		r.mu.Unlock()
		if d := time.Duration(r.delay.Load()); d > 0 {
			time.Sleep(d)
		}
		r.mu.Lock()
		r.returned[id]++
		r.mu.Unlock()
	}
	for i, st := range stores {
		kit := webkit.New(keys...)
		kit.Store = st
		kit.Logger = slog.New(slog.DiscardHandler)
		kit.Sessions.(*webkit.CookieSessions).Insecure = true
		r.kits = append(r.kits, kit)
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			claim, ok := webkit.ClaimOf(req)
			if ok {
				r.mu.Lock()
				r.runs[claim.Operation.ID]++
				r.mu.Unlock()
				if r.blockOnly.Load() == int32(i+1) && r.block != nil {
					<-r.block
					return
				}
				if d := time.Duration(r.delay.Load()); d > 0 {
					time.Sleep(d)
				}
			}
			io.WriteString(w, "exchanged\n")
			if ok {
				r.mu.Lock()
				r.returned[claim.Operation.ID]++
				r.mu.Unlock()
			}
		})))
		handler, err := r.ifc.serve(kit, mux)
		if err != nil {
			return nil, err
		}
		srv := httptest.NewServer(handler)
		r.servers = append(r.servers, srv)
		r.urls = append(r.urls, srv.URL)
	}
	r.client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// The agents reach the site in process: a proxy to the server the
	// request's context names, over loopback HTTP.
	targets := make([]*url.URL, len(r.urls))
	for i, u := range r.urls {
		targets[i], _ = url.Parse(u)
	}
	r.ifcRoutes = &http.Transport{MaxIdleConnsPerHost: 64}
	r.ifc.site.Handler = &httputil.ReverseProxy{
		Transport: r.ifcRoutes,
		Rewrite: func(pr *httputil.ProxyRequest) {
			srv, _ := pr.In.Context().Value(serverKey{}).(int)
			pr.SetURL(targets[srv])
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	agent := r.ifc.site.NewAgent()
	for i := range browsers {
		s := webkit.Session{ID: fmt.Sprintf("ses_%d", i), Agent: "https://agent.example/client", User: fmt.Sprintf("usr_%d", i), Extensions: map[string]string{"operations": "3"}}
		rec := httptest.NewRecorder()
		if err := r.kits[0].Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), s); err != nil {
			return nil, err
		}
		r.cookies = append(r.cookies, rec.Result().Cookies()[0])
		r.owners = append(r.owners, s.Owner())
		r.sessions = append(r.sessions, agent.Session(fmt.Sprintf("usr_%d", i)))
	}
	return r, nil
}

func (r *rig) Close() {
	if r.block != nil {
		close(r.block)
	}
	for _, s := range r.servers {
		s.CloseClientConnections()
		s.Close()
	}
	r.client.CloseIdleConnections()
	r.ifcRoutes.CloseIdleConnections()
}

// call sends browser b's agent's request for order through via ("api" or
// "mcp") to server srv, with approval when not nil (in Poppy-Approval, in
// the tool call's _meta).
func (r *rig) call(ctx context.Context, srv, b int, via, order string, approval *store.Approval) *webkittest.Response {
	req := apiRequest(order)
	if via == "mcp" {
		req = toolRequest(order)
	}
	return r.sessions[b].Call(req.WithContext(context.WithValue(ctx, serverKey{}, srv)), approval)
}

// via says which interface cycle n of a browser asks through: "" for the
// browser (the website), half of them; "api" or "mcp" a quarter each.
func (r *rig) via(n int) string {
	if r.noIfc {
		return ""
	}
	return map[int]string{1: "api", 3: "mcp"}[n%4]
}

// ifcCycle is one cycle through the API or the MCP tool: ask without an
// approval (an operation), then the same request with the agent's
// approval on it, up to three times across the servers until it is
// performed. A repeat after a 503 or a lost reply must never perform
// twice.
func (r *rig) ifcCycle(ctx, stop context.Context, b, n int, via, order string) {
	res := r.call(ctx, n%len(r.urls), b, via, order, nil)
	if res.Err != nil || res.Operation == nil {
		pause(ctx, 20*time.Millisecond)
		return
	}
	op := res.Operation
	a := &store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverUser}
	r.mu.Lock()
	r.ifcOps[op.ID] = true
	r.ifcApproved = append(r.ifcApproved, ifcApproval{b, order, via, a})
	r.mu.Unlock()
	for k := range 3 {
		if stop.Err() != nil {
			return
		}
		r.call(ctx, (b+n+k)%len(r.urls), b, via, order, a)
		if r.performedOnce(op.ID) {
			return
		}
		pause(stop, 20*time.Millisecond)
	}
}

// request posts browser b's request for order to server srv and returns
// the status and, for a 403, the ref.
func (r *rig) request(ctx context.Context, srv, b int, order string) (int, string, error) {
	var ref string
	start := time.Now()
	status, err := post(ctx, r.client, r.urls[srv], order, r.cookies[b], func(h http.Header) {
		_, ref, _ = headers.ParseOperation(h.Values("Poppy-Operation"))
	})
	r.mu.Lock()
	r.gated = append(r.gated, wait{start, time.Since(start), status})
	r.mu.Unlock()
	return status, ref, err
}

// approve records the agent's approval of ref for browser b, as the
// endpoint records it, through server srv's store.
func (r *rig) approve(ctx context.Context, srv, b int, order, ref string) {
	id, ok := storekit.ParseRef(ref)
	if !ok {
		return
	}
	now := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rec, found, err := storedriver.Steps(r.stores[srv]).Lookup(ctx, r.owners[b], ref, now)
	if err != nil || !found {
		return
	}
	reply, err := storedriver.Steps(r.stores[srv]).Record(ctx, r.owners[b], ref, store.Approval{OperationID: id, Revision: rec.Current.Revision, Approver: "user"}, now, storedriver.RecordOptions{})
	if err == nil && reply.Result != storedriver.Recorded {
		return
	}
	r.mu.Lock()
	// An error may hide a recorded approval: its operation is repeated
	// after recovery too, but not counted as lost.
	r.approved[id] = approval{browser: b, order: order, ref: ref, confirmed: err == nil}
	r.mu.Unlock()
}

// cycles runs whole cycles from every browser until ctx ends: ask, have
// the agent approve, repeat the request up to three times across the
// servers until it is performed, then a new order.
//
// stop ends the cycles between requests; requests in flight finish under
// ctx, as a browser's would, so that ending the load strands nothing.
func (r *rig) cycles(ctx, stop context.Context, tag string) {
	var wg sync.WaitGroup
	for b := range r.cookies {
		wg.Go(func() {
			for n := 0; stop.Err() == nil && ctx.Err() == nil; n++ {
				order := fmt.Sprintf("ord_%s_%d_%d", tag, b, n)
				if via := r.via(n); via != "" {
					r.ifcCycle(ctx, stop, b, n, via, order)
					continue
				}
				status, ref, err := r.request(ctx, n%len(r.urls), b, order)
				if err != nil || status != 403 || ref == "" {
					pause(ctx, 20*time.Millisecond)
					continue
				}
				r.approve(ctx, (b+n)%len(r.urls), b, order, ref)
				for k := range 3 {
					if stop.Err() != nil {
						return
					}
					if status, _, err := r.request(ctx, (b+n+k)%len(r.urls), b, order); err == nil && status == 200 {
						break
					}
					pause(stop, 20*time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
}

// preparePending has one approval recorded per browser and not yet used:
// the approvals a fault finds waiting. A scenario performs them
// (performPending) at the moment that puts them at risk, such as after a
// snapshot or while a replica lags.
func (r *rig) preparePending(ctx context.Context) error {
	for b := range r.cookies {
		order := fmt.Sprintf("ord_pending_%d", b)
		status, ref, err := r.request(ctx, b%len(r.urls), b, order)
		if err != nil || status != 403 || ref == "" {
			return fmt.Errorf("pending approval of browser %d: %d, %v", b, status, err)
		}
		r.approve(ctx, b%len(r.urls), b, order, ref)
		r.pending = append(r.pending, pendingOrder{b, order})
	}
	return nil
}

type pendingOrder struct {
	browser int
	order   string
}

// performPending repeats the pending approvals' requests once each, at
// most 16 at a time.
func (r *rig) performPending(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for k, p := range r.pending {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r.request(ctx, (k+1)%len(r.urls), p.browser, p.order)
		})
	}
	wg.Wait()
}

// drain repeats every approved request after recovery, twice on each
// server, so that an approval that came back after its use is performed
// again (a double), and one still unused is performed now.
func (r *rig) drain(ctx context.Context) {
	r.mu.Lock()
	var todo []approval
	for id, a := range r.approved {
		a.id = id
		todo = append(todo, a)
	}
	r.mu.Unlock()
	patience := map[bool]time.Duration{true: 5 * time.Second, false: 10 * time.Second}[r.short]
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, a := range todo {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			// Twice on each server. An approval not yet performed is
			// repeated until it is, every 250 ms for up to 10 s (5 s in the
			// short run), as a
			// browser comes back after a 503 (a claim being released, a
			// store catching up).
			start := time.Now()
			for k := 0; ctx.Err() == nil; k++ {
				status, _, _ := r.request(ctx, k%len(r.urls), a.browser, a.order)
				if k+1 >= 2*len(r.urls) && (status == http.StatusOK || r.performedOnce(a.id) || time.Since(start) > patience) {
					return
				}
				if status != http.StatusOK && k+1 >= 2*len(r.urls) {
					pause(ctx, 250*time.Millisecond)
				}
			}
		})
	}
	// The agents' approved API and MCP requests, the same way: each
	// repeated with its approval twice on each server, and until it is
	// performed.
	r.mu.Lock()
	ifcTodo := slices.Clone(r.ifcApproved)
	r.mu.Unlock()
	for _, a := range ifcTodo {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			for k := 0; ctx.Err() == nil; k++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				r.call(rctx, k%len(r.urls), a.browser, a.via, a.order, a.approval)
				cancel()
				done := r.performedOnce(a.approval.OperationID)
				if k+1 >= 2*len(r.urls) && (done || time.Since(start) > patience) {
					return
				}
				if !done && k+1 >= 2*len(r.urls) {
					pause(ctx, 250*time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
}

// performedOnce reports whether operation id was performed.
func (r *rig) performedOnce(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id] > 0
}

// tally fills performed, doubles, lost and max wait.
func (r *rig) tally(res *faultResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.runs {
		res.performed += n
		if n > 1 {
			res.doubles++
		}
		if r.ifcOps[id] {
			res.viaIfc += n
			if n > 1 {
				res.ifcDoubles++
			}
		}
	}
	for id, a := range r.approved {
		if a.confirmed && r.runs[id] == 0 {
			res.lost++
		}
	}
	for _, w := range r.gated {
		res.maxWait = max(res.maxWait, w.d)
	}
}

// probe measures recovery: from healed, it sends one gated request per
// affected browser (a fresh order: it needs only a 403) every 50 ms until
// each has been answered, and returns the time until the last first
// answer, at most limit.
func (r *rig) probe(ctx context.Context, healed time.Time, limit time.Duration, affected func(b int) bool) (time.Duration, bool) {
	ctx, cancel := context.WithDeadline(ctx, healed.Add(limit))
	defer cancel()
	var worst atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for b := range r.cookies {
		if affected != nil && !affected(b) {
			continue
		}
		wg.Go(func() {
			for n := 0; ; n++ {
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				status, _, err := r.request(rctx, n%len(r.urls), b, fmt.Sprintf("probe_%d_%d", b, healed.UnixNano()))
				rcancel()
				if err == nil && (status == 200 || status == 403) {
					d := int64(time.Since(healed))
					for {
						w := worst.Load()
						if d <= w || worst.CompareAndSwap(w, d) {
							break
						}
					}
					return
				}
				if ctx.Err() != nil {
					failed.Store(true)
					return
				}
				pause(ctx, 50*time.Millisecond)
			}
		})
	}
	wg.Wait()
	return time.Duration(worst.Load()), !failed.Load()
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// diskRig starts a redis-server with AOF and appendfsync always, the web
// servers' stores on it with durability disk, and a rig of joined
// browsers: the setup of the scenarios whose fault is the server itself.
// stop ends all three.
func diskRig(procs *redistest.Procs, c faultsConfig) (srv *redistest.Instance, r *rig, stop func(), err error) {
	if srv, err = redistest.StartArgs(procs, aofAlways...); err != nil {
		return nil, nil, nil, err
	}
	opts, _ := c.durability("disk")
	stores, closeStores := storesOn(srv.Addr, c.servers(), opts)
	if r, err = newRig(stores, c.browsers(), c.short); err != nil {
		closeStores()
		srv.Stop()
		return nil, nil, nil, err
	}
	return srv, r, func() { r.Close(); closeStores(); srv.Stop() }, nil
}

// storesOn returns n stores, one client each (as separate web servers
// have), on addr, and a func closing the clients.
func storesOn(addr string, n int, opts redisstore.Options) ([]store.Store, func()) {
	var stores []store.Store
	var clients []*redis.Client
	for i := range n {
		c := redisClient(addr)
		clients = append(clients, c)
		stores = append(stores, loadHalf(i, redisstore.New(c, opts)))
	}
	return stores, func() {
		for _, c := range clients {
			c.Close()
		}
	}
}

// runLoad runs cycles for d with fault called at d/3 (in its own
// goroutine); fault returns when the fault is healed, with that instant.
// It then probes recovery and drains.
//
// beforeDrain, when set, runs before the drain: an operator's repair, such
// as a new replica for a promoted master, without which a durable mode
// rightly performs nothing.
func runLoad(ctx context.Context, r *rig, d time.Duration, fault func(context.Context) (time.Time, error), affected func(b int) bool, beforeDrain func(context.Context) error, res *faultResult) error {
	if err := r.preparePending(ctx); err != nil {
		return err
	}
	loadCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { r.cycles(ctx, loadCtx, "load") })
	pause(loadCtx, d/3)
	faulted := time.Now()
	healed, err := fault(ctx)
	if err != nil {
		cancel()
		wg.Wait()
		return err
	}
	limit := map[bool]time.Duration{true: 8 * time.Second, false: 30 * time.Second}[r.short]
	rec, ok := r.probe(ctx, healed, limit, affected)
	res.recovery = rec
	if !ok {
		res.recovery = -1
		res.note = join(res.note, fmt.Sprintf("gated requests of some browsers still unanswered %v after the fault healed", limit))
	}
	wg.Wait()
	if beforeDrain != nil {
		if err := beforeDrain(ctx); err != nil {
			return fmt.Errorf("before the drain: %w", err)
		}
	}
	r.drain(ctx)
	r.tally(res)
	if res.lost > 0 {
		res.note = join(res.note, "lost approvals' operations: "+r.lostStates(ctx))
	}
	left := r.leftPerforming(ctx, r.stores[0], healed.Add(max(res.recovery, 0)+settleAfter))
	left.into(res)
	if n, p99 := r.waitsDuring(faulted, healed); n > 0 {
		res.note = join(res.note, fmt.Sprintf("%d gated requests sent during the fault, p99 wait %v", n, p99.Round(time.Millisecond)))
	}
	return nil
}

func join(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

func failed(res faultResult, err error) faultResult {
	res.skipped = couldNotRun + err.Error()
	return res
}

// ---- the scenarios ----

// faultKillAOF: SIGKILL mid-load, restart from the AOF (appendfsync
// always: every write is on disk before Redis answers).
func faultKillAOF(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
	res := faultResult{name: "SIGKILL + restart with AOF", mode: "disk: appendfsync always", durable: true}
	srv, r, stop, err := diskRig(procs, c)
	if err != nil {
		return failed(res, err)
	}
	defer stop()
	err = runLoad(ctx, r, c.load(), func(ctx context.Context) (time.Time, error) {
		r.performPending(ctx)
		srv.Kill()
		err := srv.Restart()
		return time.Now(), err
	}, nil, nil, &res)
	if err != nil {
		return failed(res, err)
	}
	return res
}

// faultRestartOlder: Redis comes back older (an RDB snapshot taken
// mid-load, then SIGKILL and a restart from it): the risk of running
// without durability, which the store can't see.
func faultRestartOlder(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
	res := faultResult{name: "restart from an older RDB snapshot", mode: "none: shows the risk"}
	srv, err := redistest.StartArgs(procs)
	if err != nil {
		return failed(res, err)
	}
	defer srv.Stop()
	opts, _ := c.durability("none")
	stores, closeStores := storesOn(srv.Addr, c.servers(), opts)
	defer closeStores()
	r, err := newRig(stores, c.browsers(), c.short)
	if err != nil {
		return failed(res, err)
	}
	defer r.Close()
	side := redisClient(srv.Addr)
	defer side.Close()
	err = runLoad(ctx, r, c.load(), func(ctx context.Context) (time.Time, error) {
		if err := side.Save(ctx).Err(); err != nil {
			return time.Time{}, err
		}
		r.performPending(ctx)  // approvals in the snapshot, used after it
		pause(ctx, c.load()/3) // and more cycles after the snapshot
		srv.Kill()
		err := srv.Restart()
		return time.Now(), err
	}, nil, nil, &res)
	if err != nil {
		return failed(res, err)
	}
	return res
}

// faultStall: SIGSTOP mid-load, SIGCONT after stall, longer than the
// kit's StoreTimeout and the durability timeout. Gated requests must fail closed in bounded
// time; ungated ones never touch the store. The pending approvals are
// repeated as the stall starts: Takes that Redis runs only after SIGCONT,
// when their web servers have given up on them, and whose claims must not
// be stranded.
func faultStall(stall time.Duration) func(context.Context, *redistest.Procs, faultsConfig) faultResult {
	return func(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
		res := faultResult{name: fmt.Sprintf("stalled Redis %v (SIGSTOP, SIGCONT)", stall), mode: "disk: appendfsync always", durable: true}
		srv, r, stop, err := diskRig(procs, c)
		if err != nil {
			return failed(res, err)
		}
		defer stop()
		var ordinaryMax time.Duration
		err = runLoad(ctx, r, c.load()+stall, func(ctx context.Context) (time.Time, error) {
			if err := srv.Pause(); err != nil {
				return time.Time{}, err
			}
			var wg sync.WaitGroup
			wg.Go(func() { r.performPending(ctx) }) // Takes Redis runs after SIGCONT
			// Ordinary browsers during the stall.
			end := time.Now().Add(stall)
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				t := time.Now()
				post(ctx, r.client, r.urls[i%len(r.urls)], "ord_plain", nil)
				ordinaryMax = max(ordinaryMax, time.Since(t))
				pause(ctx, 50*time.Millisecond)
			}
			err := srv.Resume()
			healed := time.Now()
			wg.Wait()
			return healed, err
		}, nil, nil, &res)
		if err != nil {
			return failed(res, err)
		}
		res.note = join(res.note, fmt.Sprintf("ungated requests at most %v", ordinaryMax.Round(time.Millisecond)))
		return res
	}
}

// faultLaggingReplica: the replica stops receiving (SIGSTOP) while the
// master acknowledges claims; the master dies; the replica, promoted,
// takes over behind the same address. With durability "replicas 1" no
// claim is confirmed without the replica, so nothing performed is lost.
func faultLaggingReplica(mode string) func(context.Context, *redistest.Procs, faultsConfig) faultResult {
	return func(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
		res := faultResult{name: "lagging replica promoted", mode: mode, durable: mode != "none"}
		opts, why := c.durability(mode)
		if why != "" {
			res.skipped = why
			return res
		}
		if mode == "none" {
			res.mode = "none: shows the risk"
		}
		master, err := redistest.StartArgs(procs)
		if err != nil {
			return failed(res, err)
		}
		defer master.Stop()
		// The replica replicates through a proxy that can hold the stream
		// back: a paused process would still get it from its socket buffer.
		link, err := newProxy(master.Addr)
		if err != nil {
			return failed(res, err)
		}
		defer link.Close()
		replica, err := redistest.StartArgs(procs, "--replicaof", "127.0.0.1", link.Addr()[strings.LastIndexByte(link.Addr(), ':')+1:])
		if err != nil {
			return failed(res, err)
		}
		defer replica.Stop()
		lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
		err = redistest.WaitLinked(lctx, replica.Addr)
		lcancel()
		if err != nil {
			return failed(res, err)
		}
		px, err := newProxy(master.Addr)
		if err != nil {
			return failed(res, err)
		}
		defer px.Close()
		stores, closeStores := storesOn(px.Addr(), c.servers(), opts)
		defer closeStores()
		r, err := newRig(stores, c.browsers(), c.short)
		if err != nil {
			return failed(res, err)
		}
		defer r.Close()
		// With "replicas 1" the promoted replica confirms no claim until it
		// has a replica of its own: the operator adds one.
		var repair func(context.Context) error
		var defers []func()
		defer func() {
			for _, f := range defers {
				f()
			}
		}()
		if mode != "none" {
			repair = func(context.Context) error {
				fresh, err := redistest.StartReplica(procs, replica)
				if err == nil {
					defers = append(defers, fresh.Stop)
				}
				return err
			}
		}
		err = runLoad(ctx, r, c.load(), func(ctx context.Context) (time.Time, error) {
			// The pending approvals are on the replica too: a write after
			// them acknowledged by it says so.
			mc := redisClient(master.Addr)
			defer mc.Close()
			if err := mc.Set(ctx, "opsgate-faults:sync", "1", time.Minute).Err(); err != nil {
				return time.Time{}, err
			}
			if n, err := mc.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
				return time.Time{}, fmt.Errorf("replica never acknowledged: %d, %v", n, err)
			}
			link.hold.Store(true)
			r.performPending(ctx)  // claims the master acknowledges and the replica never gets
			pause(ctx, c.load()/3) // and more cycles
			master.Kill()
			link.Close() // what it held is lost with the master
			rc := redisClient(replica.Addr)
			defer rc.Close()
			if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				return time.Time{}, fmt.Errorf("promote: %w", err)
			}
			px.switchTo(replica.Addr)
			return time.Now(), nil
		}, nil, repair, &res)
		if err != nil {
			return failed(res, err)
		}
		return res
	}
}

// durability returns the store options of a durability mode.
func (c faultsConfig) durability(mode string) (redisstore.Options, string) {
	return durabilityOptions(mode)
}

// durabilityOptions returns the store options of a durability mode.
func durabilityOptions(mode string) (redisstore.Options, string) {
	switch mode {
	case "none":
		return redisstore.Options{Durability: redisstore.DurableNone}, ""
	case "disk":
		return redisstore.Options{Durability: redisstore.DurableDisk}, ""
	case "replicas 1":
		return redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1}, ""
	}
	return redisstore.Options{}, fmt.Sprintf("no durability mode %q", mode)
}

// aofAlways are the arguments of a redis-server on which durability
// "disk" holds on Redis 7.0: every write is on disk before Redis answers.
var aofAlways = []string{"--appendonly", "yes", "--appendfsync", "always"}

// faultClusterKill: a Cluster master SIGKILLed mid-load; its replica is
// promoted after the node timeout. Recovery is measured for the browsers
// whose slot the dead master served.
func faultClusterKill(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
	res := faultResult{name: "Cluster master killed, replica promoted", mode: "replicas 1", durable: true}
	opts, _ := c.durability("replicas 1")
	nodeTimeout := time.Second
	cn, err := redistest.StartCluster(procs, 3, 1, nodeTimeout)
	if err != nil {
		return failed(res, err)
	}
	defer func() { // the nodes go with the scenario, not at the end of the run
		for _, n := range append(cn.Masters, cn.Replicas...) {
			n.Stop()
		}
	}()
	var stores []store.Store
	for range c.servers() {
		cc := redis.NewClusterClient(redisstore.ClusterOptions(cn.Addrs()...)) // the store's documented Cluster options
		defer cc.Close()
		stores = append(stores, redisstore.New(cc, opts))
	}
	r, err := newRig(stores, c.browsers()*2, c.short) // enough browsers on every master
	if err != nil {
		return failed(res, err)
	}
	defer r.Close()
	// Which browsers the master to be killed serves.
	victim := cn.Masters[0]
	side := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cn.Addrs()})
	defer side.Close()
	onVictim := map[int]bool{}
	for b, o := range r.owners {
		m, err := side.MasterForKey(ctx, "{"+storekit.Slot(o.Agent, o.User)+"}")
		if err != nil {
			return failed(res, err)
		}
		onVictim[b] = m.Options().Addr == victim.Addr
	}
	var promoted atomic.Int64 // how long after the kill the victim's replica became master
	err = runLoad(ctx, r, c.load()+nodeTimeout*3, func(ctx context.Context) (time.Time, error) {
		r.performPending(ctx)
		victim.Kill()
		killed := time.Now()
		go func() { // bounded: 20 s at most
			rc := redis.NewClient(&redis.Options{Addr: cn.Replicas[0].Addr})
			defer rc.Close()
			for time.Since(killed) < 20*time.Second && ctx.Err() == nil {
				if info, err := rc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
					promoted.Store(int64(time.Since(killed)))
					return
				}
				pause(ctx, 20*time.Millisecond)
			}
		}()
		// The replica's promotion is the cluster's job: recovery counts
		// from the kill.
		return time.Now(), nil
	}, func(b int) bool { return onVictim[b] }, func(ctx context.Context) error {
		// The old master comes back, as a replica of the promoted one, so
		// that durability "replicas 1" can confirm claims on its slots.
		if err := victim.Restart(); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return redistest.WaitLinked(wctx, victim.Addr)
	}, &res)
	if err != nil {
		return failed(res, err)
	}
	p := time.Duration(promoted.Load())
	promotedAt := "not seen within 20 s"
	if p > 0 {
		promotedAt = p.Round(time.Millisecond).String()
	}
	res.note = join(res.note, fmt.Sprintf("3 masters + 3 replicas, node timeout %v; recovery of the dead master's browsers counted from the kill, its replica promoted after %s; the old master restarted as a replica before the drain", nodeTimeout, promotedAt))
	return res
}

// faultWebServerKilled: a web server dies in the handler (it never
// returns, and its store connection is gone). The operation stays
// performing: its repeats on the other servers must not perform it again.
//
// It sends no API or MCP traffic: its one step is every browser's
// approved request held in the doomed server's handler, which has no
// cycles for a quarter of them to go through the agents' interfaces, and
// the reconciliation it then runs settles what the website's handler
// counted. The API's and the tool's repeats against a dead handler are
// the same Take as the page's.
func faultWebServerKilled(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
	res := faultResult{name: "web server killed mid-handler", mode: "disk: appendfsync always", durable: true}
	srv, err := redistest.StartArgs(procs, aofAlways...)
	if err != nil {
		return failed(res, err)
	}
	defer srv.Stop()
	opts, _ := c.durability("disk")
	// The doomed server has a client of its own, closed when it "dies".
	doomedClient := redisClient(srv.Addr)
	stores, closeStores := storesOn(srv.Addr, c.servers(), opts)
	defer closeStores()
	stores = append(stores, redisstore.New(doomedClient, opts))
	r, err := newRig(stores, c.browsers(), c.short)
	if err != nil {
		doomedClient.Close()
		return failed(res, err)
	}
	defer r.Close()
	r.noIfc, res.noIfc = true, true
	doomed := len(stores) - 1
	r.block = make(chan struct{})
	r.blockOnly.Store(int32(doomed + 1))
	// Each browser asks, is approved, and sends its request to the doomed
	// server; the handler starts (a performance: it may have taken effect).
	var started sync.WaitGroup
	for b := range r.cookies {
		order := fmt.Sprintf("ord_killed_%d", b)
		status, ref, err := r.request(ctx, 0, b, order)
		if err != nil || status != 403 {
			doomedClient.Close()
			return failed(res, fmt.Errorf("ask: %d, %v", status, err))
		}
		r.approve(ctx, 0, b, order, ref)
		started.Go(func() { r.request(ctx, doomed, b, order) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.runs)
		r.mu.Unlock()
		if n == len(r.cookies) {
			break
		}
		pause(ctx, 10*time.Millisecond)
	}
	// The server dies: connections cut, its store client gone.
	killed := time.Now()
	doomedClient.Close()
	r.servers[doomed].CloseClientConnections()
	started.Wait()
	// Its repeats on the live servers: never performed again.
	r.urls = r.urls[:doomed]
	r.drain(ctx)
	rec, _ := r.probe(ctx, killed, 10*time.Second, nil)
	res.recovery = rec
	r.tally(&res)
	left := r.leftPerforming(ctx, stores[0], killed.Add(max(rec, 0)+settleAfter))
	stuck := left.midHandler
	res.lost = 0 // their approvals were used by a handler that started: outcome unknown, not lost
	// The reconciliation job: every operation performing for a while is
	// settled from the website's own records (here, the handler's count).
	rc := stores[0]
	resolved := 0
	now := time.Now()
	for st, err := range rc.Performing(ctx, now, now) {
		if err != nil {
			res.note = fmt.Sprintf("Performing: %v", err)
			return res
		}
		r.mu.Lock()
		outcome := map[bool]store.Outcome{true: store.OutcomePerformed, false: store.OutcomeNotPerformed}[r.runs[st.Operation.ID] > 0]
		r.mu.Unlock()
		if err := rc.Resolve(ctx, st.Owner, st.Operation.ID, outcome, "fault suite reconciler", time.Now()); err == nil {
			resolved++
		}
	}
	// Repeats after the reconciliation: still never performed again.
	r.drain(ctx)
	res.performed, res.doubles, res.maxWait = 0, 0, 0
	r.tally(&res)
	res.lost = 0
	res.stranded, res.stuck = left.stranded, left.stuck
	res.note = join(fmt.Sprintf("%d operations left performing with the handler still in it, outcome unknown; %d settled by Resolve; %d performing after", stuck, resolved, r.stuckPerforming(ctx, stores[0])), left.note)
	return res
}

// lostStates says what became of the operations of confirmed approvals
// never performed: performing is a stranded claim (nobody released or
// finished it); waiting with the approval used up is an approval spent
// without a performance; not found is data Redis lost.
func (r *rig) lostStates(ctx context.Context) string {
	r.mu.Lock()
	var todo []approval
	for id, a := range r.approved {
		if a.confirmed && r.runs[id] == 0 {
			todo = append(todo, a)
		}
	}
	r.mu.Unlock()
	states := map[string]int{}
	for _, a := range todo {
		rec, found, err := storedriver.Steps(r.stores[0]).Lookup(ctx, r.owners[a.browser], a.ref, time.Now())
		switch {
		case err != nil:
			states["unreadable"]++
		case !found:
			states["not found"]++
		case rec.Status == storedriver.StatusWaiting && len(rec.Approvals) > 0 && !rec.Approvals[len(rec.Approvals)-1].UsedAt.IsZero():
			states["waiting, approval used up"]++
		default:
			states[string(rec.Status)]++
		}
	}
	var out []string
	for _, k := range slices.Sorted(mapKeys(states)) {
		out = append(out, fmt.Sprintf("%d %s", states[k], k))
	}
	return strings.Join(out, ", ")
}

// settleAfter is how long after recovery an operation may still be
// performing before it counts as stuck: the kit's retried Release and
// Finish have had their chance by then.
const settleAfter = 10 * time.Second

// performingLeft is what is left performing after a fault, by what the
// handler did (counted at the handler, by operation ID).
type performingLeft struct {
	stranded   int // the handler never ran
	stuck      int // the handler returned: its Finish never landed
	midHandler int // the handler started and never returned (a dead web server)
	note       string
}

func (p performingLeft) into(res *faultResult) {
	res.stranded, res.stuck = p.stranded, p.stuck
	if p.midHandler > 0 {
		res.note = join(res.note, fmt.Sprintf("%d performing with the handler still in it", p.midHandler))
	}
	res.note = join(res.note, p.note)
}

// leftPerforming waits until nothing is performing but operations whose
// handler started and never returned, or until deadline, whichever comes
// first, and then counts what is left: every operation Store.Performing
// lists, and every approved operation Lookup finds performing. It says
// when the two disagree. Call it once no request is in flight: nothing
// then becomes performing, and only the kit's retries (Release, Finish)
// settle what is.
func (r *rig) leftPerforming(ctx context.Context, st store.Store, deadline time.Time) performingLeft {
	var left performingLeft
	for {
		listed, err := performingIDs(ctx, st)
		if err != nil {
			left.note = fmt.Sprintf("Performing: %v", err)
		}
		waiting := 0
		for id := range listed {
			if s := r.handlerState(id); s != handlerDied {
				waiting++
			}
		}
		if waiting == 0 && err == nil || !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		pause(ctx, 250*time.Millisecond)
	}
	listed, err := performingIDs(ctx, st)
	if err != nil {
		left.note = fmt.Sprintf("Performing: %v", err)
	}
	looked, unreadable := r.lookupPerforming(ctx, st)
	all := map[string]bool{}
	for id := range listed {
		all[id] = true
	}
	for id := range looked {
		all[id] = true
	}
	for id := range all {
		switch r.handlerState(id) {
		case handlerNeverRan:
			left.stranded++
		case handlerReturned:
			left.stuck++
		default:
			left.midHandler++
		}
	}
	missed, extra := 0, 0
	for id := range looked {
		if !listed[id] {
			missed++
		}
	}
	for id := range listed {
		if !looked[id] && !r.isIfcOp(id) {
			extra++ // performing, but no approval the rig knows of
		}
	}
	if missed > 0 || extra > 0 {
		left.note = join(left.note, fmt.Sprintf("Performing listed %d, Lookup found %d performing: %d missed by Performing, %d not among the approvals", len(listed), len(looked), missed, extra))
	}
	if unreadable > 0 {
		left.note = join(left.note, fmt.Sprintf("%d approved operations unreadable at the count", unreadable))
	}
	return left
}

// isIfcOp reports whether operation id was asked through the API or MCP
// (its approval is the agent's, on the repeat: Lookup of the website's
// approvals does not see it).
func (r *rig) isIfcOp(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ifcOps[id]
}

type handlerState int

const (
	handlerNeverRan handlerState = iota
	handlerReturned
	handlerDied // started, never returned
)

// handlerState says what the handler did for operation id.
func (r *rig) handlerState(id string) handlerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.runs[id] == 0:
		return handlerNeverRan
	case r.returned[id] > 0:
		return handlerReturned
	}
	return handlerDied
}

// performingIDs returns the operations st.Performing lists, every one
// claimed before now.
func performingIDs(ctx context.Context, st store.Store) (map[string]bool, error) {
	ids := map[string]bool{}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := time.Now()
	for s, err := range st.Performing(ctx, now, now) {
		if err != nil {
			return ids, err
		}
		ids[s.Operation.ID] = true
	}
	return ids, nil
}

// lookupPerforming returns the approved operations Lookup finds
// performing, and how many it could not read.
func (r *rig) lookupPerforming(ctx context.Context, st store.Store) (map[string]bool, int) {
	r.mu.Lock()
	todo := make([]approval, 0, len(r.approved))
	for id, a := range r.approved {
		a.id = id
		todo = append(todo, a)
	}
	r.mu.Unlock()
	ids := map[string]bool{}
	unreadable := 0
	for _, a := range todo {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		rec, found, err := storedriver.Steps(st).Lookup(lctx, r.owners[a.browser], a.ref, time.Now())
		cancel()
		switch {
		case err != nil:
			unreadable++
		case found && rec.Status == storedriver.StatusPerforming:
			ids[a.id] = true
		}
	}
	return ids, unreadable
}

// stuckPerforming counts the approved operations that are performing.
func (r *rig) stuckPerforming(ctx context.Context, st store.Store) int {
	r.mu.Lock()
	todo := make([]approval, 0, len(r.approved))
	for _, a := range r.approved {
		todo = append(todo, a)
	}
	r.mu.Unlock()
	n := 0
	for _, a := range todo {
		rec, found, err := storedriver.Steps(st).Lookup(ctx, r.owners[a.browser], a.ref, time.Now())
		if err == nil && found && rec.Status == storedriver.StatusPerforming {
			n++
		}
	}
	return n
}

// faultLostReply: a proxy in front of Redis drops every reply for loss:
// Takes, Releases
// and Finishes that ran in Redis never reach the Gate, and the clients
// time out and reconnect, into the same loss.
func faultLostReply(loss time.Duration) func(context.Context, *redistest.Procs, faultsConfig) faultResult {
	return func(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
		res := faultResult{name: fmt.Sprintf("replies lost %v after Take (proxy drops them)", loss), mode: "disk: appendfsync always", durable: true}
		srv, err := redistest.StartArgs(procs, aofAlways...)
		if err != nil {
			return failed(res, err)
		}
		defer srv.Stop()
		opts, _ := c.durability("disk")
		px, err := newProxy(srv.Addr)
		if err != nil {
			return failed(res, err)
		}
		defer px.Close()
		stores, closeStores := storesOn(px.Addr(), c.servers(), opts)
		defer closeStores()
		r, err := newRig(stores, c.browsers(), c.short)
		if err != nil {
			return failed(res, err)
		}
		defer r.Close()
		err = runLoad(ctx, r, c.load()+loss, func(ctx context.Context) (time.Time, error) {
			px.drop.Store(true)
			var wg sync.WaitGroup
			wg.Go(func() { r.performPending(ctx) }) // Takes that claim, whose replies are lost
			pause(ctx, loss)
			px.drop.Store(false)
			px.cut() // the clients' connections are out of step: they reconnect
			healed := time.Now()
			wg.Wait()
			return healed, nil
		}, nil, nil, &res)
		if err != nil {
			return failed(res, err)
		}
		return res
	}
}

// faultKillMidHandler: Redis SIGKILLed while handlers run (each takes
// 200 ms during the fault), down for 3 s,
// then restarted from its AOF (appendfsync always). The handlers that
// were running return while Redis is away: their Finish fails, and must
// land once Redis is back; Takes sent meanwhile fail closed.
func faultKillMidHandler(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
	down := 3 * time.Second // longer than the kit's store calls retry
	res := faultResult{name: fmt.Sprintf("SIGKILL mid-handler, down %v, restart with AOF", down), mode: "disk: appendfsync always", durable: true}
	srv, r, stop, err := diskRig(procs, c)
	if err != nil {
		return failed(res, err)
	}
	defer stop()
	inHandler := 0
	err = runLoad(ctx, r, c.load()+down, func(ctx context.Context) (time.Time, error) {
		r.delay.Store(int64(200 * time.Millisecond))
		defer r.delay.Store(0)
		r.mu.Lock()
		before := len(r.runs)
		r.mu.Unlock()
		var wg sync.WaitGroup
		wg.Go(func() { r.performPending(ctx) })
		// Kill once a batch of handlers is running (at most 2 s).
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			r.mu.Lock()
			n := len(r.runs) - before
			r.mu.Unlock()
			if n >= len(r.pending)/2 {
				break
			}
			pause(ctx, 5*time.Millisecond)
		}
		srv.Kill()
		r.mu.Lock()
		for id, n := range r.runs {
			if n > r.returned[id] {
				inHandler++
			}
		}
		r.mu.Unlock()
		pause(ctx, down)
		err := srv.Restart()
		healed := time.Now()
		wg.Wait()
		return healed, err
	}, nil, nil, &res)
	if err != nil {
		return failed(res, err)
	}
	res.note = join(res.note, fmt.Sprintf("%d handlers running at the kill", inHandler))
	return res
}

// faultMasterRestart: DurableReplicas{Replicas: 1} on a master with one
// replica; the master is SIGKILLed right after a batch of claims and
// restarted without a failover, from what it persisted; the replica
// resyncs from it.
//
//   - "aof": the master has appendfsync always (what Check requires for
//     DurableReplicas): it comes back with every claim. Durable.
//   - "rdb": the master snapshots every second (save 1 1): it comes back
//     with its last snapshot, and so does the replica. Check says whether
//     it vouches for that; the scenario counts as durable only if it does.
//   - "restored": an RDB copy taken 3 s before the kill is put back
//     before the restart, as a restored backup would be: outside what any
//     mode promises (the redisstore package doc says so).
func faultMasterRestart(persist string) func(context.Context, *redistest.Procs, faultsConfig) faultResult {
	return func(ctx context.Context, procs *redistest.Procs, c faultsConfig) faultResult {
		res := faultResult{name: "master SIGKILL + restart, no failover", mode: "replicas 1, master appendfsync always"}
		args := aofAlways
		switch persist {
		case "rdb":
			res.mode = "replicas 1, master RDB (save 1 1)"
			args = []string{"--save", "1 1"}
		case "restored":
			res.name = "master restored from an RDB copy 3 s older"
			res.mode = "replicas 1: a backup, outside every promise"
			args = []string{"--save", "1 1"}
		}
		opts, _ := c.durability("replicas 1")
		master, err := redistest.StartArgs(procs, args...)
		if err != nil {
			return failed(res, err)
		}
		defer master.Stop()
		replica, err := redistest.StartReplica(procs, master)
		if err != nil {
			return failed(res, err)
		}
		defer replica.Stop()
		side := redisClient(master.Addr)
		defer side.Close()
		checkErr := redisstore.New(side, opts).Check(ctx)
		res.durable = checkErr == nil && persist != "restored"
		verdict := "Check ok"
		if checkErr != nil {
			verdict = "Check refuses: " + firstClause(checkErr.Error())
		}
		res.note = verdict
		stores, closeStores := storesOn(master.Addr, c.servers(), opts)
		defer closeStores()
		r, err := newRig(stores, c.browsers(), c.short)
		if err != nil {
			return failed(res, err)
		}
		defer r.Close()
		backup := procs.TempDir()
		var resynced time.Duration
		var restarted time.Time
		var linked sync.WaitGroup
		d := c.load()
		if persist == "restored" {
			d += 3 * time.Second
		}
		err = runLoad(ctx, r, d, func(ctx context.Context) (time.Time, error) {
			var copied time.Time
			if persist == "restored" {
				// The backup: a snapshot with the pending approvals, not yet used.
				if err := snapshot(ctx, side); err != nil {
					return time.Time{}, err
				}
				if err := copyFile(filepath.Join(master.Dir(), "dump.rdb"), filepath.Join(backup, "dump.rdb")); err != nil {
					return time.Time{}, err
				}
				copied = time.Now()
			}
			r.performPending(ctx) // claims confirmed by the replica
			if persist == "restored" {
				pause(ctx, time.Until(copied.Add(3*time.Second))) // and 3 s of cycles
			}
			master.Kill()
			if persist == "restored" {
				if err := copyFile(filepath.Join(backup, "dump.rdb"), filepath.Join(master.Dir(), "dump.rdb")); err != nil {
					return time.Time{}, err
				}
			}
			if err := master.Restart(); err != nil {
				return time.Time{}, err
			}
			restarted = time.Now()
			// The replica reconnects and resyncs on its own, while the
			// load goes on; claims wait for it.
			linked.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				if err := redistest.WaitLinked(wctx, replica.Addr); err == nil {
					resynced = time.Since(restarted)
				}
			})
			return restarted, nil
		}, nil, func(context.Context) error {
			linked.Wait() // the drain after the replica is back (or 20 s)
			return nil
		}, &res)
		if err != nil {
			return failed(res, err)
		}
		link := "replica not linked again within 20 s"
		if resynced > 0 {
			link = fmt.Sprintf("replica linked again %v after the restart", resynced.Round(time.Millisecond))
		}
		served := "no claim performed after the restart"
		if d := r.firstPerformedAfter(restarted); d >= 0 {
			served = fmt.Sprintf("first claim performed %v after it", d.Round(time.Millisecond))
		}
		res.note = join(res.note, link+", "+served)
		return res
	}
}

// checkServer is a server's address in Check's error, and what follows.
var checkServer = regexp.MustCompile(`\S+:\d+: `)

// firstClause returns the gist of a long error from Check: what follows
// the first server address ("127.0.0.1:6379: "), up to its first " (" or
// ": ".
func firstClause(s string) string {
	if m := checkServer.FindStringSubmatchIndex(s); m != nil {
		s = s[m[1]:]
	}
	for _, sep := range []string{" (", ": "} {
		if i := strings.Index(s, sep); i > 0 {
			s = s[:i]
		}
	}
	return s
}

// snapshot has c's server write its RDB now (SAVE), after the background
// save its schedule may be running.
func snapshot(ctx context.Context, c *redis.Client) error {
	for deadline := time.Now().Add(10 * time.Second); ; pause(ctx, 10*time.Millisecond) {
		err := c.Save(ctx).Err()
		if err == nil || !strings.Contains(err.Error(), "in progress") || time.Now().After(deadline) {
			return err
		}
	}
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}
