package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// On 3 masters + 3 replicas: when the master of an owner's slot dies and
// stays down, a client built from ClusterOptions serves that owner from
// the promoted replica within 2 s of the promotion, and the approval
// recorded before the failover (durable on the replica: WAIT 1) performs
// once (webkit/RULES.md "Durability").
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a 6-node cluster")
	}
	nodes := redistest.ClusterOf(t, 3, 1, time.Second, "--appendonly", "yes", "--appendfsync", "always")
	cc := redis.NewClusterClient(redisstore.ClusterOptions(nodes.Addrs()...))
	t.Cleanup(func() { _ = cc.Close() })
	st := redisstore.New(cc, redisstore.Options{})
	ctx := t.Context()
	if err := st.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	a, is := approvedAction(t, st, "failover")
	// Make sure the approval reached the replica before the master dies.
	master, err := cc.MasterForKey(ctx, "opsgate:{"+storekit.Slot(owner.Agent, owner.User)+"}:op:x")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := master.Wait(ctx, 1, 2*time.Second).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	var dead, heir *redistest.Instance
	for k, m := range nodes.Masters {
		if m.Addr == master.Options().Addr {
			dead, heir = m, nodes.Replicas[k]
		}
	}
	if dead == nil {
		t.Fatalf("no master at %s", master.Options().Addr)
	}
	dead.Kill()

	// Wait for the promotion, as the cluster sees it.
	hc := redis.NewClient(&redis.Options{Addr: heir.Addr})
	defer hc.Close()
	var promoted time.Time
	for deadline := time.Now().Add(20 * time.Second); promoted.IsZero(); {
		if info, err := hc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
			promoted = time.Now()
		} else if time.Now().After(deadline) {
			t.Fatalf("replica %s never promoted", heir.Addr)
		} else {
			time.Sleep(50 * time.Millisecond) // polling the cluster's state, not semantics
		}
	}
	var served time.Time
	for served.IsZero() {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, found, err := storedriver.Steps(st).Lookup(c, owner, is.Ref, at(time.Second))
		cancel()
		if err == nil && found {
			served = time.Now()
		} else if time.Since(promoted) > 10*time.Second {
			t.Fatalf("10 s after the promotion: %v (found %v)", err, found)
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("served by the promoted replica %v after its promotion", served.Sub(promoted).Round(time.Millisecond))
	if d := served.Sub(promoted); d > 2*time.Second {
		t.Errorf("served %v after the promotion, want within 2 s", d)
	}
	// The new master has no replica: DurableDisk (AOF always) still holds.
	res, err := storedriver.Steps(st).Take(ctx, owner, a, at(2*time.Second))
	if err != nil || res.Claim == nil || res.Claim.Operation.Revision != is.Operation.Revision {
		t.Fatalf("Take after the failover: %+v, %v", res, err)
	}
	if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if res, err := storedriver.Steps(st).Take(ctx, owner, a, at(3*time.Second)); err != nil || res.Claim != nil {
		t.Fatalf("second Take: %+v, %v; want no claim", res, err)
	}
}

// Check names the late failover of a Cluster client with go-redis's
// default options.
func TestCheckClusterReload(t *testing.T) {
	t.Parallel()
	cluster := redistest.Cluster(t)
	if err := redisstore.New(cluster, redisstore.Options{}).Check(t.Context()); err != nil {
		t.Fatalf("redistest's client (1 s reloads): %v", err)
	}
	def := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Options().Addrs})
	defer def.Close()
	if err := redisstore.New(def, redisstore.Options{}).Check(t.Context()); err == nil || !strings.Contains(err.Error(), "ClusterOptions") {
		t.Errorf("default Cluster client: %v, want the risk named", err)
	}
}

// claimWithin repeats a Take of a (each 503 repeated, as a browser's
// Continue would) until it claims, for at most limit, and returns when it
// did (zero if never) and how many attempts failed closed.
func claimWithin(t *testing.T, st store.Store, a storedriver.TakeRequest, now time.Time, limit time.Duration) (time.Time, int) {
	t.Helper()
	served, refused := claimWithinErrs(t, st, a, now, limit)
	return served, len(refused)
}

// claimWithinErrs is claimWithin, with the refusals' errors.
func claimWithinErrs(t *testing.T, st store.Store, a storedriver.TakeRequest, now time.Time, limit time.Duration) (time.Time, []error) {
	t.Helper()
	var refused []error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		res, err := storedriver.Steps(st).Take(ctx, owner, a, now)
		cancel()
		if err == nil && res.Claim != nil {
			if err := storedriver.Steps(st).Finish(t.Context(), *res.Claim, store.OutcomePerformed, now); err != nil {
				t.Fatal(err)
			}
			return time.Now(), refused
		}
		if err == nil {
			t.Fatalf("Take: nothing to claim: %+v", res)
		}
		if len(refused) < 3 {
			t.Logf("a claim refused: %v", err)
		}
		refused = append(refused, err)
		time.Sleep(50 * time.Millisecond)
	}
	return time.Time{}, refused
}

func waitCount(t *testing.T, c *redis.Client, cmd string) int {
	info := c.Info(t.Context(), "commandstats").Val()
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(redisstore.InfoField(info, "cmdstat_"+cmd), ",", 2)[0], "calls="))
	return n
}

