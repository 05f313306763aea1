package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster master with no replica at all (a replica promoted when its
// master died, before that master rejoins as its replica) can't confirm a
// claim on DurableReplicas' replicas: WAIT answers 0 however long it
// waits, and every claim of its slots would fail closed (503) while it is
// alone, 15 s in one fault run. Its disk can: when the master fsyncs each
// write before it replies (appendfsync always, verified) and the Cluster
// knows no replica of it, a claim confirmed by its reply survives what
// DurableReplicas promises to survive. A restart of the master keeps it
// (on disk), and no failover can lose it, because no node could be
// promoted in its place but one that syncs from it first: a replica that
// joins later copies the master's data, claim included.
//
// So DurableReplicas falls back to the master's disk there, and only
// there, and never on a clock: the fallback rests on the Cluster's own
// view (CLUSTER NODES lists no replica of the master, even a disconnected
// one), read at most once a second per master once a WAIT fell short on
// it, and on INFO replication read after each claim's reply (no replica
// connected, not even one still syncing). A replica cut off from its
// master is still listed, so it stops the fallback: such a replica could
// be promoted with older data. On a single Redis (Sentinel) there is no
// such view, and the store doesn't fall back: a replica the master can't
// see may still be promoted.
//
// What it costs: the claim that found the replica gone waits
// DurabilityTimeout and fails closed (503); the next ones are served,
// one more round trip each (the INFO), while the master stays alone.
// The master's view is gossip's: for a moment after a node becomes its
// replica (a new Cluster, an old master rejoining) the master may not list
// it yet, and a WAIT that falls short then reads as alone. Add replicas,
// and fault them, only once CLUSTER NODES on the master lists them.
// Redis Cluster's cluster-replica-validity-factor 0 (a replica of any
// age may be promoted) would let the old master, rejoining with its own
// older data, be promoted before its first sync: keep the default (10).

// aloneState is what the store knows of a Cluster master's replicas, for
// the fallback above.
type aloneState struct {
	suspect atomic.Bool // a WAIT fell short on this master since the last verdict

	mu      sync.Mutex
	checked time.Time // when alone was last read; zero when never
	alone   bool      // no replica known, and appendfsync always
}

// aloneRecheck is how long a verdict of aloneState holds.
const aloneRecheck = time.Second

// fellShort notes that a WAIT on this master counted fewer replicas than
// DurableReplicas needs: the next claims see whether it is alone.
func (a *aloneState) fellShort() { a.suspect.Store(true) }

// confirmedAlone reports whether a claim that just had its reply from
// node, a Cluster master, is confirmed on its disk because the master is
// alone (see above). It is false, at no cost, until a WAIT fell short
// there.
func (s *rstore) confirmedAlone(ctx context.Context, node *redis.Client, n *nodeState) bool {
	if s.durability.Mode != DurableReplicas || !n.alone.suspect.Load() {
		return false
	}
	if _, ok := s.client.(*redis.ClusterClient); !ok {
		return false
	}
	if !n.alone.verdict(ctx, node) {
		return false
	}
	// After the claim's reply: no replica connected, not even one in its
	// first sync (INFO counts those too).
	info, err := node.Info(ctx, "replication").Result()
	return err == nil && infoField(info, "role") == "master" && infoField(info, "connected_slaves") == "0"
}

// verdict reads, at most once per aloneRecheck, whether the master knows
// no replica of itself and fsyncs each write before it replies.
func (a *aloneState) verdict(ctx context.Context, node *redis.Client) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.checked.IsZero() && time.Since(a.checked) < aloneRecheck {
		return a.alone
	}
	nodes, err := node.ClusterNodes(ctx).Result()
	if err != nil {
		return false // no verdict: fail closed, and read again next time
	}
	alone := !hasReplica(nodes) && checkAOFAlways(ctx, node) == nil
	a.alone, a.checked = alone, time.Now()
	if !alone {
		// A replica is known (or the disk can't confirm): back to WAIT,
		// until one falls short again.
		a.suspect.Store(false)
	}
	return alone
}

// hasReplica reports whether CLUSTER NODES, read on a master, lists a
// replica of it (in any state), or doesn't show it as a master at all.
func hasReplica(nodes string) bool {
	var me string
	lines := strings.Split(nodes, "\n")
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) > 3 && strings.Contains(f[2], "myself") {
			if !strings.Contains(f[2], "master") {
				return true
			}
			me = f[0]
		}
	}
	if me == "" {
		return true
	}
	for _, line := range lines {
		if f := strings.Fields(line); len(f) > 3 && f[3] == me {
			return true
		}
	}
	return false
}
