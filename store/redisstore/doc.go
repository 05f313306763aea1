// Package redisstore is the at-most-once store (package store) on Redis: one
// Lua script per state change, so every web server sharing a Redis, a Redis
// Cluster or a miniredis performs an approved operation at most once
// (§6 "Websites", §7; W135).
//
// Usage (see Example):
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	st := redisstore.New(client, redisstore.Options{})
//	_ = st.Load(ctx) // optional: first calls are one round trip too
//
// New takes any redis.UniversalClient: a *redis.Client of a single Redis or a
// miniredis, or a *redis.ClusterClient. Issue, Take, Record, Finish and
// UseOnce are one EVALSHA each, Lookup one HGETALL: one round trip apiece.
//
// # Client retries
//
// go-redis retries a command after some network errors. A retried script can
// never perform twice: a retried Take that already claimed finds the
// operation performing, and its claim is lost (the operation stays
// performing until the retention ends), and a retried Finish that already
// finished reports store.ErrClaimLost. At most once holds; only an approval
// or an outcome can be lost, as §7 allows.
//
// # Keys
//
// Every key of one Personal Agent and User is "<prefix>{<store.Slot>}:…", so
// each script touches one Cluster slot:
//
//   - op:<operation_id>, a hash: acct (the owner's account), akey (the
//     action digest), state (open, performing or performed), cur (the current
//     revision), order (its revisions, oldest first, at most 32), and per
//     revision t:, s:, x: (terms, summary, expires_at), a: (the recorded
//     approval, JSON) and u: (when it was used up); al (approved revisions,
//     first recorded first), claim and ap (the claim's token and revision),
//     k (remembered until).
//   - act:<store.ActionDigest>: the action's current operation_id (W19).
//   - apr:<store.ActionDigest>: a sorted set of the action's live approvals,
//     "<operation_id> <revision>", scored first recorded first (W95).
//
// UseOnce's markers are "<prefix>jti:{<digest of the key>}".
//
// Times are the caller's clock, passed to the scripts as Unix nanoseconds and
// compared exactly; expires_at is kept in whole seconds, as it goes out
// (RFC 3339). Each operation keeps k, the instant it may be forgotten, and is
// not found once the caller's clock passes it. Redis's own clock only runs
// the TTLs, which collect garbage a minute after k (W102, W137, W138, W139).
package redisstore
