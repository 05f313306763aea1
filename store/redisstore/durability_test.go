package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// approvedAction issues and approves an action and returns it, ready for a
// claim.
func approvedAction(t testing.TB, st store.Store, key string) (storedriver.TakeRequest, storedriver.TakeResult) {
	t.Helper()
	a := action(key, `{}`, time.Hour)
	is, err := storetest.Issue(t.Context(), storedriver.Steps(st), owner, a, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := storedriver.Steps(st).Record(t.Context(), owner, is.Ref, approval(is), at(0), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record: %v %v", rep.Result, err)
	}
	return a, is
}

func wantStatus(t *testing.T, st store.Store, ref string, want storedriver.Status) {
	t.Helper()
	rec, found, err := storedriver.Steps(st).Lookup(t.Context(), owner, ref, at(time.Second))
	if err != nil || !found || rec.Status != want {
		t.Fatalf("Lookup: %v found=%v err=%v, want %s", rec.Status, found, err, want)
	}
}

// DurableDisk on Redis 7.0: a claim is returned only while the server
// fsyncs its AOF before each reply (appendfsync always); otherwise nothing
// is claimed, Take fails closed, and the approval still applies (webkit/RULES.md
// "Durability").
func TestDurableDisk(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t) // AOF, appendfsync always
	c := srv.Client(t)
	st := redisstore.New(c, redisstore.Options{})
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("Check with AOF always: %v", err)
	}
	a, _ := approvedAction(t, st, "ok")
	res, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(time.Second))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take with AOF always: %+v, %v", res, err)
	}

	for _, cfg := range [][2]string{{"appendfsync", "everysec"}, {"appendonly", "no"}} {
		if err := c.ConfigSet(t.Context(), cfg[0], cfg[1]).Err(); err != nil {
			t.Fatal(err)
		}
		fresh := redisstore.New(c, redisstore.Options{}) // checks the server anew
		a, is := approvedAction(t, fresh, "k"+cfg[0])
		res, err := storedriver.Steps(fresh).Take(t.Context(), owner, a, at(time.Second))
		if !errors.Is(err, redisstore.ErrNotDurable) || res.Claim != nil {
			t.Errorf("%s %s: Take %+v, %v; want ErrNotDurable", cfg[0], cfg[1], res, err)
		}
		wantStatus(t, fresh, is.Ref, storedriver.StatusApproved) // nothing was claimed
		if err := fresh.Check(t.Context()); err == nil || !strings.Contains(err.Error(), cfg[0]) {
			t.Errorf("%s %s: Check: %v, want the risk named", cfg[0], cfg[1], err)
		}
	}
}

