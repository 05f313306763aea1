package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// The conformance suite on every backend the store promises to run on
// (package doc): miniredis, a redis-server, a Redis Cluster, and four web
// servers' clients sharing one redis-server (W135 across clients).

func TestMiniredis(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		mr, c := redistest.Mini(t)
		return storetest.Harness{
			// miniredis keeps nothing on disk: durability none, chosen
			// explicitly (Check says it is a demo store).
			Store:   storedriver.Steps(redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})),
			Advance: mr.FastForward,
			Size:    func(ctx context.Context) (int, error) { n, err := c.DBSize(ctx).Result(); return int(n), err },
			Down:    mr.Close,
		}
	})
}

// serverHarness starts a fresh redis-server for each subtest (a few ms), so
// that Down can stop it; clients is how many web servers share it.
func serverHarness(clients int) func(t *testing.T) storetest.Harness {
	return func(t *testing.T) storetest.Harness {
		srv := redistest.Start(t)
		// The first store calls the steps as functions (Load), the others
		// as scripts: both run the same code on the same records, as web
		// servers do while some have called Load and some not.
		first := redisstore.New(srv.Client(t), redisstore.Options{})
		if err := first.Load(t.Context()); err != nil {
			t.Fatal(err)
		}
		h := storetest.Harness{Store: storedriver.Steps(first), Down: srv.Stop}
		for range clients - 1 {
			h.Clients = append(h.Clients, storedriver.Steps(redisstore.New(srv.Client(t), redisstore.Options{})))
		}
		// No Advance or Size: a real server's TTLs run on real time
		// (TestTTL checks them instead).
		return h
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	storetest.Run(t, serverHarness(1))
}

func TestRedisFourClients(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the suite on four clients of one redis-server (TestRedis runs it on one)")
	}
	t.Parallel()
	storetest.Run(t, serverHarness(4))
}

func TestCluster(t *testing.T) {
	t.Parallel()
	// One cluster for the whole suite (creating one takes seconds),
	// flushed before each subtest; two clients, as two web servers.
	cluster := redistest.Cluster(t)
	other := clusterClient(t, cluster)
	// The seal key is on one node, and each client reads it.
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		err := cluster.ForEachMaster(t.Context(), func(ctx context.Context, c *redis.Client) error {
			return c.FlushAll(ctx).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		first := redisstore.New(cluster, redisstore.Options{})
		if err := first.Load(t.Context()); err != nil { // functions on every master
			t.Fatal(err)
		}
		return storetest.Harness{
			Store:   storedriver.Steps(first),
			Clients: []storedriver.Store{storedriver.Steps(redisstore.New(other, redisstore.Options{}))},
		}
	})
}

// clusterClient returns a second client of c's cluster.
func clusterClient(t *testing.T, c *redis.ClusterClient) *redis.ClusterClient {
	var (
		mu    sync.Mutex
		addrs []string
	)
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, m.Options().Addr)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// loadedStore starts a redis-server (the test's own, so that its command
// counts are the test's) and returns a store on it with the steps loaded
// as functions, and its client.
func loadedStore(t *testing.T, opts redisstore.Options) (store.Store, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	st := redisstore.New(c, opts)
	if err := st.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st, c
}

// commandCalls is INFO commandstats: the calls of each command so far, by
// name ("fcall", "hset", …; a function's redis.calls count as theirs).
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if cmd, isStat := strings.CutPrefix(name, "cmdstat_"); ok && isStat {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			calls[cmd] = n
		}
	}
	return calls
}

