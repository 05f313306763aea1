package redisstore

// CountAgentApart makes s keep its agents' counts of open operations in a
// step of their own (countNew), as on a Cluster, so that tests cover that
// path on a single server too.
func CountAgentApart(s *Store) { s.s.agentInStep.Store(false) }

// InfoField is a field of an INFO reply.
func InfoField(info, name string) string { return infoField(info, name) }

// ErrNotDurable is what Take wraps when a claim's durability wasn't
// confirmed in time.
var ErrNotDurable = errNotDurable

// ErrNotConfirmed is what a claim refused because its confirmation (WAIT,
// WAITAOF) fell short wraps, beside ErrNotDurable; a refusal before the
// step ran (a server not ready for the mode) does not.
var ErrNotConfirmed = errNotConfirmed

// HashSlot is the Redis Cluster hash slot of a key's hash tag.
func HashSlot(tag string) int { return hashSlot(tag) }

// StepOf names the store's step a command calls ("take", "start", …), or
// "" for another command: by its function's name or its script's SHA1.
func StepOf(args []any) string {
	if len(args) < 2 {
		return ""
	}
	name := args[1]
	for _, st := range steps {
		if name == st.fn || name == st.script.Hash() {
			return st.name
		}
	}
	return ""
}
