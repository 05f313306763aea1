package main

// -ceiling: the store's throughput beside Redis's own ceiling on the same
// machine, in one run, so that the ratios mean something on any machine.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

type ceilingConfig struct {
	redisURL  string
	duration  time.Duration // each throughput measurement
	memoryOps int           // performed operations for bytes/op
	approvals int           // approval requests (and bare checks) timed
	rounds    int           // each throughput figure is the best of this many
	// durabilityClaims is how many claims are timed in each durability
	// mode (only on servers the tool starts); 0 skips it.
	durabilityClaims int
	// pipelines is the measured store's Options.Pipelines.
	pipelines int
	out       *bytes.Buffer // nil: stdout
}

// ceilingResult is what the last line reports, for tests.
type ceilingResult struct {
	takeRatio, cycleRatio, approvalRatio float64
	bytesPerOp                           float64
	// approvalCPURatio is the approval request's CPU (this process and
	// redis-server) over the bare checks'; 0 where the tool can't read
	// its CPU time.
	approvalCPURatio float64
	// approvalFloorRatio is approvalCosts.floor against the bare checks:
	// what approvalRatio can't go below on this machine.
	approvalFloorRatio float64
	// takeUsec is the server CPU per Take at 50 goroutines.
	takeUsec float64
}

// returnOne is the script redis-benchmark runs: Redis's ceiling for one
// script call.
const returnOne = "return 1"