// TestFunctions: after Load, a step is an FCALL; a server that has lost the
// library (FUNCTION FLUSH) runs the script instead, one that has lost the
// scripts too (SCRIPT FLUSH) is sent it with EVAL, and the step still
// happens exactly once.
func TestFunctions(t *testing.T) {
	t.Parallel()
	st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone})
	ctx := t.Context()
	calls := func(cmd string) int { t.Helper(); return commandCalls(t, c)[cmd] }
	a := action("k", `{"v":1}`, time.Hour)
	is, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(0))
	if err != nil {
		t.Fatal(err)
	}
	// Issue, which also counts its new operation for its agent.
	if f, e := calls("fcall"), calls("evalsha"); f != 1 || e != 0 {
		t.Fatalf("after Issue: %d FCALLs and %d EVALSHAs, want 1 and 0", f, e)
	}
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), at(time.Second), storedriver.RecordOptions{})
	if err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record without the library: %v, %v", rep.Result, err)
	}
	res, err := storedriver.Steps(st).Take(ctx, owner, a, at(2*time.Second))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take without the library: %+v, %v", res, err)
	}
	if n := calls("evalsha"); n < 2 {
		t.Errorf("%d EVALSHAs, want the scripts to have run", n)
	}
	if res, err := storedriver.Steps(st).Take(ctx, owner, a, at(3*time.Second)); err != nil || res.Claim != nil {
		t.Errorf("second Take: %+v, %v; want no second claim", res, err)
	}
	// Nor the scripts (SCRIPT FLUSH): EVALSHA runs nothing, EVAL does.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := storetest.Issue(ctx, storedriver.Steps(st), owner, action("k2", `{"v":2}`, time.Hour), at(4*time.Second)); err != nil {
		t.Fatalf("Issue without the library or the scripts: %v", err)
	}
	if n := calls("eval"); n != 1 {
		t.Errorf("%d EVALs, want 1", n)
	}
}

