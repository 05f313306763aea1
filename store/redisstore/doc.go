// Package redisstore is the at-most-once store (package store) on Redis: one
// Lua script per state change, so every web server sharing a Redis, a Redis
// Cluster or a miniredis performs an approved operation at most once
// (§6 "Websites", §7; W135).
//
// Usage (see Example):
//
//	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	st := redisstore.New(client, redisstore.Options{})
//	if err := st.Check(ctx); err != nil {
//		log.Fatal(err) // or log it loudly: it names what this Redis can't promise
//	}
//	_ = st.Load(ctx) // optional: first calls are one round trip too
//
// For a Redis Cluster, build the client from ClusterOptions, so that a
// replica promoted after its master died serves that master's Users within
// about two seconds:
//
//	client := redis.NewClusterClient(redisstore.ClusterOptions("10.0.0.1:7000", "10.0.0.2:7000"))
//
// New takes any redis.UniversalClient of Redis 7.0 or later (Check says so
// on an older one). Each method is one round trip (one FCALL after Load,
// one EVALSHA otherwise). A Take that claims costs one more: its start
// mark, which is also the write its durability confirmation waits for
// (see "Claims are never stranded"); on a Cluster, storing a new operation costs one more to count
// it against its agent's cap, whose count is in a slot of its own. What the
// steps cost Redis is measured by `go run ./demo/load -ceiling`
// (demo/load/PERFORMANCE.md).
//
// # Waiting operations are computed, not stored
//
// §3: "A Company doesn't have to store operations that haven't been
// performed." The 403 step only reads: the operation is computed from the
// request and sealed into its ref, and the first approval sent for it
// stores it, as Take would have, with that approval. A flood of requests
// that are never approved stores nothing. What a site and an agent see:
//
//   - A ref is "<operation_id>.<revision>.<seal>": about 165 characters
//     plus 4/3 of the terms, summary and account. The seal is AES-GCM under
//     a secret the store keeps in Redis ("<prefix>seal", made by the first
//     server that needs it), bound to the agent and User: a changed ref, or
//     another owner's, is not found (W74).
//   - The caps of open operations count stored operations: past one, the
//     approval that would store the operation gets RateLimited (429 at the
//     endpoint), not the request that got its ref.
//   - A repeated request gets a new revision whenever its expires_at moves
//     (each second) rather than reusing a waiting one (W39), and Lookup of
//     a ref whose operation is not stored yet answers that ref's own
//     revision (W72).
//   - An expired ref of an operation never stored is not found (400, W101).
//
// Operations that can't be computed are stored at the 403, as a store that
// keeps every waiting operation would: terms or a summary too long for a
// 2048-character ref (§4), a lifetime beyond Options.Retention, and a new
// operation of an action whose last one is still remembered.
//
// An operation_id is computed per epoch (Retention long: midnight UTC is a
// turn by default), so all servers sharing a Redis must agree on
// Retention. A waiting action keeps one operation_id across the turn
// (W19, W20): an operation whose revision could still be approved after
// the turn is stored at the 403, under the operation_id computed before
// it, and the requests after the turn find it through its action key.
// With the default 10-minute lifetime, only the 403s of an epoch's last 10
// minutes store anything. An action still has one operation at a time when
// web servers' clocks disagree at the turn: an approval stores a computed
// operation only while no other operation of its action is remembered
// (nor one of the epoch before or after was performed after its ref was
// handed out), so the other's approval records nothing. A performed
// operation's id never comes back (W141): only operations whose expires_at
// is at most Retention away are computed, so a ref computed before it was
// performed has expired by the time it is forgotten.
//
// # Durability
//
// Losing all of Redis's data can cost an approval, never a second
// performance. Losing only recent writes can: a Redis restarted from an
// older snapshot, an AOF cut back by an OS crash, or a replica promoted
// before it received a claim still holds the approval without its use. So
// Take confirms each claim before returning it (Options.Durability):
//
//   - DurableDisk (the default): on the server's disk (WAITAOF 1 0 on
//     Redis 7.2 and later; before that appendfsync always, which the store
//     verifies). Protects against a crash or restart of that server.
//   - DurableReplicas: on Options.Replicas replicas (WAIT N). Protects
//     against a failover to a replica that lagged, and, when the master
//     has appendfsync always (Check requires it), against a restart of
//     the master without a failover. A Cluster master the Cluster knows
//     no replica of (a replica promoted when its master died) confirms
//     claims on its own disk while it is alone, so that its users aren't
//     refused until a replica joins: served again within about half a
//     second of the promotion in TestClusterFailoverReplicas, where
//     WAIT alone refused them until the old master came back.
//   - DurableServer, for a server durable before it acknowledges a write
//     (MemoryDB): nothing waited for beyond its reply. Check can't verify
//     a managed server's promise; it refuses the mode on a server that
//     shows it doesn't persist each write first.
//   - DurableNone, chosen explicitly: nothing waited for. A restart or
//     failover that loses recent writes can perform an approval twice;
//     Check says so.
//
// A claim not confirmed within Options.DurabilityTimeout is released at once and
// Take fails with an error ("claim not confirmed durable"): nothing is performed, and the Gate
// answers 503 with Retry-After. Check names what the Redis can't promise
// for the chosen durability (AOF off, too few replicas, miniredis).
//
// A master restarted without a failover is the case replicas alone can't
// cover: it comes back with what it persisted, and its replicas resync
// from it, so a master that snapshots (RDB, Redis's default) loses every
// claim since its last save on the replicas too. In a fault run
// (TestReplicasMasterRestart: 20 approvals performed, the master
// SIGKILLed and restarted) all 20 performed again with RDB, none with
// appendfsync always. The store could notice a restart (the master's
// run_id changes, its replication offset goes back), but not one that
// lost claims: both change on every restart, one that lost nothing too
// (with appendfsync always the offset went from 55,786 to 0 in the fault
// run); only a web server that saw the master before can compare, and
// none can tell which of the approvals that came back had been used. So
// Check refuses DurableReplicas unless every master has appendonly yes
// with appendfsync always; where it can't have that (ElastiCache has no
// AOF), the risk is the one Check names.
//
// No mode survives data brought back from before a claim: a backup
// restored, or a disk that lost writes it had confirmed. In the same
// fault run, a master restarted from its files copied before the claims
// performed all 20 again, with appendfsync always too. Restore a backup
// only once every operation in it has expired (its expires_at passed).
//
// # Claims are never stranded
//
// The caller picks a claim's token (storedriver.TakeRequest.ClaimToken) before Take.
// When Take's reply is lost or late, the caller releases the claim
// (Release): the approval applies again, and a Take with that token that
// Redis runs later claims nothing. A Take repeated with its token returns
// the same claim, never a second one.
//
// Take returns a claim only after its start mark: a step, atomic with the
// claim, that finds the claim still held by its token and marks it
// started. With DurableDisk on Redis 7.2 and later and with
// DurableReplicas the marks are the writes WAITAOF or WAIT confirms, so
// they cost no round trip; with DurableNone, DurableServer and DurableDisk
// before 7.2 the mark is one more round trip on the claim path. A claim
// never marked started has no handler running and none to come: once it
// is 10 seconds old, the next request for its action undoes it (and claims
// the approval itself), and so does Performing; the mark of the Take that
// made it, should it come after all, then fails, and Take returns
// storedriver.ErrClaimLost. Whichever of the two steps runs first decides, so
// however long Redis was away and whether or not the web server that made
// the claim is still running, no approval is left claimed with no handler,
// and none runs twice. A claim marked started is ended only by its holder
// (Finish, or Release when it did not run the handler) or by Resolve.
//
// An outcome nobody reported (a web server killed mid-handler, a Finish
// that never landed: the kit tries a failed Finish again until it does)
// leaves the operation performing: Performing lists those and Resolve
// settles each (see ExampleStore_Performing). Performing never walks the
// keyspace: the steps keep an index of the operations being performed in
// each Cluster hash slot (one small sorted set per slot, in that slot), and
// Performing reads those. Listing 10 operations on loopback took 9 ms with
// no other keys in the Redis and 15 ms with 1,000,000 (SCAN took 881 ms);
// on a Cluster of three masters, each reading its own slots' indexes, 38
// and 44 ms. Operations claimed by a version of the kit before this index
// (during a rolling deploy) are not listed.
//
// # Bounded work
//
// Take reads at most one operation's 16 approvals; an operation keeps at
// most 32 revisions; an agent and User has at most Options.MaxOpenPerOwner
// stored open operations (100), and an agent Options.MaxOpenPerAgent
// (10,000). Over a cap the answer is storedriver.ErrRateLimited (429 at the Gate)
// or storedriver.RateLimited (429 at the endpoint). Every key has a TTL except
// the seal's, and none outlives what it keeps by more than a minute.
//
// # Keys
//
// Every key of one agent and User is "<prefix>{<slot>}:…" (op:, act:, tok:,
// lg: an operation's audit log, and open), so each script touches one
// Cluster slot; an agent's count of
// open operations is "<prefix>agent:{…}", UseOnce's markers
// "<prefix>jti:{…}", and the seal's secret "<prefix>seal". Times are the
// caller's clock, compared exactly; Redis's own clock only runs the TTLs
// (W102, W137, W138, W139).
package redisstore
