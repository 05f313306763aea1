package redisstore_test

import (
	"context"
	"github.com/opsgate/opsgate/internal/storekit"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
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
	if err := redisstore.Check(ctx, st); err != nil {
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
		_, found, err := st.Lookup(c, owner, is.Ref, at(time.Second))
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
	res, err := st.Take(ctx, owner, a, at(2*time.Second))
	if err != nil || res.Claim == nil || res.Claim.Operation.Revision != is.Operation.Revision {
		t.Fatalf("Take after the failover: %+v, %v", res, err)
	}
	if err := st.Finish(ctx, *res.Claim, store.Done, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Take(ctx, owner, a, at(3*time.Second)); err != nil || res.Claim != nil {
		t.Fatalf("second Take: %+v, %v; want no claim", res, err)
	}
}

// Check names the late failover of a Cluster client with go-redis's
// default options.
func TestCheckClusterReload(t *testing.T) {
	t.Parallel()
	cluster := redistest.Cluster(t)
	if err := redisstore.Check(t.Context(), redisstore.New(cluster, redisstore.Options{})); err != nil {
		t.Fatalf("redistest's client (1 s reloads): %v", err)
	}
	def := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Options().Addrs})
	defer def.Close()
	if err := redisstore.Check(t.Context(), redisstore.New(def, redisstore.Options{})); err == nil || !strings.Contains(err.Error(), "ClusterOptions") {
		t.Errorf("default Cluster client: %v, want the risk named", err)
	}
}