// DurableReplicas: a claim is returned once WAIT counts the replica; with
// the replica stalled, Take fails closed within the timeout and releases
// the claim, so the approval performs once the replica is back (W144).
func TestDurableReplicas(t *testing.T) {
	const durabilityTimeout = 200 * time.Millisecond
	if testing.Short() {
		t.Skip("-short: starts a replica")
	}
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Replica(t, master)
	st := redisstore.New(master.Client(t), redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: durabilityTimeout})
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("Check with one replica: %v", err)
	}
	two := redisstore.New(master.Client(t), redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 2})
	if err := two.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "1 replicas connected") {
		t.Errorf("Check with 2 of 1 replicas: %v", err)
	}

	// With the replica up, a claim is confirmed: by a store whose timeout
	// a loaded machine's replica can't miss (CI runs this beside -race
	// builds), so that only the stalled cases below depend on it.
	up := redisstore.New(master.Client(t), redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: 10 * time.Second})
	if err := up.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	a, _ := approvedAction(t, up, "ok")
	if res, err := storedriver.Steps(up).Take(t.Context(), owner, a, at(time.Second)); err != nil || res.Claim == nil {
		t.Fatalf("Take with the replica up: %+v, %v", res, err)
	}

	// The claim is confirmed on a connection other than the one that made
	// it (the step shares round trips, Options.Pipelines): here a FIFO pool
	// of several connections hands confirm another one. WAIT there must
	// still wait for the claim (confirm writes a mark first); without the
	// mark it answers at once that the replica has it all, and this test
	// fails.
	fifo := redis.NewClient(&redis.Options{Addr: master.Addr, ContextTimeoutEnabled: true, PoolFIFO: true, MinIdleConns: 4})
	defer fifo.Close()
	for deadline := time.Now().Add(5 * time.Second); fifo.PoolStats().IdleConns < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the FIFO pool never opened its 4 connections")
		}
	}
	other := redisstore.New(fifo, redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: durabilityTimeout})
	if err := other.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	a0, is0 := approvedAction(t, st, "another connection")
	// Every connection of the pool writes, then the replica acknowledges
	// all of it: a WAIT on any of them now answers at once.
	for i := range 8 {
		if err := fifo.Set(t.Context(), "written", i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mc := master.Client(t)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info := mc.Info(t.Context(), "replication").Val()
		off := redisstore.InfoField(info, "master_repl_offset")
		if off != "" && strings.Contains(redisstore.InfoField(info, "slave0"), ",offset="+off+",") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never caught up: %q", info)
		}
	}
	replica.PauseT(t)
	res0, err := storedriver.Steps(other).Take(t.Context(), owner, a0, at(time.Second))
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, redisstore.ErrNotDurable) || res0.Claim != nil {
		t.Fatalf("Take confirmed on another connection with the replica stalled: %+v, %v; want ErrNotDurable", res0, err)
	}
	wantStatus(t, other, is0.Ref, storedriver.StatusApproved) // released

	a, is := approvedAction(t, st, "stalled")
	replica.PauseT(t)
	start := time.Now()
	res, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(time.Second))
	took := time.Since(start)
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, redisstore.ErrNotDurable) || res.Claim != nil {
		t.Fatalf("Take with the replica stalled: %+v, %v; want ErrNotDurable", res, err)
	}
	if took > durabilityTimeout+5*time.Second { // bounded by the timeout, not by the replica's return
		t.Errorf("Take took %v with a %v durability timeout", took, durabilityTimeout)
	}
	wantStatus(t, st, is.Ref, storedriver.StatusApproved) // released

	// A caller's deadline shorter than the durability timeout (the kit's
	// StoreTimeout, BoundByContext): Take returns by it, not by the
	// timeout, and the claim is released in the background (W144).
	replica.PauseT(t)
	a2, is2 := approvedAction(t, st, "short deadline")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	start = time.Now()
	res, err = storedriver.Steps(st).Take(ctx, owner, a2, at(time.Second))
	took = time.Since(start)
	cancel()
	if !errors.Is(err, redisstore.ErrNotDurable) || res.Claim != nil {
		t.Fatalf("Take with a 50ms deadline and the replica stalled: %+v, %v; want ErrNotDurable", res, err)
	}
	if took >= durabilityTimeout {
		t.Errorf("Take took %v with a 50ms deadline: it waited for the %v durability timeout", took, durabilityTimeout)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rec, found, err := storedriver.Steps(st).Lookup(t.Context(), owner, is2.Ref, at(time.Second))
		if err == nil && found && rec.Status == storedriver.StatusApproved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the claim past the caller's deadline was never released: %v found=%v err=%v", rec.Status, found, err)
		}
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	res, err = storedriver.Steps(st).Take(t.Context(), owner, a, at(2*time.Second))
	if err != nil || res.Claim == nil || res.Claim.Operation.Revision != is.Operation.Revision {
		t.Fatalf("Take after the replica is back: %+v, %v", res, err)
	}
}

// Claims made at the same moment share confirmations (confirm.go): each
// is confirmed, with fewer WAITs than claims; and with the replica stalled
// every one of them fails closed and is released (W144).
func TestClaimsShareConfirmations(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a replica")
	}
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Replica(t, master)
	mc := master.Client(t)
	st := redisstore.New(mc, redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: 300 * time.Millisecond})
	if err := st.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	const n = 32
	claimAll := func(name string) ([]storedriver.TakeResult, []error) {
		actions, issued := make([]storedriver.TakeRequest, n), make([]storedriver.TakeResult, n)
		for i := range n {
			actions[i], issued[i] = approvedAction(t, st, fmt.Sprint(name, i))
		}
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				res, err := storedriver.Steps(st).Take(t.Context(), owner, actions[i], at(time.Second))
				if err == nil && res.Claim == nil {
					err = fmt.Errorf("no claim: %+v", res)
				}
				errs[i] = err
			})
		}
		close(start)
		wg.Wait()
		return issued, errs
	}
	waits := func() int {
		calls, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(redisstore.InfoField(mc.Info(t.Context(), "commandstats").Val(), "cmdstat_wait"), ",", 2)[0], "calls="))
		return calls
	}

	before := waits()
	issued, errs := claimAll("together")
	for i, err := range errs {
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		wantStatus(t, st, issued[i].Ref, storedriver.StatusPerforming)
	}
	sent := waits() - before
	t.Logf("%d claims at once confirmed by %d WAITs", n, sent)
	if sent < 1 || sent >= n {
		t.Errorf("%d WAITs for %d claims made at once: want fewer than one each", sent, n)
	}

	replica.PauseT(t)
	issued, errs = claimAll("stalled")
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if !errors.Is(err, redisstore.ErrNotDurable) {
			t.Errorf("claim %d with the replica stalled: %v, want ErrNotDurable", i, err)
		}
		wantStatus(t, st, issued[i].Ref, storedriver.StatusApproved) // released (W144)
	}
}

