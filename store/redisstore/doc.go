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
// New takes any redis.UniversalClient: a *redis.Client of a single Redis or a
// miniredis, or a *redis.ClusterClient, of Redis 7.0 or later (Check says
// so on an older one). Issue, Take, Record, Finish, Release
// and UseOnce are one FCALL each after Load on Redis 7.0 and later (one
// EVALSHA otherwise), Lookup one HGETALL: one round trip apiece. A Take that
// claims costs one more to confirm its durability with WAIT or WAITAOF
// (below; not with DurableDisk before Redis 7.2); on a Cluster, a
// request that opens a new operation costs one more to count it against
// its agent's cap, whose count is in a slot of its own (on a single Redis
// the step that opens it counts it).
//
// # Cost per step
//
// Each redis.call a step makes costs the server 1–2.5 µs (more when it
// creates a key), more than the script's own logic, so each step reads
// with one MGET or HMGET and writes with one HSET, and a TTL is set only
// when it must grow. The action key names the current revision beside the
// operation, so that Take reads both with one HMGET. In redis.calls
// (TestCallsPerStep): the 403 step (Take of a new operation) 7, a
// repeated 403 (the same revision reused) 2, Record 2 (3 with the Session
// JWT's jti), the Take that claims 7 (with one approval of the current
// revision), Finish 6 (the performed operation is rewritten small, its
// action and token keys deleted); counting a new operation against its
// agent's cap adds 3 to the 403 step on a single Redis. `go run
// ./demo/load -ceiling` measures the steps beside Redis's own ceiling; the
// README has the figures.
//
// At high concurrency, reading and writing connections costs Redis and
// this process as much as the steps themselves. On a single Redis, the
// steps that goroutines call at the same moment share round trips
// (Options.Pipelines): while that many round trips are on their way, the
// next calls wait and go together in one pipeline, each still its own
// atomic FCALL. A goroutine alone is never delayed: a call that finds a
// round trip free is sent at once by its own goroutine. A call whose
// context ends while it waits is never sent. Lookup, Check and the
// confirmation of a claim (a mark and WAIT or WAITAOF, which count the
// writes of their own connection) are sent on their own.
//
// # Waiting operations computed, not stored
//
// With Options.ComputeWaiting the 403 step stores nothing for an action
// that has no live operation (§3: "A Company doesn't have to store
// operations that haven't been performed"). Take then only reads (the
// claim token's key, the action key, and the key of the operation it
// would compute) and answers at once; this process computes the
// operation from the request and seals it into its ref:
//
//   - operation_id: "op_" and 20 characters of an HMAC of the owner, the
//     action and the epoch (the time divided by Retention), so a repeated
//     request keeps it (W19) and no other action gets it (W21);
//   - revision: expires_at's seconds, "-", 16 characters of an HMAC of
//     the operation_id, expires_at and terms (W24, W25, W36);
//   - ref: "<operation_id>.<revision>.<seal>", the seal an AES-GCM
//     encryption of what the operation needs, bound to the owner: another
//     owner's Session, or any change to the ref, finds nothing (W74).
//
// The first approval sent for it stores the operation, with that approval,
// in one write, as Take would have stored it; from then on each step sees
// it as a stored one, except that its key is kept from the start until
// its expires_at plus Retention: an approved operation is about to be
// claimed, and its claim then needs no PEXPIRE to keep it for Retention
// (W138; its action key's still gets one). Whether it is remembered is
// judged as always by when it is forgotten (an approved operation never
// claimed is forgotten at its expires_at), so only memory differs: an
// approval never claimed holds its few hundred bytes for Retention more.
// The memory store (store.NewMemory) does the same in one process for tests (internal/memstore)
// (TestSameAsMemory compares the two). The secret is 32 random bytes the
// store keeps in Redis ("<prefix>seal"), made by the first server that
// needs it.
//
// Why an operation_id never comes back once performed (W141): while a
// performed operation is remembered, Take finds its key and stores the
// action's next operation with a random id; once it is forgotten (at
// least Retention after it was performed) the epoch has moved on, and
// only operations whose expires_at is at most Retention away are
// computed, so a ref computed before it was performed has expired. All
// servers sharing a Redis must agree on Retention.
//
// What a site sees differently: the caps of open operations count stored
// ones, so they apply when an approval stores an operation (Record answers
// RateLimited), not when its ref is returned; a repeated request gets a
// new revision whenever its expires_at moves (each second), rather than
// reusing a waiting one (W39's reuse is the stored store's choice); Lookup
// of a ref whose operation is not stored yet answers that ref's own
// revision, not the latest one returned; and a ref is about 165
// characters plus 4/3 of its terms, summary and account. Terms too long for a
// 2048-character ref (§4), and lifetimes beyond Retention, are stored as
// without the option.
//
// An action still has one operation at a time (W19). Its operation_id
// changes when the epoch turns, so two requests on either side of the
// turn are handed two computed operations; an approval stores one only
// while neither its neighbours in the epochs before and after nor the
// operation its action key names is remembered (a neighbour performed
// before the ref was handed out doesn't count: that ref is the action's
// next operation, W141), so the other's approval is answered not found and
// records nothing, before the first is performed or after. A performed
// computed operation keeps when it was claimed (pa) for that. An operation that must be stored (terms too long for a ref)
// is marked, and its action key outlives its performance, so that a
// computed ref handed out before it can't store a second operation of
// the action either.
//
// The 403 step then costs the server 7–11 µs rather than 21–31 µs
// (-ceiling, README), and a flood of requests that are never approved
// costs Redis no memory at all.
//
// # Durability
//
// Losing all of Redis's data can cost an approval, never a second
// performance. Losing only recent writes can: a Redis restarted from an
// older snapshot, an AOF cut back by an OS crash, or a replica promoted
// before it received a claim still holds the approval without its use. So
// Take confirms each claim before returning it (Options.Durability):
//
//   - DurableDisk (the default): on the server's disk. WAITAOF 1 0 on Redis
//     7.2 and later; before that, appendfsync always, which the store
//     verifies (CONFIG GET, INFO persistence) when it first claims on a
//     server and every 10 seconds after. Protects against a crash or
//     restart of that server. Measured on loopback with an ext4 disk
//     (BenchmarkClaimDurability, Take then Finish, Redis 7.0): about
//     1–1.3 ms per claim against 0.13–0.17 ms without (two fsyncs).
//   - DurableReplicas: on Durability.Replicas replicas (WAIT N). Protects
//     against a failover to a replica that lagged, and against losing the
//     master's disk. Measured with one replica on loopback: about 0.3–0.4
//     ms per claim.
//   - DurableNone, chosen explicitly: nothing waited for. Fast, and a
//     restart or failover that loses recent writes can perform an approval
//     twice. Check says so.
//
// WAIT and WAITAOF wait for the last write of their own connection, and the
// step that claimed shares its round trip with others (Options.Pipelines):
// so the store confirms a claim by writing a mark in its slot on a
// connection of its own (a key "<base>mark", kept a minute) and waiting for
// that, in one round trip. Redis replicates and appends to the AOF in
// order, and the mark is written after the claim's reply arrived: a
// confirmed mark confirms the claim.
//
// For the same reason, claims on one server share confirmations, as a
// database groups commits: a claim that finds none on its way confirms
// itself at once, and claims that finish while one is on its way share the
// next, one mark and one wait for them all, never the one already sent.
// Each waits no longer than its own deadline. With one replica on loopback
// and 50 goroutines claiming, a claim and its Finish took 13–15% less time
// (BenchmarkClaimsAtOnce, two runs of 8 against the same code confirming
// each claim alone, benchstat p=0.021 each), and in
// TestClaimsShareConfirmations 32 claims made at once were confirmed by 4
// WAITs.
//
// A claim not confirmed within Durability.Timeout is released at once and
// Take fails with store.ErrNotDurable: nothing is performed, and the Gate
// answers 503 with Retry-After. Check reads INFO server, persistence and
// replication on every master and names what falls short of the chosen
// durability (AOF off, appendfsync not always before 7.2, too few replicas,
// miniredis), and a Cluster client that would notice a failover late.
//
// # Claims are never stranded
//
// The caller picks a claim's token (store.Action.ClaimToken) before Take.
// When Take's reply is lost or late, the caller releases the claim
// (Release): the approval applies again, in its first-recorded place, and a
// Take with that token that Redis runs later claims nothing. A Take repeated
// with its token (go-redis retries a command after some network errors)
// returns the same claim, never a second one. An outcome nobody reported
// (a handler's unknown result, a web server killed mid-handler, a lost
// Finish) leaves the operation performing: Performing lists those, a batch
// of SCAN at a time on every master, and Resolve settles each as performed
// or not performed (see ExampleStore_Performing).
//
// # Bounded work
//
// An action's live approvals are its current operation's (while one is
// being performed, a request for the action is answered busy, so no other
// operation of it can hold live ones), so Take reads at most that
// operation's 16 approvals; an operation keeps at most 32 revisions; an
// agent and User has at most Options.MaxOpenPerOwner open operations
// (100), and an agent Options.MaxOpenPerAgent (10,000); an open operation
// is one waiting for an approval or a request: not being performed
// (an approval bounds that one), not performed, not forgotten. Over a cap
// the answer is store.ErrRateLimited or store.RateLimited: 429 at the Gate
// and the endpoint.
//
// # Keys
//
// Every key of one Personal Agent and User is "<prefix>{<storekit.Slot>}:…", so
// each script touches one Cluster slot:
//
//   - op:<operation_id>, a hash: acct (the owner's account), akey (the
//     action digest), ag and us (the owner's agent and User), state (open,
//     performing or performed), cur (the current revision), order (its
//     revisions, oldest first, at most 32), and per revision t:, s:, x:
//     (terms, summary, expires_at), a: (the recorded approval, JSON) and u:
//     (when it was used up); al (approved revisions, first recorded first,
//     W95); while performing claim, ap and pa (the claim's token, revision
//     and when it was claimed), fu once an unknown outcome was reported; k
//     (remembered until); c for an operation that was computed, ka for
//     one stored by a store that computes others (Options.ComputeWaiting).
//     Once performed it is written anew with only state, acct, cur, k (pa
//     too when it was computed) and an empty t: per revision (so a ref it
//     returned is still found, W74): about 300 bytes of Redis memory in
//     all, where an open one with its terms takes about 1 KB.
//   - act:<storekit.ActionDigest>: the action's current operation_id (W19),
//     its current revision's name (a hint, read again when stale), and the
//     operation_id of one still being performed that Issue replaced, if
//     any; deleted when the operation is performed (W141).
//   - tok:<claim token>: the operation a token claimed, or "r" once
//     released, then the instant it is forgotten (now +
//     storekit.ClaimTokenTTL, judged by the caller's clock like every other
//     expiry); deleted when the claim is performed.
//   - open: a sorted set of the owner's open operations, scored by k.
//
// An agent's count of open operations is "<prefix>agent:{<digest of the
// agent>}", UseOnce's markers are "<prefix>jti:{<digest of the key>}", and
// the secret of computed refs is "<prefix>seal".
//
// Times are the caller's clock, passed to the scripts as Unix nanoseconds and
// compared exactly; expires_at is kept in whole seconds, as it goes out
// (RFC 3339). Each operation keeps k, the instant it may be forgotten, and is
// not found once the caller's clock passes it. Redis's own clock only runs
// the TTLs, which collect garbage a minute after k (W102, W137, W138, W139).
package redisstore