func runCeiling(ctx context.Context, c ceilingConfig) (ceilingResult, error) {
	var res ceilingResult
	say := func(format string, args ...any) {
		if c.out != nil {
			fmt.Fprintf(c.out, format, args...)
		} else {
			fmt.Printf(format, args...)
		}
	}
	var opts *redis.Options
	var procs *redistest.Procs // the servers the tool started; nil with -redis
	where := ""
	if c.redisURL != "" {
		o, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return res, fmt.Errorf("-redis: %w", err)
		}
		opts, where = o, "at "+o.Addr
	} else {
		var err error
		procs, err = redistest.NewProcs()
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
	opts.PoolSize = 64 // 50 goroutines each with its own connection, as 50 clients
	client := redis.NewClient(opts)
	defer client.Close()
	version := infoField(ctx, client, "server", "redis_version")
	say("opsgate ceiling: redis-server %s %s; %d CPUs (GOMAXPROCS %d), redis-benchmark and this tool run on the same machine\n",
		version, where, runtime.NumCPU(), runtime.GOMAXPROCS(0))

	// A fresh prefix on a shared Redis, as short as the default
	// "opsgate:" so that keys have the size they have in a deployment;
	// every key has a TTL (waiting operations expire with their 10-minute
	// lifetime, performed ones with the 15-minute retention set here: the
	// records' size doesn't depend on it).
	prefix := fmt.Sprintf("oc%06x:", time.Now().UnixNano()&0xffffff)
	// Durability "none": the scripts' own cost, beside the ceiling (a
	// durable mode adds an fsync or a replica's round trip per claim).
	st := redisstore.New(client, redisstore.Options{Prefix: prefix, Retention: 15 * time.Minute, Durability: redisstore.DurableNone,
		// The ceiling measures the store's steps, not its caps: its Users
		// open far more operations than the default caps of open ones (the
		// overall ones too: -ops alone is 100,000, the default MaxOpen);
		// the overall counts are still kept, out of reach.
		MaxOpenPerOwner: 1 << 30, MaxOpenPerAgent: -1, MaxOpen: 1 << 30, MaxReplayMarkers: 1 << 30, Pipelines: c.pipelines})
	// The same with the agent's cap on (as by default; its cap set out of
	// reach): an operation stored is counted in the same step on a single
	// Redis; a computed 403 stores, and counts, nothing. Its 64 agents
	// have a prefix of their own.
	capped := redisstore.New(client, redisstore.Options{Prefix: prefix[:len(prefix)-1] + "c:", Retention: 15 * time.Minute, Durability: redisstore.DurableNone,
		MaxOpenPerOwner: 1 << 30, MaxOpenPerAgent: 1 << 30, MaxOpen: 1 << 30, MaxReplayMarkers: 1 << 30, Pipelines: c.pipelines})
	pipes := "Options.Pipelines default"
	if c.pipelines != 0 {
		pipes = fmt.Sprintf("Options.Pipelines %d", c.pipelines)
	}
	say("the store: functions where the server has them, durability none, %s\n", pipes)
	for _, s := range []*redisstore.Store{st, capped} {
		if err := s.Load(ctx); err != nil {
			return res, err
		}
	}

	// Redis's own ceiling and the store's steps, measured in turn for
	// several rounds; each figure is its best round, the one least
	// disturbed by whatever else the machine runs.
	sha, err := client.ScriptLoad(ctx, returnOne).Result()
	if err != nil {
		return res, err
	}
	// The store: Take (the 403 step: nothing approved, an operation issued)
	// and the whole cycle Take→Record→Take→Finish, 4 steps.
	agent := "https://agent.example/ceiling"
	// The harness's own work per step is kept small (no fmt): it shares
	// the cores with Redis and the store's client, so what it spends is
	// not the store's.
	owners := make([][64]store.Owner, 64)
	for g := range owners {
		for i := range owners[g] {
			owners[g][i] = store.Owner{Agent: agent, User: "usr_" + strconv.Itoa(g) + "_" + strconv.Itoa(i)}
		}
	}
	owner := func(g, i int) store.Owner { return owners[g%64][i%64] }
	var phase atomic.Int64 // distinct action keys in every phase
	action := func(g, i int) storedriver.TakeRequest {
		id := strconv.FormatInt(phase.Load(), 10) + "_" + strconv.Itoa(g) + "_" + strconv.Itoa(i)
		return storedriver.TakeRequest{
			Key:      "exchange:" + id,
			Terms:    []byte(`{"order_id":"ord_` + id + `","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`),
			Summary:  "Exchange the jacket on order " + strconv.Itoa(i) + " for $70.00 more.",
			Lifetime: 10 * time.Minute,
		}
	}
	take := func(ctx context.Context, g, i int) (int, error) {
		r, err := storedriver.Steps(st).Take(ctx, owner(g, i), action(g, i), time.Now())
		if err == nil && r.Ref == "" {
			err = fmt.Errorf("take of a new action: %+v", r)
		}
		return 1, err
	}
	agents := make([][64]store.Owner, 64)
	for g := range agents {
		for i := range agents[g] {
			agents[g][i] = store.Owner{Agent: agent + "/" + strconv.Itoa(g), User: "usr_" + strconv.Itoa(i)}
		}
	}
	takeCapped := func(ctx context.Context, g, i int) (int, error) {
		r, err := storedriver.Steps(capped).Take(ctx, agents[g%64][i%64], action(g, i), time.Now())
		if err == nil && r.Ref == "" {
			err = fmt.Errorf("take of a new action: %+v", r)
		}
		return 1, err
	}
	cycle := func(ctx context.Context, g, i int) (int, error) {
		return cycleSteps(ctx, st, owner(g, i), action(g, i))
	}
	type figure struct {
		rate, usec float64 // best rate, and the server CPU per step in that round
		rates      []float64
		how        string
	}
	figures := map[string]*figure{}
	best := func(key string, rate, usec float64, how string) {
		f := figures[key]
		if f == nil {
			f = &figure{}
			figures[key] = f
		}
		f.rates = append(f.rates, rate)
		if rate > f.rate {
			f.rate, f.usec, f.how = rate, usec, how
		}
	}
	// Bytes per retained performed operation, measured first, while the
	// keyspace holds only what was there before the tool: the throughput
	// rounds leave hundreds of thousands of waiting operations, and a
	// keyspace that large doubles its hash table (a transient of several
	// MB) at moments that would land in this figure.
	phase.Add(1)
	before, err := usedMemory(ctx, client)
	if err != nil {
		return res, err
	}
	_, n, err := stepRate(ctx, 50, 0, 4*c.memoryOps, cycle)
	if err != nil {
		return res, fmt.Errorf("memory: %w", err)
	}
	after, err := usedMemory(ctx, client)
	if err != nil {
		return res, err
	}
	memOps, memBytes := n/4, after-before
	res.bytesPerOp = float64(memBytes) / float64(memOps)
	kinds, err := keyBreakdown(ctx, client, prefix, memOps)
	if err != nil {
		return res, fmt.Errorf("memory: %w", err)
	}

	// The approval request against the two bare signature checks,
	// measured before the throughput rounds too: they leave over a million
	// waiting operations whose keyspace Redis then rehashes and samples
	// for expiry in the background, which lands in a one-at-a-time
	// latency.
	ac, err := approvalCost(ctx, st, client, c.approvals)
	if err != nil {
		return res, fmt.Errorf("approval: %w", err)
	}

	// This tool's own ceiling: go-redis calling "return 1" with a Take's
	// keys and arguments, as the store calls its steps (FCALL where the
	// server has functions). The Go client shares the machine's cores with
	// Redis, so the store's steps can't run faster than this however cheap
	// their scripts are.
	emptyTake, cleanup := clientCeiling(ctx, client)
	defer cleanup()
	for range c.rounds {
		for _, clients := range []int{1, 50} {
			before := scriptStats(ctx, client)
			rate, how, err := evalshaRate(ctx, opts, client, sha, clients, c.duration)
			if err != nil {
				return res, err
			}
			best(fmt.Sprint("evalsha", clients), rate, scriptStats(ctx, client).usecPerCall(before), how)
			rate, _, err = stepRate(ctx, clients, c.duration, 0, emptyTake)
			if err != nil {
				return res, fmt.Errorf("go-redis ceiling: %w", err)
			}
			best(fmt.Sprint("client", clients), rate, 0, "")
		}
		// The floor: what the least a step that opens an operation writes
		// costs Redis, driven by redis-benchmark (no Go client in the way).
		if rate, usec, ok, err := floorRate(ctx, opts, client, prefix, 50, c.duration); err != nil {
			return res, fmt.Errorf("floor: %w", err)
		} else if ok {
			best("floor50", rate, usec, "")
		}
		for _, m := range []struct {
			name   string
			step   func(context.Context, int, int) (int, error)
			server *redis.Client
		}{{"take", take, client}, {"cycle", cycle, client}, {"take+cap", takeCapped, client}} {
			for _, g := range []int{1, 50} {
				phase.Add(1)
				before := scriptStats(ctx, m.server)
				rate, n, err := stepRate(ctx, g, c.duration, 0, m.step)
				if err != nil {
					return res, fmt.Errorf("%s: %w", m.name, err)
				}
				best(fmt.Sprint(m.name, g), rate, scriptStats(ctx, m.server).usecSince(before)/float64(n), "")
			}
		}
	}
	spread := func(f *figure) string {
		return fmt.Sprintf("rounds %.0f–%.0f", slices.Min(f.rates), slices.Max(f.rates))
	}
	evalsha := map[int]float64{}
	for _, clients := range []int{1, 50} {
		f := figures[fmt.Sprint("evalsha", clients)]
		evalsha[clients] = f.rate
		say("evalsha return 1  %2d clients     %9.0f calls/s  %5.1f µs server CPU per call  (%s; %s)\n", clients, f.rate, f.usec, f.how, spread(f))
	}
	client50 := figures["client50"].rate
	for _, clients := range []int{1, 50} {
		f := figures[fmt.Sprint("client", clients)]
		say("go-redis return 1 %2d goroutines %9.0f calls/s  (a Take's 2 keys and 17 arguments: this tool's own client ceiling; %s)\n", clients, f.rate, spread(f))
	}
	if f := figures["floor50"]; f != nil {
		say("floor             50 clients    %9.0f calls/s  %5.1f µs server CPU per call  (%.2f× evalsha; redis-benchmark; %s)\n", f.rate, f.usec, f.rate/evalsha[50], spread(f))
		say("(floor: a function that reads an action's 2 keys and writes 2 new keys with a TTL, an operation and its action's pointer, and nothing else: the least a step that opens an operation does)\n")
	}
	steps := map[string]map[int]float64{"take": {}, "cycle": {}, "take+cap": {}}
	for _, name := range []string{"take", "cycle", "take+cap"} {
		for _, g := range []int{1, 50} {
			f := figures[fmt.Sprint(name, g)]
			steps[name][g] = f.rate
			say("store %-8s    %2d goroutines %9.0f steps/s  %5.1f µs server CPU per step  (%.2f× evalsha; %s)\n",
				name, g, f.rate, f.usec, f.rate/evalsha[g], spread(f))
		}
	}
	say("(take+cap: the same Take with the agent's cap on, as by default; take and cycle run without it. The 403 step stores nothing, so take+cap costs what take does: the cap is counted by the approval that stores the operation)\n")
	res.takeRatio = steps["take"][50] / evalsha[50]
	res.cycleRatio = steps["cycle"][50] / evalsha[50]
	res.takeUsec = figures["take50"].usec
	say("beside this tool's own client ceiling (50 goroutines): take %.2f×, cycle %.2f×; the client ceiling is %.2f× redis-benchmark's\n",
		steps["take"][50]/client50, steps["cycle"][50]/client50, client50/evalsha[50])

	say("memory            %d performed operations: used_memory (less clients' buffers) +%.1f MB, %.0f bytes per retained operation\n",
		memOps, float64(memBytes)/1e6, res.bytesPerOp)
	say("memory by key     %s (MEMORY USAGE per retained operation, from a sample of the keys; the rest is the keyspace's own: its dict and expires entries)\n", kinds)

	res.approvalRatio = float64(ac.latency) / float64(ac.bare)
	say("approval request  1 goroutine   %9v per request (Session JWT verified, warm key cache; jti; Record) vs %v for the two bare ES256 checks: %.2f× (best of 5 rounds each)\n",
		ac.latency.Round(100*time.Nanosecond), ac.bare.Round(100*time.Nanosecond), res.approvalRatio)
	res.approvalFloorRatio = float64(ac.floor) / float64(ac.bare)
	say("approval floor    1 goroutine   %9v (one ES256 check, the delegation's cached, then one go-redis PING, nothing else) vs the two bare checks: %.2f×; the kit's own part: %v\n",
		ac.floor.Round(100*time.Nanosecond), res.approvalFloorRatio, (ac.latency - ac.floor).Round(100*time.Nanosecond))
	if ac.cpu > 0 {
		res.approvalCPURatio = float64(ac.cpu) / float64(ac.bareCPU)
		say("approval CPU      %d goroutines  %9v per request (this process %v, redis-server %v) vs %v for the two bare checks: %.2f×\n",
			runtime.GOMAXPROCS(0), ac.cpu.Round(100*time.Nanosecond), (ac.cpu - ac.serverCPU).Round(100*time.Nanosecond),
			ac.serverCPU.Round(100*time.Nanosecond), ac.bareCPU.Round(100*time.Nanosecond), res.approvalCPURatio)
	}

	// What each durability mode adds to a claim, on servers of its own.
	if procs != nil && c.durabilityClaims > 0 {
		if err := durabilityCost(ctx, procs, c.durabilityClaims, c.duration, c.pipelines, say); err != nil {
			return res, fmt.Errorf("durability: %w", err)
		}
	}

	// The summary: the server CPU per Take, then the last line in the
	// exact form
	// "ceiling: take/evalsha=R1 cycle/evalsha=R2 approval/bare=R3 bytes/op=B"
	// that scripts read.
	say("server CPU per Take (50 goroutines): %.1f µs\n", res.takeUsec)
	say("ceiling: take/evalsha=%.2f cycle/evalsha=%.2f approval/bare=%.2f bytes/op=%.0f\n",
		res.takeRatio, res.cycleRatio, res.approvalRatio, res.bytesPerOp)
	return res, nil
}