// BoundByContext is true for the clients that apply a context's deadline
// to their I/O (ContextTimeoutEnabled), so that the kit calls the store
// directly with its StoreTimeout (storekit.ContextBound).
func TestBoundByContext(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"client with ContextTimeoutEnabled", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{"client without", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{"Cluster client from ClusterOptions", redis.NewClusterClient(redisstore.ClusterOptions("127.0.0.1:1")), true},
		{"Cluster client without", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
	} {
		t.Cleanup(func() { c.client.Close() })
		if got := redisstore.New(c.client, redisstore.Options{}).Driver().(interface{ BoundByContext() bool }).BoundByContext(); got != c.want {
			t.Errorf("%s: BoundByContext %v, want %v", c.name, got, c.want)
		}
	}
}

// Check names what the store can't promise: miniredis is a demo store, and
// durability none says what it risks.
func TestCheck(t *testing.T) {
	t.Parallel()
	_, mc := redistest.Mini(t)
	none := redisstore.Options{Durability: redisstore.DurableNone}
	if err := redisstore.New(mc, none).Check(t.Context()); err == nil || !strings.Contains(err.Error(), "demo store") {
		t.Errorf("miniredis: %v, want a demo store", err)
	}
	if err := redisstore.New(mc, redisstore.Options{}).Check(t.Context()); err == nil {
		t.Errorf("miniredis with DurableDisk: no error")
	}
	c := redistest.Server(t)
	if err := redisstore.New(c, none).Check(t.Context()); err == nil || !strings.Contains(err.Error(), "a second time") {
		t.Errorf("durability none: %v, want the risk named", err)
	}
	// DurableDisk on miniredis can't verify anything: it fails closed.
	st := redisstore.New(mc, redisstore.Options{})
	if _, err := storedriver.Steps(st).Take(t.Context(), owner, action("k", `{}`, time.Hour), at(0)); !errors.Is(err, redisstore.ErrNotDurable) {
		t.Errorf("DurableDisk Take on miniredis: %v, want ErrNotDurable", err)
	}
}

// A store that found appendfsync wrong claims again about a second after it
// is fixed, without a restart.
func TestDurableDiskRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	if err := c.ConfigSet(t.Context(), "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	st := redisstore.New(c, redisstore.Options{})
	a, _ := approvedAction(t, st, "k")
	if _, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(time.Second)); !errors.Is(err, redisstore.ErrNotDurable) {
		t.Fatalf("everysec: %v, want ErrNotDurable", err)
	}
	if err := c.ConfigSet(t.Context(), "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the bad verdict is kept a second
	if res, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(2*time.Second)); err != nil || res.Claim == nil {
		t.Fatalf("always again: %+v, %v", res, err)
	}
}

// DurableServer, for a server durable before it acknowledges (MemoryDB,
// which refuses CONFIG and has no AOF): Take claims on the server's reply
// alone, where DurableDisk can't verify anything on Redis 7.0 and refuses
// every claim; Check takes the operator's word where CONFIG is refused,
// and refuses the mode on a server that shows it doesn't persist each
// write first (webkit/RULES.md "Durability").
func TestDurableServer(t *testing.T) {
	t.Parallel()
	// A MemoryDB stand-in: CONFIG refused, as on a managed server.
	managed, err := redistest.StartArgs(t, "--rename-command", "CONFIG", "")
	if err != nil {
		t.Fatal(err)
	}
	mc := managed.Client(t)
	srv := redisstore.New(mc, redisstore.Options{Durability: redisstore.DurableServer})
	if err := srv.Check(t.Context()); err != nil {
		t.Errorf("Check, DurableServer on a server refusing CONFIG: %v", err)
	}
	if err := srv.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	waits := func() string {
		info := mc.Info(t.Context(), "commandstats").Val()
		return redisstore.InfoField(info, "cmdstat_wait") + redisstore.InfoField(info, "cmdstat_waitaof")
	}
	a, is := approvedAction(t, srv, "server")
	if res, err := storedriver.Steps(srv).Take(t.Context(), owner, a, at(time.Second)); err != nil || res.Claim == nil {
		t.Fatalf("Take, DurableServer: %+v, %v", res, err)
	}
	wantStatus(t, srv, is.Ref, storedriver.StatusPerforming)
	if w := waits(); w != "" {
		t.Errorf("DurableServer waited for something: %s", w)
	}

	disk := redisstore.New(mc, redisstore.Options{})
	a, is = approvedAction(t, disk, "disk")
	if _, err := storedriver.Steps(disk).Take(t.Context(), owner, a, at(time.Second)); !errors.Is(err, redisstore.ErrNotDurable) {
		t.Errorf("DurableDisk where CONFIG is refused (Redis 7.0): %v, want ErrNotDurable", err)
	}
	wantStatus(t, disk, is.Ref, storedriver.StatusApproved)
	if err := disk.Check(t.Context()); err == nil {
		t.Error("Check, DurableDisk where CONFIG is refused: ok")
	}

	// A self-hosted server that shows it doesn't fsync each write.
	rdb, err := redistest.StartArgs(t, "--appendonly", "no")
	if err != nil {
		t.Fatal(err)
	}
	err = redisstore.New(rdb.Client(t), redisstore.Options{Durability: redisstore.DurableServer}).Check(t.Context())
	if err == nil || !strings.Contains(err.Error(), "doesn't persist") {
		t.Errorf("Check, DurableServer on a server with AOF off: %v, want the risk named", err)
	}
	always := redistest.Server(t)
	if err := redisstore.New(always, redisstore.Options{Durability: redisstore.DurableServer}).Check(t.Context()); err != nil {
		t.Errorf("Check, DurableServer with appendfsync always: %v", err)
	}
}