// TestCallsPerStep pins the redis.calls each step makes (the package doc's
// "Cost per step"), counted with INFO commandstats on a real server: the
// inner commands a function runs are counted apart from its FCALL.
func TestCallsPerStep(t *testing.T) {
	t.Parallel()
	// Without the overall caps: their counts are a round trip of their
	// own, at most once a second and only near a cap (TestOverallCaps).
	st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone, MaxOpenPerAgent: -1, MaxOpen: -1, MaxReplayMarkers: -1})
	ctx := t.Context()
	inner := func() int { // the redis.calls the steps made
		t.Helper()
		n := 0
		for cmd, k := range commandCalls(t, c) {
			if cmd != "fcall" && cmd != "info" {
				n += k
			}
		}
		return n
	}
	step := func(what string, want int, f func()) {
		t.Helper()
		before := inner()
		f()
		if got := inner() - before; got != want {
			t.Errorf("%s: %d redis.calls, want %d", what, got, want)
		}
	}
	// Stored (a summary too long for a 2048-character ref): the 403 step
	// stores the operation.
	a := storedAction("k", `{"v":1}`, time.Hour)
	var is storedriver.TakeResult
	step("the 403 step (a new operation)", 7, func() { is = takeIssued(t, st, a, at(0)) })
	step("a repeated 403 (the revision reused)", 2, func() {
		if again := takeIssued(t, st, a, at(time.Second)); again.Ref != is.Ref {
			t.Fatalf("Take: ref %s, want the first one's %s", again.Ref, is.Ref)
		}
	})
	// Each step that commits writes its audit entry (lib.lua log_write):
	// a GET and a SET (with the log's TTL when it is kept longer). (Finish
	// reads the claimed revision with the operation, in its one HMGET.)
	step("Record", 4, func() { recordOK(t, st, is, at(2*time.Second)) })
	var claim store.Claim
	// 15: the claim's 7, its entry in its slot's index of performing
	// operations (ZADD, and PEXPIRE GT then NX for an index just made: the
	// last claim's Finish emptied it, and Redis dropped it), its start
	// mark's GET, HMGET and HSET (start.lua), and its audit entry's 2.
	step("the Take that claims (and takes its operation off its owner's count)", 15, func() { claim = takeClaim(t, st, a, at(3*time.Second)) })
	// 9 or 10: the operation and its claimed revision (HMGET), its action
	// key (GET), the old hash and the token's key dropped (DEL), the
	// performed hash (HSET) and its TTL, its ZREM from the index, and its
	// audit entry's GET and SET; no ZREM from its owner's count,
	// which its claim left (a claim made before the start mark did not:
	// finish.lua). A stored operation's action key stays, naming it while
	// it is remembered (ka, lib.lua issue), so Finish extends it (lib.lua
	// extend): one PEXPIRE GT, and a PEXPIRE NX after it when the key's
	// TTL is already as long to the millisecond (the claim set it to the
	// same Retention a moment before).
	before := inner()
	if err := storedriver.Steps(st).Finish(ctx, claim, store.OutcomePerformed, at(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := inner() - before; got != 9 && got != 10 {
		t.Errorf("Finish: %d redis.calls, want 9 or 10", got)
	}

	// With the agent's cap (the default), on a single Redis the 403 step
	// that stores a new operation also counts it: 3 more calls in the same step (its
	// count, the member, the set's TTL), rather than a step of its own.
	capped := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone, MaxOpen: -1, MaxReplayMarkers: -1})
	if err := capped.Load(ctx); err != nil {
		t.Fatal(err)
	}
	for i, what := range []string{"the 403 step with the agent's count (a new count)", "the 403 step with the agent's count"} {
		step(what, 10, func() {
			takeIssued(t, capped, storedAction(fmt.Sprint("capped", i), `{"v":1}`, time.Hour), at(5*time.Second))
		})
	}

	// Computed (the default): the 403 step one EXISTS; the first approval
	// stores the operation (with one EXISTS for all it would otherwise
	// read, its audit log included: its entry is one SET); the claim reads that EXISTS first, and makes no PEXPIRE of
	// the operation's key (kt), only of its action key's.
	if _, err := storedriver.Steps(st).Take(ctx, owner, action("seal", `{}`, time.Hour), at(5*time.Second)); err != nil {
		t.Fatal(err) // reads (or makes) the seal key, outside the steps
	}
	a = action("c", `{"v":1}`, time.Hour)
	step("the 403 step, computed", 1, func() { is = takeIssued(t, st, a, at(6*time.Second)) })
	step("Record storing a computed operation", 8, func() { recordOK(t, st, is, at(7*time.Second)) })
	step("the Take that claims a computed operation", 15, func() { claim = takeClaim(t, st, a, at(8*time.Second)) })
	// Its action key goes with its old hash and token key, in the one DEL.
	step("Finish of a computed operation", 8, func() {
		if err := storedriver.Steps(st).Finish(ctx, claim, store.OutcomePerformed, at(9*time.Second)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPerformedIsSmall: a performed operation is rewritten with only what
// its status and §7 need, as one compact hash (webkit/DEPLOYING.md "Redis sizing"):
// Redis's listpack encoding, under 320 bytes by MEMORY USAGE with the
// default prefix, and its action and claim token keys gone.
func TestPerformedIsSmall(t *testing.T) {
	t.Parallel()
	st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone})
	ctx := t.Context()
	a := action("exchange:ord_7Hk2", `{"order_id":"ord_7Hk2","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`, time.Hour)
	a.Summary = "Exchange the jacket on order ord_7Hk2 for $70.00 more."
	is, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), at(time.Second), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record: %v, %v", rep.Result, err)
	}
	res, err := storedriver.Steps(st).Take(ctx, owner, a, at(2*time.Second))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	opKeys, err := c.Keys(ctx, "opsgate:*:op:"+is.Operation.ID).Result()
	if err != nil || len(opKeys) != 1 {
		t.Fatalf("operation key: %v, %v", opKeys, err)
	}
	if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, at(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if enc := c.ObjectEncoding(ctx, opKeys[0]).Val(); enc != "listpack" {
		t.Errorf("performed: %s encoding, want listpack", enc)
	}
	if n, err := c.MemoryUsage(ctx, opKeys[0]).Result(); err != nil || n > 320 {
		t.Errorf("performed: MEMORY USAGE %d bytes (%v), want at most 320", n, err)
	}
	for _, pattern := range []string{"opsgate:*:act:*", "opsgate:*:tok:*"} {
		if k, _ := c.Keys(ctx, pattern).Result(); len(k) != 0 {
			t.Errorf("kept after performing: %v", k)
		}
	}
	// Computed into its ref and stored by its approval, it keeps when it
	// was claimed too (pa: a computed ref of its action handed out before
	// then never stores a second operation, lib.lua neighbour_allows).
	if h, _ := c.HGetAll(ctx, opKeys[0]).Result(); h["t:"+is.Operation.Revision] != "" || h["state"] != "performed" || h["pa"] == "" || len(h) != 6 {
		t.Errorf("performed hash = %v, want state, acct, cur, k, pa and an empty t: per revision", h)
	}
}