// cycleSteps is the whole cycle of an action new to st: Take (the 403
// step), Record, Take (the claim), Finish. It returns the steps done.
func cycleSteps(ctx context.Context, st store.Store, o store.Owner, a storedriver.TakeRequest) (int, error) {
	now := time.Now()
	r, err := storedriver.Steps(st).Take(ctx, o, a, now)
	if err != nil || r.Ref == "" {
		return 0, fmt.Errorf("take: %+v, %v", r, err)
	}
	rep, err := storedriver.Steps(st).Record(ctx, o, r.Ref, store.Approval{OperationID: r.Operation.ID, Revision: r.Operation.Revision, Approver: "user"}, now, storedriver.RecordOptions{})
	if err != nil || rep.Result != storedriver.Recorded {
		return 1, fmt.Errorf("record: %v, %v", rep.Result, err)
	}
	r, err = storedriver.Steps(st).Take(ctx, o, a, now)
	if err != nil || r.Claim == nil {
		return 2, fmt.Errorf("take of the approved action: %+v, %v", r, err)
	}
	if err := storedriver.Steps(st).Finish(ctx, *r.Claim, store.OutcomePerformed, now); err != nil {
		return 3, fmt.Errorf("finish: %v", err)
	}
	return 4, nil
}

// stepRate runs step from g goroutines, each with its own sequence of i,
// for d (or, when d is 0, until total steps are done), and returns the
// steps per second and the steps done.
func stepRate(ctx context.Context, g int, d time.Duration, total int, step func(context.Context, int, int) (int, error)) (float64, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for k := range g {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if d > 0 && time.Now().After(deadline) {
					return
				}
				if d == 0 && done.Load() >= int64(total) {
					return
				}
				n, err := step(ctx, k, i)
				done.Add(int64(n))
				if err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	n := int(done.Load())
	return float64(n) / time.Since(start).Seconds(), n, first
}

// evalshaRate measures EVALSHA of "return 1" from clients connections with
// redis-benchmark, or with a Go driver of its own when redis-benchmark is
// not installed.
func evalshaRate(ctx context.Context, opts *redis.Options, client *redis.Client, sha string, clients int, d time.Duration) (float64, string, error) {
	bin := redisBenchmark()
	if bin == "" {
		rate, _, err := stepRate(ctx, clients, d, 0, func(ctx context.Context, _, _ int) (int, error) {
			return 1, client.EvalSha(ctx, sha, nil).Err()
		})
		return rate, "Go driver: redis-benchmark not installed", err
	}
	// A short run finds the rate; the measured run then lasts about d.
	rate, err := benchmark(ctx, bin, opts, clients, 2000*clients/max(clients/10, 1), 0, "EVALSHA", sha, "0")
	if err != nil {
		return 0, "", err
	}
	rate, err = benchmark(ctx, bin, opts, clients, max(1000, int(rate*d.Seconds())), 0, "EVALSHA", sha, "0")
	return rate, "redis-benchmark", err
}

// redisBenchmark is redis-benchmark's path, or "" when it isn't installed.
func redisBenchmark() string {
	if bin, err := exec.LookPath("redis-benchmark"); err == nil {
		return bin
	}
	if _, err := os.Stat("/usr/bin/redis-benchmark"); err == nil {
		return "/usr/bin/redis-benchmark"
	}
	return ""
}

// benchmark runs redis-benchmark: n commands from clients connections,
// each __rand_int__ in command replaced by a random number below random
// when random > 0, and returns its requests per second.
func benchmark(ctx context.Context, bin string, opts *redis.Options, clients, n, random int, command ...string) (float64, error) {
	host, port, _ := strings.Cut(opts.Addr, ":")
	args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(n), "--csv"}
	if random > 0 {
		args = append(args, "-r", strconv.Itoa(random))
	}
	if opts.DB != 0 {
		args = append(args, "--dbnum", strconv.Itoa(opts.DB))
	}
	if opts.Username != "" {
		args = append(args, "--user", opts.Username)
	}
	cmd := exec.CommandContext(ctx, bin, append(args, command...)...)
	if opts.Password != "" {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+opts.Password) // not on the command line
	}
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", err)
	}
	rows, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil || len(rows) < 2 || len(rows[1]) < 2 {
		return 0, fmt.Errorf("redis-benchmark: unexpected output %q", out)
	}
	return strconv.ParseFloat(rows[1][1], 64)
}

