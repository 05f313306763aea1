package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/testenv"
)

// TestLoadToolSmall runs the load tool small on both stores, so that it
// keeps working; its own check fails the run if an approved operation is
// performed twice or not at all.
func TestLoadToolSmall(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := run(ctx, config{store: kind, servers: 3, browsers: 20, repeats: 6, ordinary: 50, workers: 8}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCeilingSmall runs -ceiling briefly on a redis-server it starts: every
// measurement must produce a figure, and the last line must be the summary.
func TestCeilingSmall(t *testing.T) {
	ctx := withRedisServer(t, "-short: measures the ceiling under load for seconds", 90*time.Second)
	var out bytes.Buffer
	res, err := runCeiling(ctx, ceilingConfig{duration: 200 * time.Millisecond, memoryOps: 2000, approvals: 30, rounds: 1, durabilityClaims: 20, out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"take/evalsha": res.takeRatio, "cycle/evalsha": res.cycleRatio, "approval/bare": res.approvalRatio, "approval CPU/bare": res.approvalCPURatio, "approval floor/bare": res.approvalFloorRatio, "bytes/op": res.bytesPerOp,
		"server CPU per Take": res.takeUsec} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v", name, v)
		}
	}
	if !strings.Contains(out.String(), "floor             50 clients") {
		t.Errorf("no floor: redis-benchmark driving the least a step that opens an operation does")
	}
	if !strings.Contains(out.String(), "approval floor    1 goroutine") {
		t.Errorf("no approval floor: one signature check and one round trip")
	}
	if !strings.Contains(out.String(), "store take+cap    50 goroutines") {
		t.Errorf("no figure for a Take with the agent's cap counting")
	}
	for _, mode := range []string{"none", "disk", "replicas 1"} {
		if !strings.Contains(out.String(), "durability "+mode+" ") {
			t.Errorf("no claim cost for durability %s", mode)
		}
		if !regexp.MustCompile(`durability ` + mode + ` .*; cycle at 50 goroutines [1-9]\d* steps/s`).MatchString(out.String()) {
			t.Errorf("no cycle rate for durability %s", mode)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// The last line in exactly the form, the figures the run
	// measured in it.
	m := regexp.MustCompile(`^ceiling: take/evalsha=(\d+\.\d\d) cycle/evalsha=(\d+\.\d\d) approval/bare=(\d+\.\d\d) bytes/op=(\d+)$`).FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q", lines[len(lines)-1])
	}
	if want := fmt.Sprintf("%.2f %.2f %.2f %.0f", res.takeRatio, res.cycleRatio, res.approvalRatio, res.bytesPerOp); strings.Join(m[1:], " ") != want {
		t.Errorf("last line %q, measured %s", lines[len(lines)-1], want)
	}
	if !regexp.MustCompile(`\nserver CPU per Take \(50 goroutines\): \d+\.\d µs\n`).MatchString(out.String()) {
		t.Errorf("no server CPU per Take line")
	}
}

// TestFaultsShort runs the fault suite's short version (what CI runs):
// no double performance in a durable mode, and the suite sees the doubles
// that a Redis restarted from an older snapshot causes, so that its count
// means something. Every line counts what is left performing (stranded,
// stuck), and none is left in a durable mode after a 10 s stall, 10 s of
// lost replies or a kill with handlers running.
func TestFaultsShort(t *testing.T) {
	ctx := withRedisServer(t, "-short: the fault suite kills, stalls and restarts redis-servers for a minute", 3*time.Minute)
	var out bytes.Buffer
	results, durableDoubles, err := runFaults(ctx, faultsConfig{short: true, out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if durableDoubles != 0 {
		t.Errorf("%d double performances in durable modes", durableDoubles)
	}
	// Nothing a machine could settle is left performing in a durable mode
	// (webkit/RULES.md "Claims are never stranded").
	for _, r := range results {
		if r.durable && (r.stranded != 0 || r.stuck != 0) {
			t.Errorf("%s [%s]: stranded %d, stuck %d", r.name, r.mode, r.stranded, r.stuck)
		}
	}
	for _, r := range results {
		if r.name == "restart from an older RDB snapshot" && r.doubles == 0 {
			t.Errorf("%s: no doubles seen; the suite can't see what it counts", r.name)
		}
		if r.skipped == "" && r.performed == 0 && r.name != "web server killed mid-handler" {
			t.Errorf("%s [%s]: nothing performed", r.name, r.mode)
		}
		// The agents' API and MCP traffic runs in every scenario that
		// takes it, and is counted at the handler.
		if r.skipped == "" && !r.noIfc && r.viaIfc == 0 {
			t.Errorf("%s [%s]: nothing performed through the API or MCP", r.name, r.mode)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, fmt.Sprintf("faults: %d scenarios, ", len(results))) {
		t.Errorf("last line %q", last)
	}
	counted := regexp.MustCompile(`  stranded +\d+  stuck +\d+  `)
	for _, l := range lines[1 : len(lines)-1] {
		if !counted.MatchString(l) {
			t.Errorf("no stranded/stuck counts: %q", l)
		}
	}
	ran := map[string]bool{}
	for _, r := range results {
		ran[r.name] = r.skipped == ""
	}
	for _, name := range []string{"stalled Redis 10s (SIGSTOP, SIGCONT)", "replies lost 10s after Take (proxy drops them)", "SIGKILL mid-handler, down 3s, restart with AOF"} {
		if !ran[name] {
			t.Errorf("%s: not run", name)
		}
	}
}

// TestFirstClause: the gist of Check's verdict on a scenario's line.
func TestFirstClause(t *testing.T) {
	for in, want := range map[string]string{
		"redisstore: check (durability replicas): 127.0.0.1:40107: the master doesn't persist each write before it replies (appendfsync everysec): restarted without a failover": "the master doesn't persist each write before it replies",
		"redisstore: check: dial tcp: connection refused": "redisstore",
	} {
		if got := firstClause(in); got != want {
			t.Errorf("firstClause(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHostileShort runs -hostile briefly: legitimate traffic goes on under
// attack with no 5xx, and attackers get refusals, not server errors. The
// p99 target is for the full run on a quiet machine, not asserted here.
func TestHostileShort(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis", "redis-server not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := runHostile(ctx, hostileConfig{duration: time.Second, browsers: 4, attackRate: 50, rounds: 1, out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.legit5xx != 0 || res.attack5xx != 0 || res.legit429 != 0 {
		t.Errorf("legitimate 5xx %d, legitimate 429 %d, attackers' unexpected 5xx %d", res.legit5xx, res.legit429, res.attack5xx)
	}
	if res.quiet.statuses[200] == 0 || res.attacked.statuses[200] == 0 {
		t.Errorf("nothing performed: quiet %v, under attack %v", res.quiet.statuses, res.attacked.statuses)
	}
	// The made-up agents' attack stores open operations, and the run
	// measures the store's footprint (the figures part 5's caps are sized by).
	if res.madeUp.stored == 0 || res.madeUp.agents == 0 || res.footprint.keys["owner op"] == 0 || res.footprint.bytes["replay marker"] == 0 {
		t.Errorf("made-up agents %+v, footprint %+v", res.madeUp, res.footprint)
	}
	for _, name := range []string{"junk key (endpoint)", "many client_ids"} {
		if res.attacks[name][401] == 0 {
			t.Errorf("%s: no 401 among %v", name, res.attacks[name])
		}
	}
}

// TestSideBySideSmall runs -side-by-side briefly on a redis-server it
// starts: every phase answers as it should (403s, then 200s once each
// approved), every figure is measured, and the last line is the summary.
func TestSideBySideSmall(t *testing.T) {
	ctx := withRedisServer(t, "-short: runs a redis-server and an HTTP server under load for seconds", 90*time.Second)
	var out bytes.Buffer
	const n = 200
	res, err := runSideBySide(ctx, sideConfig{requests: n, rounds: 2, clients: 10, stepOps: 200, approvals: 20, out: &out})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for ph, want := range map[string]int{phBare: 200, phHand403: 403, phKit403: 403, phKit403H: 403, phMem403: 403, phMem403H: 403, phHandRep: 200, phKitRep: 200, phMemRep: 200} {
		if got := res.statuses[ph]; got[want] != 2*n || len(got) != 2 || got[-1] != 0 {
			t.Errorf("%s: answers %v, want %d×%d", ph, got, 2*n, want)
		}
	}
	for name, v := range map[string]float64{"403/hand": res.r403, "repeat/hand": res.rRepeat, "approval/bare": res.rApproval, "steps/floor": res.rSteps} {
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v", name, v)
		}
	}
	for _, step := range stepNames {
		if !regexp.MustCompile(`step ` + step + ` +functions' CPU +\d+\.\d µs per step, its floor's +\d+\.\d µs`).MatchString(out.String()) {
			t.Errorf("no figure for the step %s beside its floor", step)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	m := regexp.MustCompile(`^side by side: 403/hand=(\d+\.\d\d) repeat/hand=(\d+\.\d\d) approval/bare=(\d+\.\d\d) steps/floor=(\d+\.\d\d)$`).FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q", lines[len(lines)-1])
	}
	if want := fmt.Sprintf("%.2f %.2f %.2f %.2f", res.r403, res.rRepeat, res.rApproval, res.rSteps); strings.Join(m[1:], " ") != want {
		t.Errorf("last line %q, measured %s", lines[len(lines)-1], want)
	}
}

// TestSideBySideRuns: -runs 2 runs the whole side by side twice and ends
// with each target's ratio per run, its min/median/max and whether it is
// met, then the last line of the medians over the runs.
func TestSideBySideRuns(t *testing.T) {
	ctx := withRedisServer(t, "-short: runs a redis-server and an HTTP server under load for seconds", 90*time.Second)
	var out bytes.Buffer
	res, err := runSideBySideRuns(ctx, sideConfig{requests: 80, rounds: 1, clients: 5, stepOps: 50, approvals: 10, out: &out}, 2)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.runs) != 2 {
		t.Fatalf("%d runs", len(res.runs))
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 6 {
		t.Fatalf("output %q", out.String())
	}
	for i, tg := range sideTargets {
		line := lines[len(lines)-5+i]
		a, b := tg.of(res.runs[0]), tg.of(res.runs[1])
		want := fmt.Sprintf("%6.3f %6.3f  %.3f / %.3f / %.3f", a, b, min(a, b), (a+b)/2, max(a, b))
		if !strings.HasPrefix(line, tg.what) || !strings.Contains(line, tg.String()) || !strings.Contains(line, want) {
			t.Errorf("line for %s: %q, want its target %s and %q", tg.name, line, tg, want)
		}
		if met := strings.HasSuffix(line, " yes"); met != tg.met((a+b)/2) || (!met && !strings.HasSuffix(line, " no")) {
			t.Errorf("line for %s: %q: met is %v", tg.name, line, tg.met((a+b)/2))
		}
	}
	want := fmt.Sprintf("side by side: 403/hand=%.2f repeat/hand=%.2f approval/bare=%.2f steps/floor=%.2f", res.medians.r403, res.medians.rRepeat, res.medians.rApproval, res.medians.rSteps)
	if last := lines[len(lines)-1]; last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
	if m := (res.runs[0].r403 + res.runs[1].r403) / 2; math.Abs(res.medians.r403-m) > 1e-9 {
		t.Errorf("median 403/hand %v, runs' %v", res.medians.r403, m)
	}
}

// phaseLabels labels a request with the phase its order names, and the
// tool's set-up requests "setup" whatever their order.
func TestPhaseLabels(t *testing.T) {
	var got string
	h := phaseLabels(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = pprof.Label(r.Context(), "phase")
	}))
	for _, c := range []struct {
		path, setup, want string
	}{
		{"/kit/redis/orders/r0R15/exchange", "", phKitRep},
		{"/kit/redis/orders/r12k3/exchange", "", phKit403},
		{"/hand/orders/r3h0/exchange", "", phHand403},
		{"/kit/redis/orders/r0R15/exchange", "1", "setup"},
		{"/elsewhere", "", "other"},
		{"/kit/redis/orders/r0Z1/exchange", "", "other"},
	} {
		r := httptest.NewRequest("POST", c.path, nil)
		if c.setup != "" {
			r.Header.Set(setupHeader, c.setup)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if got != c.want {
			t.Errorf("%s (setup %q): phase %q, want %q", c.path, c.setup, got, c.want)
		}
	}
}

// withRedisServer skips t under -short (why says what it would run),
// needs redis-server installed (testenv.Missing: a SKIP, or a failure
// when OPSGATE_REQUIRE names redis), and gives it a context that ends
// after limit.
func withRedisServer(t *testing.T, why string, limit time.Duration) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis", "redis-server not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}
