package redisstore

import "github.com/opsgate/opsgate/store"

// CountAgentApart makes s keep its agents' counts of open operations in a
// step of their own (countNew), as on a Cluster, so that tests cover that
// path on a single server too.
func CountAgentApart(s store.Store) { s.(*rstore).agentInStep.Store(false) }

// InfoField is a field of an INFO reply.
func InfoField(info, name string) string { return infoField(info, name) }

// ErrNotDurable is what Take wraps when a claim's durability wasn't
// confirmed in time.
var ErrNotDurable = errNotDurable