// floorLib is the least a step that opens an operation does, as a function
// redis-benchmark can drive: read the action's key (and the claim token's,
// as Take does), write the operation and the action's pointer to it, each
// with a TTL. No owner's count, no revisions, no logic: two new keys.
const floorLib = `#!lua name=opsgate_floor
redis.register_function('opsgate_floor_open', function(KEYS, ARGV)
  redis.call('MGET', KEYS[2], KEYS[1])
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end)`

// floorRate measures opsgate_floor_open with redis-benchmark from clients
// connections for about d, a new action each call, and returns its rate
// and the server CPU per call; ok is false when redis-benchmark or
// functions are not there.
func floorRate(ctx context.Context, opts *redis.Options, client *redis.Client, prefix string, clients int, d time.Duration) (rate, usec float64, ok bool, err error) {
	bin := redisBenchmark()
	if bin == "" || client.FunctionLoadReplace(ctx, floorLib).Err() != nil {
		return 0, 0, false, nil
	}
	base := prefix + "floor:{__rand_int__}:"
	command := []string{"FCALL", "opsgate_floor_open", "3", base + "act:__rand_int__", base + "tok:__rand_int__", base + "op:__rand_int__",
		// An operation's record: its terms, summary, owner and revision,
		// about as long as the store's; the pointer: an operation_id and
		// a revision; the TTL of a waiting operation.
		// (Single quotes: redis-benchmark's CSV doesn't escape double ones.)
		`open https://agent.example/ceiling usr_1_2 {'order_id':'ord_1_2_3','price_difference':{'amount':'70.00','currency':'USD'},'replacement_sku':'stormline-insulated-m'} Exchange the jacket on order 12 for $70.00 more. 1796052877000000000 1796052877-abcdefghijklmnop`,
		"op_abcdefghijklmnopqrst 1796052877-abcdefghijklmnop", "660000"}
	rate, err = benchmark(ctx, bin, opts, clients, 2000, 1e9, command...)
	if err != nil {
		return 0, 0, false, err
	}
	before := scriptStats(ctx, client)
	rate, err = benchmark(ctx, bin, opts, clients, max(1000, int(rate*d.Seconds())), 1e9, command...)
	if err != nil {
		return 0, 0, false, err
	}
	return rate, scriptStats(ctx, client).usecPerCall(before), true, nil
}