// forgetPrefix deletes a sequence's keys (those under prefix, on every
// master) when its test ends. The sequences of a campaign share one
// server, and their keys outlive them (TTLs of hours): without this the
// keyspace grows with every sequence, and so does each "performing"
// call's SCAN of it, which made a 20,000-sequence campaign quadratic
// (SCAN 700 µs a call at 175,000 keys, 95% of redis-server's time).
func forgetPrefix(t testing.TB, c redis.UniversalClient, prefix string) {
	t.Cleanup(func() {
		forget := func(ctx context.Context, node *redis.Client) error {
			var keys []string
			it := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for it.Next(ctx) {
				keys = append(keys, it.Val())
			}
			if err := it.Err(); err != nil {
				return err
			}
			for k := range slices.Chunk(keys, 100) {
				// One UNLINK per key: on a Cluster a command's keys must
				// share a slot, and a sequence's keys need not.
				pipe := node.Pipeline()
				for _, key := range k {
					pipe.Unlink(ctx, key)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		ctx := context.Background()
		var err error
		switch c := c.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, forget)
		case *redis.Client:
			err = forget(ctx, c)
		default:
			err = fmt.Errorf("no way to list the keys of a %T", c)
		}
		if err != nil {
			t.Errorf("deleting the keys under %q: %v", prefix, err)
		}
	})
}

// TestSameAsMemory: random sequences of calls get the same answers from
// the Redis store as from the memory store (both computing waiting
// operations into their refs, storing those they can't: the 403 stores
// nothing, the first approval stores the operation, an action keeps one
// operation across an epoch's turn, as the sequences' clock moves by up
// to days, across epochs of 24 hours): on miniredis, whose clock
// moves with the sequence's, and on a real redis-server (its steps as
// functions), whose keys outlive the sequence's clock (answers then rest
// on the steps' own judgement of expiry).
func TestSameAsMemory(t *testing.T) {
	t.Parallel()
	memory := func(t testing.TB) storetest.Harness {
		return storetest.Harness{Store: memstore.New(memstore.Config{}).Steps()}
	}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		storetest.Differential(t, 1000, 60, memory, func(t testing.TB) storetest.Harness {
			mr, c := redistest.Mini(t)
			return storetest.Harness{
				Store:   storedriver.Steps(redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})),
				Advance: mr.FastForward,
			}
		})
	})
	t.Run("small caps", func(t *testing.T) {
		// Both stores with caps of open operations a sequence reaches:
		// refusals (429), and counts that claimed, reopened, performed and
		// forgotten operations leave and rejoin.
		t.Parallel()
		storetest.Differential(t, 200, 60, func(t testing.TB) storetest.Harness {
			m := memstore.New(memstore.Config{MaxOpenPerOwner: 2, MaxOpenPerAgent: 3})
			return storetest.Harness{Store: m.Steps()}
		}, func(t testing.TB) storetest.Harness {
			mr, c := redistest.Mini(t)
			return storetest.Harness{
				Store:   storedriver.Steps(redisstore.New(c, redisstore.Options{MaxOpenPerOwner: 2, MaxOpenPerAgent: 3, Durability: redisstore.DurableNone})),
				Advance: mr.FastForward,
			}
		})
	})
	t.Run("cluster", func(t *testing.T) {
		// A Redis Cluster (its agents' counts kept apart: an
		// approximation the default caps never reach), two web servers.
		t.Parallel()
		cluster := redistest.Cluster(t)
		other := clusterClient(t, cluster)
		var n atomic.Int64
		storetest.Differential(t, 20, 60, memory, func(t testing.TB) storetest.Harness {
			opts := redisstore.Options{Prefix: fmt.Sprintf("diff%d:", n.Add(1))}
			forgetPrefix(t, cluster, opts.Prefix)
			st := redisstore.New(cluster, opts)
			if err := st.Load(t.Context()); err != nil {
				t.Fatal(err)
			}
			return storetest.Harness{Store: storedriver.Steps(st), Clients: []storedriver.Store{storedriver.Steps(redisstore.New(other, opts))}}
		})
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		c := redistest.Server(t)
		var n atomic.Int64
		storetest.Differential(t, 20, 60, memory, func(t testing.TB) storetest.Harness {
			// One server (AOF, appendfsync always: the default durability),
			// a prefix per sequence, and two web servers taking turns: one
			// calls the steps as functions (Load), the other as scripts.
			opts := redisstore.Options{Prefix: fmt.Sprintf("diff%d:", n.Add(1))}
			forgetPrefix(t, c, opts.Prefix)
			st := redisstore.New(c, opts)
			if err := st.Load(t.Context()); err != nil {
				t.Fatal(err)
			}
			return storetest.Harness{Store: storedriver.Steps(st), Clients: []storedriver.Store{storedriver.Steps(redisstore.New(c, opts))}}
		})
	})
}