// DurableReplicas{Replicas: 1} on 3 masters + 3 replicas, appendfsync
// always (alone.go, webkit/RULES.md "Durability"):
//   - the replica of the owner's master down but still known to the
//     Cluster: claims fail closed (it could be promoted with older data);
//   - the master killed and its replica promoted, with no replica of its
//     own: claims are served again within 3 s of the promotion, confirmed
//     on the new master's disk;
//   - the old master back, as its replica: claims are confirmed by WAIT
//     again once it has synced.
//
// Each approval performs once.
func TestClusterFailoverReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a 6-node cluster")
	}
	nodes := redistest.ClusterOf(t, 3, 1, time.Second, "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0")
	cc := redis.NewClusterClient(redisstore.ClusterOptions(nodes.Addrs()...))
	t.Cleanup(func() { _ = cc.Close() })
	st := redisstore.New(cc, redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1})
	ctx := t.Context()
	if err := st.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	master, err := cc.MasterForKey(ctx, "opsgate:{"+storekit.Slot(owner.Agent, owner.User)+"}:op:x")
	if err != nil {
		t.Fatal(err)
	}
	var old, heir *redistest.Instance
	for k, m := range nodes.Masters {
		if m.Addr == master.Options().Addr {
			old, heir = m, nodes.Replicas[k]
		}
	}
	if old == nil {
		t.Fatalf("no master at %s", master.Options().Addr)
	}
	// With the replica up the claim is served. A machine loaded enough
	// (CI runs every package at once, with -race) can hold the replica's
	// acknowledgement past DurabilityTimeout: the store then refuses, as
	// it must when a claim's durability is not confirmed, and a next try
	// is served. Any other refusal fails, and so do more than a few.
	served, refused := claimWithinErrs(t, st, mustApprove(t, st, "before"), at(time.Second), 5*time.Second)
	if served.IsZero() {
		t.Fatalf("the replica up: no claim served in 5 s (%d refused)", len(refused))
	}
	if len(refused) > 3 {
		t.Errorf("the replica up: %d claims refused before one was served", len(refused))
	}
	for _, err := range refused {
		if !errors.Is(err, redisstore.ErrNotDurable) || !errors.Is(err, redisstore.ErrNotConfirmed) {
			t.Errorf("the replica up, a claim refused for another reason than its WAIT falling short: %v", err)
		}
	}

	// The replica down, the master up: no fallback.
	heir.Kill()
	a := mustApprove(t, st, "replica down")
	if served, failed := claimWithin(t, st, a, at(time.Second), 3*time.Second); !served.IsZero() {
		t.Fatalf("claimed with the only replica down (after %d refusals): a failover to it would lose the claim", failed)
	}
	if err := heir.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.WaitLinked(ctx, heir.Addr); err != nil {
		t.Fatal(err)
	}
	if served, failed := claimWithin(t, st, a, at(time.Second), 10*time.Second); served.IsZero() {
		t.Fatalf("the replica back: still refused after %d tries", failed)
	}

	// The master killed: its replica is promoted, alone.
	b := mustApprove(t, st, "failover")
	if n, err := master.Wait(ctx, 1, 2*time.Second).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	old.Kill()
	hc := redis.NewClient(&redis.Options{Addr: heir.Addr})
	defer hc.Close()
	var promoted time.Time
	for deadline := time.Now().Add(20 * time.Second); promoted.IsZero(); {
		if info, err := hc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
			promoted = time.Now()
		} else if time.Now().After(deadline) {
			t.Fatalf("replica %s never promoted", heir.Addr)
		} else {
			time.Sleep(50 * time.Millisecond) // polling the cluster's state, not semantics
		}
	}
	served, failed := claimWithin(t, st, b, at(2*time.Second), 10*time.Second)
	if served.IsZero() {
		t.Fatalf("the promoted replica, alone, refused every claim for 10 s (%d tries)", failed)
	}
	took := served.Sub(promoted)
	t.Logf("DurableReplicas{1}: the promoted master, alone, served a claim %v after its promotion (%d tries refused)", took.Round(time.Millisecond), failed)
	if took > 3*time.Second {
		t.Errorf("served %v after the promotion, want within 3 s", took)
	}
	if res, err := storedriver.Steps(st).Take(ctx, owner, b, at(3*time.Second)); err != nil || res.Claim != nil {
		t.Fatalf("second Take: %+v, %v; want no claim", res, err)
	}

	// The old master back, as the new master's replica. While it syncs it
	// is a known replica, and claims fail closed: how long is
	// repl-diskless-sync-delay (5 s by default, 0 here).
	restarted := time.Now()
	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	served, failed = claimWithin(t, st, mustApprove(t, st, "rejoining"), at(3*time.Second), 15*time.Second)
	if served.IsZero() {
		t.Fatalf("with the old master rejoining as replica: refused %d times", failed)
	}
	t.Logf("the old master restarted: a claim served %v later (%d tries refused)", served.Sub(restarted).Round(time.Millisecond), failed)
	// Once it has synced: WAIT again.
	if err := redistest.WaitLinked(ctx, old.Addr); err != nil {
		t.Fatal(err)
	}
	waits := waitCount(t, hc, "wait")
	if served, failed := claimWithin(t, st, mustApprove(t, st, "rejoined"), at(3*time.Second), 10*time.Second); served.IsZero() {
		t.Fatalf("with the old master rejoined as replica: refused %d times", failed)
	}
	if w := waitCount(t, hc, "wait"); w <= waits {
		t.Errorf("with a replica again, the claim was not confirmed by WAIT (%d WAITs before, %d after)", waits, w)
	}
}

func mustApprove(t *testing.T, st store.Store, key string) storedriver.TakeRequest {
	t.Helper()
	a, _ := approvedAction(t, st, key)
	return a
}