// clientCeiling returns a step that calls "return 1" with a Take's keys and
// arguments through go-redis: as a function when the server has them (as
// the store calls its steps after Load), else with EVALSHA.
func clientCeiling(ctx context.Context, client *redis.Client) (step func(context.Context, int, int) (int, error), cleanup func()) {
	const lib = "#!lua name=opsgate_ceiling\nredis.register_function('opsgate_ceiling_return_one', function(KEYS, ARGV) return 1 end)"
	keys := []string{"opsgate-ceiling:{c}:act:x", "opsgate-ceiling:{c}:tok:x"}
	args := []any{"", `{"order_id":"ord_1_2_3","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`,
		"Exchange the jacket on order 12 for $70.00 more.", "", "1796052877000000000", "1796052577000000000", "1796052277000000000",
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR", "https://agent.example/ceiling", "usr_1_2", "1073741824", "660000",
		"abcdefghijklmnopqrstuv", "1796138677000000000", "86460000", "600000", "1796052877000000000"}
	if err := client.FunctionLoadReplace(ctx, lib).Err(); err == nil {
		return func(ctx context.Context, _, _ int) (int, error) {
				return 1, client.FCall(ctx, "opsgate_ceiling_return_one", keys, args...).Err()
			}, func() {
				_ = client.FunctionDelete(context.WithoutCancel(ctx), "opsgate_ceiling").Err()
			}
	}
	sc := redis.NewScript(returnOne)
	return func(ctx context.Context, _, _ int) (int, error) {
		return 1, sc.Run(ctx, client, keys, args...).Err()
	}, func() {}
}

// scriptCalls is the script commands' share of INFO commandstats.
type scriptCalls struct{ calls, usec float64 }

// scriptStats sums EVAL, EVALSHA and FCALL (and their _ro forms) in INFO
// commandstats: the server CPU the store's scripts took. The commands a
// script calls are inside its usec.
func scriptStats(ctx context.Context, c *redis.Client) scriptCalls {
	info, err := c.Info(ctx, "commandstats").Result()
	var s scriptCalls
	if err != nil {
		return s
	}
	for line := range strings.SplitSeq(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro":
		default:
			continue
		}
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				s.calls += x
			case "usec":
				s.usec += x
			}
		}
	}
	return s
}

func (s scriptCalls) usecSince(before scriptCalls) float64 { return s.usec - before.usec }

func (s scriptCalls) usecPerCall(before scriptCalls) float64 {
	if s.calls == before.calls {
		return 0
	}
	return (s.usec - before.usec) / (s.calls - before.calls)
}

func infoField(ctx context.Context, c *redis.Client, section, field string) string {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return "?"
}