// A durability mode that isn't one of the four is refused: Check says so,
// and Take claims nothing rather than confirming nothing.
func TestDurabilityUnknown(t *testing.T) {
	t.Parallel()
	c := redistest.Server(t)
	st := redisstore.New(c, redisstore.Options{Durability: redisstore.DurabilityMode(42)})
	if err := st.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "unknown durability mode") {
		t.Errorf("Check: %v, want unknown durability mode", err)
	}
	a, is := approvedAction(t, st, "k")
	if res, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(time.Second)); err == nil || res.Claim != nil {
		t.Errorf("Take: %+v, %v; want an error and no claim", res, err)
	}
	wantStatus(t, st, is.Ref, storedriver.StatusApproved)
}

// W135 DurableReplicas: a Finish is confirmed on the replica as its claim
// was. With the replica stalled, Finish says so (an error, which the Gate
// tries again), rather than nil for a performed operation that a replica
// promoted now would still have as performing; tried again once the
// replica is back, the Finish that landed is confirmed and reads
// performed. (Found by demo/load -faults "lagging replica promoted":
// operations performed at the handler stayed performing.)
func TestDurableReplicasConfirmsFinish(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a replica")
	}
	t.Parallel()
	master := redistest.Start(t)
	replica := redistest.Replica(t, master)
	st := redisstore.New(master.Client(t), redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: 200 * time.Millisecond})
	a, is := approvedAction(t, st, "finish confirmed")
	res, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(time.Second))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	replica.PauseT(t)
	err = storedriver.Steps(st).Finish(t.Context(), *res.Claim, store.OutcomePerformed, at(2*time.Second))
	if rerr := replica.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil || errors.Is(err, storedriver.ErrClaimLost) {
		t.Fatalf("Finish with the replica stalled: %v; want an error saying it is not confirmed", err)
	}
	// The Gate's retry: the Finish landed on the master before, so this
	// one finds the claim finished, and is confirmed now.
	var again error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if again = storedriver.Steps(st).Finish(t.Context(), *res.Claim, store.OutcomePerformed, at(3*time.Second)); errors.Is(again, storedriver.ErrClaimLost) {
			break
		}
	}
	if !errors.Is(again, storedriver.ErrClaimLost) {
		t.Fatalf("Finish tried again with the replica back: %v; want ErrClaimLost (it landed before, confirmed now)", again)
	}
	wantStatus(t, st, is.Ref, storedriver.StatusPerformed)
}

// Check refuses every maxmemory-policy but noeviction, naming the fix: an
// evicted key is a forgotten claim, use or replay marker.
func TestCheckRefusesEviction(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client(t)
	st := redisstore.New(c, redisstore.Options{})
	if err := st.Check(t.Context()); err != nil {
		t.Fatalf("Check with noeviction: %v", err)
	}
	for _, policy := range []string{"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"} {
		if err := c.ConfigSet(t.Context(), "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		err := st.Check(t.Context())
		if err == nil || !strings.Contains(err.Error(), "maxmemory-policy is "+policy) || !strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
			t.Errorf("%s: Check: %v, want it refused with the fix named", policy, err)
		}
	}
	if err := c.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(t.Context()); err != nil {
		t.Errorf("Check with noeviction again: %v", err)
	}
}