// keyBreakdown says what the keys under prefix cost by kind (the part
// of their name after "}:" up to its next ":": op, lg, act...), per
// operation of ops: how many there are of each, and what MEMORY USAGE
// counts for a sample of them. It shows where the bytes per retained
// operation go.
func keyBreakdown(ctx context.Context, c *redis.Client, prefix string, ops int) (string, error) {
	const sample = 2000 // keys of each kind measured
	kindOf := func(k string) string {
		if _, rest, ok := strings.Cut(k, "}:"); ok {
			kind, _, _ := strings.Cut(rest, ":")
			return kind
		}
		return "other"
	}
	count := map[string]int{}
	measured := map[string][]string{}
	it := c.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	for it.Next(ctx) {
		kind := kindOf(it.Val())
		count[kind]++
		if len(measured[kind]) < sample {
			measured[kind] = append(measured[kind], it.Val())
		}
	}
	if err := it.Err(); err != nil {
		return "", err
	}
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(count)) {
		pipe := c.Pipeline()
		usage := make([]*redis.IntCmd, len(measured[kind]))
		for i, k := range measured[kind] {
			usage[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return "", err
		}
		var sum int64
		for _, u := range usage {
			sum += u.Val()
		}
		each := float64(sum) / float64(len(usage))
		parts = append(parts, fmt.Sprintf("%s %.0f (%d keys of %.0f B)", kind, each*float64(count[kind])/float64(ops), count[kind], each))
	}
	return strings.Join(parts, ", "), nil
}

// globEscape escapes the glob characters of a key prefix for SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// usedMemory is INFO memory's used_memory less mem_clients_normal: the
// records and the keyspace's own overhead, without the clients' query and
// output buffers, which grow under 50 clients and shrink when they idle
// (on a small run that alone can make the difference negative).
func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	field := func(name string) (int64, error) {
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
				return strconv.ParseInt(v, 10, 64)
			}
		}
		return 0, fmt.Errorf("INFO memory: no %s", name)
	}
	used, err := field("used_memory")
	if err != nil {
		return 0, err
	}
	clients, err := field("mem_clients_normal")
	if err != nil {
		clients = 0 // an older or other server: used_memory alone
	}
	return used - clients, nil
}

// approvalCost times n approval requests through the endpoint on st (the
// Session JWT verified with a warm key cache, its jti used up, the approval
// recorded), one at a time, n rounds of the two bare ES256 signature
// checks of such a JWT (the delegation's, then the JWT's), and n rounds of
// the request's floor (the JWT's check, then a PING), and returns the time
// of one of each.
// approvalCosts is what approvalCost measured.
type approvalCosts struct {
	// latency is one approval request at one goroutine, bare the two bare
	// signature checks (each the best of 5 rounds).
	latency, bare time.Duration
	// floor is the least any approval request on this store can take, at
	// one goroutine: one bare check (the JWT's own; its delegation is
	// cached) and one round trip to Redis (a PING through the same
	// client), one after the other as a request must do them: the
	// signature is checked before anything is recorded.
	floor time.Duration
	// cpu is the CPU time per approval request, of this process and of
	// redis-server, with GOMAXPROCS goroutines; bareCPU this process's CPU
	// time per two bare checks the same way. 0 where the tool can't read
	// its CPU time.
	cpu, bareCPU time.Duration
	serverCPU    time.Duration // redis-server's part of cpu
}

func approvalCost(ctx context.Context, st store.Store, client *redis.Client, n int) (approvalCosts, error) {
	var ac approvalCosts
	mux := http.NewServeMux()
	agentSrv := httptest.NewServer(mux)
	defer agentSrv.Close()
	keys, err := agentside.NewAgentKeys(agentSrv.URL+"/client", "ES256")
	if err != nil {
		return ac, err
	}
	mux.HandleFunc("/client", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.Metadata(agentSrv.URL+"/jwks", "Load Agent"))
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(keys.JWKS())
	})
	dlg, err := keys.Delegate(time.Hour)
	if err != nil {
		return ac, err
	}
	const origin = "https://shop.example"
	kit := webkit.New(keys2...)
	kit.Store = st
	kit.Logger = slog.New(slog.DiscardHandler)
	verifier := &siteverify.Verifier{Origin: origin, Resolver: &identity.Resolver{AllowLocal: true}, Replay: storedriver.Steps(st)}
	ep := opsendpoint.New(kit, opsendpoint.IdentityAuthenticator{Verifier: verifier})
	owner := store.Owner{Agent: keys.ClientID, User: "usr_approval"}

	// Issue the operations and sign the JWTs first: only requests are timed.
	// n for the timed rounds, n for the CPU measurement, one to warm up.
	type one struct{ jwt, body, approval string }
	reqs := make([]one, 2*n+1)
	run := time.Now().UnixNano()
	for i := range reqs {
		iss, err := storetest.Issue(ctx, storedriver.Steps(st), owner, storedriver.TakeRequest{Key: fmt.Sprintf("approve:%d:%d", run, i), Terms: []byte(`{"i":1}`), Lifetime: 10 * time.Minute}, time.Now())
		if err != nil {
			return ac, err
		}
		jwt, err := dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: owner.User})
		if err != nil {
			return ac, err
		}
		reqs[i] = one{jwt, `{"ref":"` + iss.Ref + `"}`, fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"`, iss.Operation.ID, iss.Operation.Revision)}
	}
	do := func(r one) error {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/poppy/operations", strings.NewReader(r.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(headers.Session, r.jwt)
		req.Header.Set(headers.Version, "1.0")
		req.Header.Set(headers.Extensions, `"operations";v="3"`)
		req.Header.Set(headers.Approval, r.approval)
		w := httptest.NewRecorder()
		ep.ServeHTTP(w, req)
		if w.Code != http.StatusNoContent {
			return fmt.Errorf("approval request: status %d: %.200s", w.Code, w.Body)
		}
		return nil
	}
	if err := do(reqs[2*n]); err != nil { // warms the key cache
		return ac, err
	}
	// The bare checks, from the JWT's own parts.
	checks, err := bareChecks(reqs[0].jwt, keys.JWKS())
	if err != nil {
		return ac, err
	}
	// Requests and bare checks in turn, 5 rounds; the best round of each,
	// the one least disturbed by the rest of the machine.
	const rounds = 5
	per := max(n/rounds, 1)
	approval, bare, floor := time.Duration(1<<62), time.Duration(1<<62), time.Duration(1<<62)
	for k := range rounds {
		batch := reqs[k*per : min((k+1)*per, n)]
		if len(batch) == 0 {
			break
		}
		start := time.Now()
		for _, r := range batch {
			if err := do(r); err != nil {
				return ac, err
			}
		}
		approval = min(approval, time.Since(start)/time.Duration(len(batch)))
		start = time.Now()
		for range len(batch) {
			if !verifyAll(checks) {
				return ac, errBareCheck
			}
		}
		bare = min(bare, time.Since(start)/time.Duration(len(batch)))
		start = time.Now()
		for range len(batch) {
			if !verifyAll(checks[1:]) {
				return ac, errBareCheck
			}
			if err := client.Ping(ctx).Err(); err != nil {
				return ac, err
			}
		}
		floor = min(floor, time.Since(start)/time.Duration(len(batch)))
	}
	ac.latency, ac.bare, ac.floor = approval, bare, floor

	// CPU time: the other n requests from GOMAXPROCS goroutines, with this
	// process's CPU time and redis-server's (INFO cpu), then as many bare
	// checks the same way. Waiting for a round trip costs no CPU: this is
	// what an approval costs a busy site.
	g := runtime.GOMAXPROCS(0)
	cpu0, ok := processCPU()
	redis0 := serverCPU(ctx, client)
	if !ok || redis0 < 0 {
		return ac, nil
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := do(reqs[n+int(i)]); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return ac, *p
	}
	cpu1, _ := processCPU()
	redis1 := serverCPU(ctx, client)
	ac.cpu = (cpu1 - cpu0 + redis1 - redis0) / time.Duration(n)
	ac.serverCPU = (redis1 - redis0) / time.Duration(n)
	next.Store(0)
	var bad atomic.Bool
	for range g {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if !verifyAll(checks) {
					bad.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() {
		return ac, errBareCheck
	}
	cpu2, _ := processCPU()
	ac.bareCPU = (cpu2 - cpu1) / time.Duration(n)
	return ac, nil
}

var errBareCheck = errors.New("bare signature check failed")

// verifyAll makes the bare checks.
func verifyAll(checks []sigCheck) bool {
	for _, c := range checks {
		h := sha256.Sum256(c.msg)
		if !ecdsa.Verify(c.key, h[:], new(big.Int).SetBytes(c.sig[:32]), new(big.Int).SetBytes(c.sig[32:])) {
			return false
		}
	}
	return true
}

// serverCPU is redis-server's CPU time so far (INFO cpu: used_cpu_user +
// used_cpu_sys); -1 when it can't be read.
func serverCPU(ctx context.Context, c *redis.Client) time.Duration {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := strconv.ParseFloat(infoField(ctx, c, "cpu", f), 64)
		if err != nil {
			return -1
		}
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

// keys2 are the Kit's cookie keys for the approval measurement (unused by
// the endpoint, required by webkit.New).
var keys2 = [][]byte{[]byte("ceiling-tool-hash-key-0123456789"), []byte("ceiling-tool-encryption-key-0123")}

type sigCheck struct {
	key      *ecdsa.PublicKey
	msg, sig []byte
}

// bareChecks splits a Session JWT into its two ES256 checks: the
// delegation (poppy_dlg) with the agent's key from jwks, and the JWT with
// the delegated key (the delegation's cnf.jwk).
func bareChecks(jwt string, jwks []byte) ([]sigCheck, error) {
	b64 := base64.RawURLEncoding
	split := func(jws string) (header, payload []byte, msg, sig []byte, err error) {
		parts := strings.Split(jws, ".")
		if len(parts) != 3 {
			return nil, nil, nil, nil, errors.New("not a compact JWS")
		}
		if header, err = b64.DecodeString(parts[0]); err == nil {
			if payload, err = b64.DecodeString(parts[1]); err == nil {
				sig, err = b64.DecodeString(parts[2])
			}
		}
		return header, payload, []byte(parts[0] + "." + parts[1]), sig, err
	}
	header, _, msg, sig, err := split(jwt)
	if err != nil {
		return nil, err
	}
	var h struct {
		Dlg string `json:"poppy_dlg"`
	}
	if err := json.Unmarshal(header, &h); err != nil {
		return nil, err
	}
	_, dpayload, dmsg, dsig, err := split(h.Dlg)
	if err != nil {
		return nil, err
	}
	var d struct {
		Cnf struct {
			JWK json.RawMessage `json:"jwk"`
		} `json:"cnf"`
	}
	if err := json.Unmarshal(dpayload, &d); err != nil {
		return nil, err
	}
	delegated, err := jose.ParseJWK(d.Cnf.JWK)
	if err != nil {
		return nil, err
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil || len(set.Keys) == 0 {
		return nil, fmt.Errorf("agent JWKS: %v", err)
	}
	agentKey, err := jose.ParseJWK(set.Keys[0])
	if err != nil {
		return nil, err
	}
	ak, ok1 := agentKey.Key.(*ecdsa.PublicKey)
	dk, ok2 := delegated.Key.(*ecdsa.PublicKey)
	if !ok1 || !ok2 || len(sig) != 64 || len(dsig) != 64 {
		return nil, errors.New("not ES256 keys and signatures")
	}
	return []sigCheck{{ak, dmsg, dsig}, {dk, msg, sig}}, nil
}

// durabilityCost times n claiming Takes, one at a time, in each durability
// mode: "none" on a server without persistence, "disk" on one with
// appendfsync always (its AOF in the system's temporary directory, so on
// that disk), "replicas 1" on a master with one replica, and says what
// each adds over "none".
func durabilityCost(ctx context.Context, procs *redistest.Procs, n int, d time.Duration, pipelines int, say func(string, ...any)) error {
	plain, err := redistest.StartArgs(procs)
	if err != nil {
		return err
	}
	defer plain.Stop()
	disk, err := redistest.StartArgs(procs, aofAlways...)
	if err != nil {
		return err
	}
	defer disk.Stop()
	master, err := redistest.StartArgs(procs)
	if err != nil {
		return err
	}
	defer master.Stop()
	replica, err := redistest.StartReplica(procs, master)
	if err != nil {
		return err
	}
	defer replica.Stop()
	var base time.Duration
	for _, m := range []struct {
		mode string
		addr string
	}{{"none", plain.Addr}, {"disk", disk.Addr}, {"replicas 1", master.Addr}} {
		opts, _ := durabilityOptions(m.mode)
		opts.Pipelines = pipelines
		cl := redisClient(m.addr)
		st := redisstore.New(cl, opts)
		owner := store.Owner{Agent: "https://agent.example/durability", User: "usr_d"}
		var claims []time.Duration
		for i := range n {
			a := storedriver.TakeRequest{Key: fmt.Sprint("durable:", i), Terms: []byte(fmt.Sprintf(`{"i":%d}`, i)), Lifetime: 10 * time.Minute}
			now := time.Now()
			r, err := storedriver.Steps(st).Take(ctx, owner, a, now)
			if err != nil || r.Ref == "" {
				cl.Close()
				return fmt.Errorf("%s: take: %+v, %v", m.mode, r, err)
			}
			if _, err := storedriver.Steps(st).Record(ctx, owner, r.Ref, store.Approval{OperationID: r.Operation.ID, Revision: r.Operation.Revision, Approver: "user"}, now, storedriver.RecordOptions{}); err != nil {
				cl.Close()
				return fmt.Errorf("%s: record: %v", m.mode, err)
			}
			t := time.Now()
			r, err = storedriver.Steps(st).Take(ctx, owner, a, now)
			claims = append(claims, time.Since(t))
			if err != nil || r.Claim == nil {
				cl.Close()
				return fmt.Errorf("%s: claim: %+v, %v", m.mode, r, err)
			}
			if err := storedriver.Steps(st).Finish(ctx, *r.Claim, store.OutcomePerformed, now); err != nil {
				cl.Close()
				return fmt.Errorf("%s: finish: %v", m.mode, err)
			}
		}
		// The whole cycle at 50 goroutines in this mode: every claim
		// confirmed as the mode asks, while the steps share round trips.
		rate, _, err := stepRate(ctx, 50, d, 0, func(ctx context.Context, g, i int) (int, error) {
			return cycleSteps(ctx, st, store.Owner{Agent: "https://agent.example/durability", User: "usr_" + strconv.Itoa(g)},
				storedriver.TakeRequest{Key: "cycle:" + strconv.Itoa(g) + "_" + strconv.Itoa(i), Terms: []byte(`{"i":` + strconv.Itoa(i) + `}`), Lifetime: 10 * time.Minute})
		})
		cl.Close()
		if err != nil {
			return fmt.Errorf("%s: cycle: %w", m.mode, err)
		}
		slices.Sort(claims)
		p50, p99 := claims[len(claims)/2], claims[min(len(claims)-1, len(claims)*99/100)]
		extra := ""
		if m.mode == "none" {
			base = p50
		} else {
			extra = fmt.Sprintf(", +%v at p50 over none", (p50 - base).Round(time.Microsecond))
		}
		say("durability %-10s claim (Take that claims) p50 %v, p99 %v over %d claims%s; cycle at 50 goroutines %.0f steps/s\n",
			m.mode, p50.Round(time.Microsecond), p99.Round(time.Microsecond), n, extra, rate)
	}
	return nil
}
