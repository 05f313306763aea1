package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/computed"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// defaultPrefix starts every key the store writes.
const defaultPrefix = "opsgate:"

// Options configure a Store. The zero value works.
type Options struct {
	// Prefix starts every key; "opsgate:" when "".
	Prefix string
	// Retention is how long a performed operation is remembered at least
	// beyond its approved revision's expires_at (W137);
	// storekit.DefaultRetention when zero.
	Retention time.Duration
	// MaxOpenPerOwner caps the operations open (waiting: not being
	// performed, not performed, not forgotten) for one agent and User: a
	// request that would open one more gets storedriver.ErrRateLimited. 0 is
	// storekit.DefaultMaxOpenPerOwner; negative, no cap.
	MaxOpenPerOwner int
	// MaxOpenPerAgent caps the operations open (as MaxOpenPerOwner) for
	// one agent across all its Users. Its count has a key of its own: on a
	// single Redis (a *redis.Client) the steps that open, revise, claim,
	// release and finish an operation keep it, exactly as the memory store
	// counts; on a Cluster, whose slots spread an agent's Users over many
	// nodes, opening costs one more round trip, Finish pipelines one more
	// command, and the count is an approximation: an operation being
	// performed still counts, and one leaves the count when its first
	// revision expires (early, when later revisions outlive it). 0 is
	// storekit.DefaultMaxOpenPerAgent; negative is no cap.
	MaxOpenPerAgent int
	// AuditRetention is how long an operation's audit entries
	// (store.Entry) are kept after its latest, and never less than the
	// operation is remembered at that step; 24 hours when zero. An entry
	// costs about 400 bytes of Redis memory (webkit/AUDIT.md).
	AuditRetention time.Duration
	// MaxOpen caps the operations open across every agent, and
	// MaxReplayMarkers the single-use markers (UseOnce, a Session JWT's jti,
	// kept about 330 s each) the store holds at once: client_ids cost
	// nothing, so the caps per owner and per agent alone don't bound the
	// store. Past either, a step that would store one more gets
	// storedriver.ErrRateLimited (429 with Retry-After) and stores nothing.
	// Each count is one hash that every web server adds to and reads at
	// most once a second (every call near the cap), in a round trip of its
	// own: the caps hold across web servers to within the calls in
	// flight. 0 is storekit.DefaultMaxOpen or
	// storekit.DefaultMaxReplayMarkers; negative, no cap. webkit/DEPLOYING.md
	// sizes them.
	MaxOpen, MaxReplayMarkers int
	// Durability is what a claim must reach before Take returns it; the
	// zero value is DurableDisk, which needs AOF with appendfsync always
	// on Redis before 7.2 (see DurabilityMode). Call Check at start-up.
	Durability DurabilityMode
	// Replicas is how many replicas must acknowledge a claim with
	// DurableReplicas; 0 means 1.
	Replicas int
	// DurabilityTimeout is how long Take waits for a claim's durability to
	// be confirmed; when it doesn't come in time, Take releases the claim
	// and fails with an error ("claim not confirmed durable"): nothing is performed, and the
	// Gate answers 503 with Retry-After. Keep it under the kit's
	// StoreTimeout. 0 is 300 ms.
	DurabilityTimeout time.Duration
	// Pipelines is how many round trips may carry steps to a single Redis
	// (a *redis.Client) at once: while that many are on their way, the
	// steps other goroutines call wait and then share the next round trip,
	// each still its own atomic step. At high concurrency this is most of
	// the store's throughput (demo/load/PERFORMANCE.md); a goroutine alone is
	// never delayed. 0 is 4; negative sends every call on a
	// connection of its own, as go-redis does. A Cluster client always
	// does. The client's hooks (tracing, metrics) see a shared round trip
	// as one pipeline of FCALLs.
	Pipelines int
}

// Store is the at-most-once store on Redis. It is safe for concurrent use,
// and every web server sharing the Redis shares its records.
type rstore struct {
	client     redis.UniversalClient
	prefix     string
	retention  time.Duration
	durability durability
	// auditRetention is Options.AuditRetention, its default applied.
	auditRetention time.Duration

	maxOpenOwner int
	maxOpenAgent int
	// maxOpenStr is maxOpenOwner in decimal, and retainedTTL, tokenTTL
	// and auditTTL the TTLs in ms (ttlMs) that keep a key for the
	// retention, storekit.ClaimTokenTTL and the audit retention: what
	// every Take sends, made once.
	maxOpenStr, retainedTTL, tokenTTL, auditTTL string
	// open and markers count operations and single-use markers against
	// the overall caps (overall.go); nil when uncapped.
	open, markers *overallCount
	// agentInStep: the agent's count is kept by the step that opens an
	// operation (a single Redis, where every key is on one server), not by
	// a step of its own (countNew). Cleared for good when the server
	// refuses a step's keys in two slots (a proxy in front of a Cluster).
	agentInStep atomic.Bool

	// manySlotsRefused is set for good when the server refused one
	// command's keys in many slots (a proxy in front of a Cluster):
	// Performing then reads each slot's index on its own (reconcile.go).
	manySlotsRefused atomic.Bool

	// functions is set once Load loaded the steps as a function library.
	functions atomic.Bool

	// pipe, when set, sends the steps of concurrent calls in shared round
	// trips (a *redis.Client).
	pipe *pipeliner

	nodesMu sync.Mutex
	nodes   map[string]*nodeState // by server address

	// seal holds the sealer of computed waiting operations (computed.go).
	seal sealerState
}

var (
	_ storedriver.Store = (*rstore)(nil)
	_ store.Store       = (*Store)(nil)
)

// Store is the Redis store, which every instance of a website behind a
// load balancer shares: set it as the Kit's Store. Check and Load at
// start-up; Performing, Resolve and Entries are store.Store's, for the
// website's admin.
type Store struct{ s *rstore }

// Driver is the store's steps, for the kit (store.Store).
func (st *Store) Driver() any { return st.s }

// Performing is store.Store's: the operations performing since before
// claimedBefore.
func (st *Store) Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error] {
	return st.s.Performing(ctx, claimedBefore, now)
}

// Resolve is store.Store's: it settles a performing operation; by goes in
// its audit entry.
func (st *Store) Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, by string, now time.Time) error {
	return st.s.Resolve(storedriver.WithEntry(ctx, store.Entry{By: by}), owner, operationID, outcome, now)
}

// Entries is store.Store's: the audit entries of operationID, or of
// every operation when it is "".
func (st *Store) Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[store.Entry, error] {
	return st.s.Entries(ctx, operationID, from, to)
}

// Load loads every script into Redis (SCRIPT LOAD, on every Cluster master),
// so that the first call of each method is one round trip too. It is
// optional: without it, a script's first run falls back to EVAL.
//
// Where the server has Redis functions (7.0 and later) and its ACL allows
// FUNCTION LOAD, Load also loads the same steps as a function library
// (named opsgate_<digest of its source>, so that two versions of the kit
// can share a Redis during a rolling deploy), and the store then calls
// them with FCALL: cheaper for the server than EVALSHA (see steps.go). A
// server that lacks the library later (a node added since, FUNCTION
// FLUSH) runs the scripts instead. Old versions' libraries stay in Redis
// until removed with FUNCTION DELETE; each is a few kilobytes.
//
// With DurableDisk or DurableReplicas it also reads what each master
// can confirm (its version; before Redis 7.2 its AOF settings), which
// Take would otherwise do on its first claim there.
func (st *Store) Load(ctx context.Context) error {
	return st.s.load(ctx)
}

// New returns a Store on client, which may be a *redis.Client (a single
// Redis, or miniredis), a *redis.ClusterClient or any other
// redis.UniversalClient. New does no I/O.
//
// The store bounds nothing itself: a call lasts as long as the client's
// ReadTimeout and WriteTimeout allow, or the context's deadline when the
// client has ContextTimeoutEnabled set (recommended: the kit then calls
// the store directly with its StoreTimeout, see BoundByContext).
//
// By default a claim must be on the server's disk before Take returns it
// (Options.Durability, DurableDisk): that needs a *redis.Client or a
// *redis.ClusterClient, and AOF with appendfsync always before Redis 7.2.
// Call Check at start-up: it says what the Redis can promise, and names
// the risk when that falls short of the chosen durability.
func New(client redis.UniversalClient, opts Options) *Store {
	s := &rstore{client: client, prefix: opts.Prefix, retention: opts.Retention, durability: durability{Mode: opts.Durability, Replicas: opts.Replicas, Timeout: opts.DurabilityTimeout}}
	if s.prefix == "" {
		s.prefix = defaultPrefix
	}
	switch s.maxOpenOwner = opts.MaxOpenPerOwner; {
	case s.maxOpenOwner == 0:
		s.maxOpenOwner = storekit.DefaultMaxOpenPerOwner
	case s.maxOpenOwner < 0:
		s.maxOpenOwner = math.MaxInt32 // no cap
	}
	s.maxOpenAgent = opts.MaxOpenPerAgent
	if s.maxOpenAgent == 0 {
		s.maxOpenAgent = storekit.DefaultMaxOpenPerAgent
	}
	s.open = overallCap(s.prefix+"overall:{open}", opts.MaxOpen, storekit.DefaultMaxOpen)
	s.markers = overallCap(s.prefix+"overall:{markers}", opts.MaxReplayMarkers, storekit.DefaultMaxReplayMarkers)
	c, single := client.(*redis.Client)
	s.agentInStep.Store(single && s.maxOpenAgent > 0)
	if single && opts.Pipelines >= 0 {
		n := opts.Pipelines
		if n == 0 {
			n = defaultPipelines
		}
		s.pipe = newPipeliner(c, n)
	}
	if s.retention <= 0 {
		s.retention = storekit.DefaultRetention
	}
	if s.auditRetention = opts.AuditRetention; s.auditRetention <= 0 {
		s.auditRetention = storekit.DefaultAuditRetention
	}
	s.maxOpenStr = strconv.Itoa(s.maxOpenOwner)
	var t0 time.Time
	s.retainedTTL, s.tokenTTL, s.auditTTL = ttlMs(t0.Add(s.retention), t0), ttlMs(t0.Add(storekit.ClaimTokenTTL), t0), ttlMs(t0.Add(s.auditRetention), t0)
	return &Store{s: s}
}

var _ storekit.ContextBound = (*rstore)(nil)

// BoundByContext reports whether every call returns by its context's
// deadline (storekit.ContextBound): true when the client is a *redis.Client
// or *redis.ClusterClient with ContextTimeoutEnabled, which applies the
// deadline to its network I/O and to waiting for a connection. The kit
// then calls the store directly, with its StoreTimeout as the deadline,
// rather than in a goroutine abandoned at the deadline.
func (s *rstore) BoundByContext() bool {
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// load is Load for this store.
func (s *rstore) load(ctx context.Context) error {
	for _, st := range steps {
		if err := st.script.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("redisstore: load: %w", err)
		}
	}
	// Functions where the server has them; scripts otherwise.
	s.functions.Store(s.loadFunctions(ctx) == nil)
	if !s.durability.confirms() {
		return nil
	}
	nodes, err := s.masters(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: load: %w", err)
	}
	for _, n := range nodes {
		if c, ok := n.(*redis.Client); ok {
			if err := s.ready(ctx, c, s.node(c.Options().Addr)); err != nil {
				return fmt.Errorf("redisstore: load: %s durability: %w", s.durability.Mode, err)
			}
		}
	}
	return nil
}

// base is the start of every key of one owner's agent and User: one hash tag,
// one Cluster slot (webkit/RULES.md "The store").
func (s *rstore) base(agent, user string) string {
	return s.prefix + "{" + storekit.Slot(agent, user) + "}:"
}

// ns writes a time as the scripts read it: Unix nanoseconds.
func ns(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// ttlMs is the TTL in milliseconds, in decimal, that keeps a key until
// until plus the scripts' minute of grace (GRACE_MS in lib.lua): computed
// here, where it costs nanoseconds, rather than in Lua, where reading a
// 19-digit time costs the server about a microsecond.
func ttlMs(until, now time.Time) string {
	return strconv.FormatInt(max(until.Sub(now).Milliseconds(), 0)+graceMs, 10)
}

// graceMs is lib.lua's GRACE_MS.
const graceMs = 60_000

// parseTime reads a time the scripts stored; ok is false for a malformed one.
func parseTime(s string) (time.Time, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n).UTC(), true
}

// issueFields are what issue.lua and take.lua read besides the action
// key (see issue.lua's ARGV), as strings.
type issueFields struct {
	acct, summary, fixed, x, half, now, seed, agent, user, xttl string
	terms                                                       []byte
}

// issueArgs are the KEYS and the fields that issue.lua and take.lua
// share (see issue.lua): the action key, then what the scripts can't
// derive from it.
func (s *rstore) issueArgs(base string, owner store.Owner, action storedriver.TakeRequest, now time.Time) (keys []string, f issueFields) {
	digest := storekit.ActionDigest(owner.Account, action.Key)
	expires := now.Add(action.Lifetime)
	fixed := ""
	if !action.ExpiresAt.IsZero() {
		expires = action.ExpiresAt
	}
	// expires_at goes out in whole seconds (RFC 3339), so it is kept that
	// way: what an approval is judged by is exactly what the agent saw. A
	// fixed one is compared by the second too (W25).
	expires = time.Unix(expires.Unix(), 0).UTC()
	if !action.ExpiresAt.IsZero() {
		fixed = ns(expires)
	}
	// W39: a revision is reused while at least half its lifetime is left.
	half := now.Add(action.Lifetime / 2)
	keys = []string{base + "act:" + digest}
	sd := seed()
	if action.Via != "" {
		// The interface whose revisions the step issues (lib.lua
		// seed_via).
		sd += "~" + action.Via
	}
	f = issueFields{acct: owner.Account, terms: action.Terms, summary: action.Summary, fixed: fixed,
		x: ns(expires), half: ns(half), now: ns(now), seed: sd,
		agent: owner.Agent, user: owner.User, xttl: ttlMs(expires, now)}
	return keys, f
}

// issueLuaArgs are issue.lua's ARGV 1-12.
func (s *rstore) issueLuaArgs(f issueFields) []any {
	return []any{f.acct, f.terms, f.summary, f.fixed, f.x, f.half, f.now, f.seed, f.agent, f.user, s.maxOpenStr, f.xttl}
}

// jsonStrings is fields as a JSON array of strings, as cjson.decode
// reads it back byte for byte: only '"', '\\' and control characters
// are escaped, and other bytes (invalid UTF-8 too) go as they are.
func jsonStrings(fields ...string) string {
	n := 2
	for _, f := range fields {
		n += len(f) + 3
	}
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteByte('[')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for j := 0; j < len(f); j++ {
			switch c := f[j]; {
			case c == '"' || c == '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte("0123456789abcdef"[c>>4])
				b.WriteByte("0123456789abcdef"[c&15])
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// seed is the randomness a new operation may need, in one argument: a new
// operation_id's 20 characters, then a new revision's 16 (storekit.NewOperationID,
// storekit.NewRevision).
func seed() string { return storekit.NewToken() + storekit.NewToken() }

// Issue implements store.Store.
func (s *rstore) Issue(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if err := ctx.Err(); err != nil {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", err)
	}
	base := s.base(owner.Agent, owner.User)
	keys, f := s.issueArgs(base, owner, action, now)
	c, k, err := s.mayCompute(ctx, base, owner, action, now, keys, &f)
	if err != nil {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", err)
	}
	args := s.issueLuaArgs(f)
	v, counted, err := withAgentCount(s, owner, keys, args, func(keys []string, args []any) ([]string, error) {
		return s.run(ctx, s.client, issueStep, keys, args...).StringSlice()
	}, s.maxOpenAgent)
	if err != nil {
		s.failed(err)
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", err)
	}
	if len(v) == 1 && v[0] == "limited" {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", storedriver.ErrRateLimited)
	}
	if len(v) == 1 && v[0] == "compute" && k != nil {
		return issuedComputed(k, base, c), nil
	}
	op, ok := operation(v)
	if !ok {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", errReply)
	}
	if len(v) > 5 && v[5] == "new" && !counted {
		if err := s.countNew(ctx, owner, keys[0], op, now); err != nil {
			return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", err)
		}
	}
	if len(v) > 5 && v[5] == "new" {
		if err := s.countOverall(ctx, owner, keys[0], op, now); err != nil {
			return storedriver.TakeResult{}, fmt.Errorf("redisstore: issue: %w", err)
		}
	}
	return storedriver.TakeResult{Operation: op, Ref: storekit.MakeRef(op.ID, op.Revision)}, nil
}

// Take implements store.Store.
func (s *rstore) Take(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if err := ctx.Err(); err != nil {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", err)
	}
	token := action.ClaimToken
	if token == "" {
		token = storekit.NewToken()
	} else if len(token) > maxTokenLength {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: claim token longer than %d bytes", maxTokenLength)
	}
	base := s.base(owner.Agent, owner.User)
	keys, f := s.issueArgs(base, owner, action, now)
	c, k, err := s.mayCompute(ctx, base, owner, action, now, keys, &f)
	if err != nil {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", err)
	}
	marker, err := s.takeMarker(ctx, owner, keys[0], now)
	if err != nil {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", err)
	}
	// KEYS[5]: the computed operation's key, which the step's first read
	// looks for (take.lua); the action key again when none is computed.
	computedKey := keys[0]
	if k != nil {
		computedKey = base + "op:" + c.ID
	}
	keys = append(keys, base+"tok:"+token, s.indexKeyOfBase(base), marker, computedKey)
	retained := now.Add(s.retention)
	tokUntil := ns(now.Add(storekit.ClaimTokenTTL))
	au := s.auditArgs(ctx, storekit.EntryClaimed, owner, "", action.Terms, now)
	// take.lua's arguments: what a claim needs, then what only issuing
	// needs (issue.lua's 3-6 and 8-12) in one.
	// Which approval a claim may use (take.lua ARGV[13]).
	only := ""
	if action.Via != "" {
		only = "-"
		// Only a revision of the request's own interface (§6).
		if action.Approved != "" && storekit.RevisionVia(action.Approved) == action.Via {
			only = action.Approved
		}
	}
	args := []any{f.acct, f.terms, f.now, token, ns(retained), s.retainedTTL,
		s.tokenTTL, tokUntil, au[0], au[1], au[2], s.auditTTL, only,
		jsonStrings(f.summary, f.fixed, f.x, f.half, f.seed, f.agent, f.user, s.maxOpenStr, f.xttl, ns(now.Add(-unstartedFor))),
	}
	mark := startMark{key: keys[1], token: token, now: ns(now), till: tokUntil, at: now}
	v, counted, err := withAgentCount(s, owner, keys, args, func(keys []string, args []any) ([]string, error) {
		if !s.durability.confirms() {
			// The reply is enough (DurableNone, DurableServer): the start
			// mark follows as a step of its own.
			return s.takeNone(ctx, keys, args, owner, mark)
		}
		return s.takeDurable(ctx, keys, args, owner, mark)
	}, s.maxOpenAgent)
	if errors.Is(err, errNotStarted) {
		// Undone before its start mark (start.go): nothing may run.
		return storedriver.TakeResult{}, storedriver.ErrClaimLost
	}
	if err != nil {
		s.failed(err)
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", err)
	}
	if len(v) == 0 {
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", errReply)
	}
	switch v[0] {
	case "marked":
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", storekit.ErrMarked)
	case "released":
		return storedriver.TakeResult{}, storedriver.ErrClaimLost
	case "lost":
		return storedriver.TakeResult{}, storedriver.ErrClaimLost
	case "limited":
		return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", storedriver.ErrRateLimited)
	case "busy":
		return storedriver.TakeResult{Busy: true}, nil
	case "compute":
		if k == nil {
			break
		}
		return issuedComputed(k, base, c), nil
	case "issued":
		op, ok := takenOperation(v[1:], action)
		if !ok {
			break
		}
		if len(v) > 6 && v[6] == "new" && !counted {
			if err := s.countNew(ctx, owner, keys[0], op, now); err != nil {
				return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", err)
			}
		}
		if len(v) > 6 && v[6] == "new" {
			if err := s.countOverall(ctx, owner, keys[0], op, now); err != nil {
				return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", err)
			}
		}
		return storedriver.TakeResult{Operation: op, Ref: storekit.MakeRef(op.ID, op.Revision)}, nil
	case "claim":
		op, ok := takenOperation(v[1:], action)
		if !ok || len(v) < 8 {
			break
		}
		a := decodeApproval(v[6], op.ID, op.Revision)
		if a.UsedAt, ok = parseTime(v[7]); !ok {
			a.UsedAt = now
		}
		return storedriver.TakeResult{Claim: &store.Claim{Owner: owner, Operation: op, Approval: a, Token: token}}, nil
	}
	return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", errReply)
}

// revisionSuffix is the random part of a revision that Record may need (see
// record.lua); the script prefixes the revision's expires_at, in the shape of
// storekit.NewRevision.
func revisionSuffix() string {
	return strings.TrimPrefix(storekit.NewRevision(time.Unix(0, 0)), "0-")
}

// errReply is a script's reply that isn't what the script returns: a bug or
// another program's data, never a record's state.
var errReply = errors.New("unexpected script reply")

// operation reads {opID, revision, summary, terms, expires}.
func operation(v []string) (store.Operation, bool) {
	if len(v) < 5 {
		return store.Operation{}, false
	}
	x, ok := parseTime(v[4])
	if !ok {
		return store.Operation{}, false
	}
	return store.Operation{ID: v[0], Revision: v[1], Summary: v[2], Terms: []byte(v[3]), ExpiresAt: x}, true
}

// takenOperation reads Take's {opID, revision, summary, terms, expires},
// where terms "" are the request's own (take.lua doesn't send them back;
// stored terms are never empty).
func takenOperation(v []string, action storedriver.TakeRequest) (store.Operation, bool) {
	op, ok := operation(v)
	if ok && v[3] == "" {
		op.Terms = action.Terms
	}
	return op, ok
}

// storedApproval is a recorded approval as the op hash keeps it (a:<rev>);
// the IDs and the used-at time are kept apart.
type storedApproval struct {
	Approver   string `json:"approver,omitempty"`
	ApprovedAt int64  `json:"approved_at,omitempty"` // Unix ns; 0 when not sent
	InputType  string `json:"input_type,omitempty"`
	Reference  string `json:"reference,omitempty"`
	RecordedAt int64  `json:"recorded_at"` // Unix ns
}

func encodeApproval(a store.Approval, now time.Time) []byte {
	sa := storedApproval{Approver: string(a.Approver), InputType: a.InputType, Reference: a.Reference, RecordedAt: now.UnixNano()}
	if !a.ApprovedAt.IsZero() {
		sa.ApprovedAt = a.ApprovedAt.UnixNano()
	}
	b, _ := json.Marshal(sa) // strings and integers only: never fails
	return b
}

// decodeApproval reads a stored approval; malformed data leaves fields zero
// rather than failing the request (a malformed record is not an error).
func decodeApproval(data, opID, rev string) store.Approval {
	var sa storedApproval
	_ = json.Unmarshal([]byte(data), &sa)
	a := store.Approval{OperationID: opID, Revision: rev, Approver: store.Approver(sa.Approver), InputType: sa.InputType, Reference: sa.Reference}
	if sa.ApprovedAt != 0 {
		a.ApprovedAt = time.Unix(0, sa.ApprovedAt).UTC()
	}
	if sa.RecordedAt != 0 {
		a.RecordedAt = time.Unix(0, sa.RecordedAt).UTC()
	}
	return a
}

// Record implements store.Store.
func (s *rstore) Record(ctx context.Context, owner store.Owner, ref string, approval store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	if err := ctx.Err(); err != nil {
		return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", err)
	}
	base := s.base(owner.Agent, owner.User)
	// What the approval adds is bounded in bytes: a long input_type or
	// reference is kept as absent, never refused (§6).
	approval.InputType, approval.Reference = storekit.KeptMembers(approval.InputType, approval.Reference)
	var c *computed.Op
	var k *computed.Sealer
	opID, refRev, ok := storekit.SplitRef(ref) // ValidRef: isComputedRef's other half
	if ok && computed.IsSealed(ref) {
		var err error
		k, err = s.sealer(ctx)
		if err != nil {
			s.failed(err)
			return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", err)
		}
		opened, rev, err := k.Open(base, ref)
		if err != nil {
			return s.recordNotFound(ctx, opts, now) // W74
		}
		c, opID, refRev, ok = &opened, opened.ID, rev, true
	}
	if !ok {
		return s.recordNotFound(ctx, opts, now) // W74
	}
	checkOnly := "0"
	if opts.CheckOnly {
		checkOnly = "1"
	}
	keys, once, onceTTL := []string{base + "op:" + opID, base + "lg:" + opID}, "", ""
	if c != nil {
		before, after := k.Neighbours(base, *c)
		keys = append(keys, base+"act:"+c.Action, base+"op:"+before, base+"op:"+after)
	}
	if opts.Once != "" {
		// The request's single-use key, used up first in the same script.
		k := s.onceKey(opts.Once)
		if !strings.HasPrefix(k, base) {
			return storedriver.RecordReply{}, errors.New("redisstore: record: RecordOptions.Once was not made by storekit.OnceKey for this owner")
		}
		keys, once, onceTTL = append(keys, k), ns(opts.OnceUntil), ttlMs(opts.OnceUntil, now)
	}
	what := storekit.EntryRecorded
	if opts.Decline != "" {
		checkOnly, what = "d", storekit.EntryDeclined
	}
	var terms []byte // known here for a computed ref only
	if c != nil {
		terms = c.Terms
	}
	approvalJSON := encodeApproval(approval, now)
	args := []any{owner.Account, approval.OperationID, approval.Revision, ns(now),
		approvalJSON, checkOnly, revisionSuffix(), refRev, once, onceTTL}
	args = append(args, s.auditArgs(ctx, what, owner, opts.Decline, terms, now)...)
	args = append(args, base)
	if opts.Once != "" {
		// The overall cap of single-use markers, before the step sets one.
		if refused, err := s.markerRefused(ctx, now); err != nil {
			return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", err)
		} else if refused {
			return storedriver.RecordReply{Result: storedriver.RateLimited}, nil
		}
	}
	var v []string
	var err error
	if c == nil {
		v, err = s.run(ctx, s.client, recordStep, keys, args...).StringSlice()
	} else {
		// The approval of the ref's own revision by the operation's account
		// stores it with the approval (record.lua approve), and the step
		// answers "recorded" alone. Its entry is the first of the log,
		// composed here, where all of it is known.
		approves := c.Account == owner.Account && approval.OperationID == opID && approval.Revision == refRev && checkOnly == "0"
		line, lineTTL := "", ""
		if approves {
			line = firstLine(args[10].(string), refRev, c.Summary, c.Expires, args[11].(string), c.Terms, string(approvalJSON))
			lineTTL = ttlMs(later(now.Add(s.auditRetention), c.Expires), now)
		}
		v, err = s.recordComputed(ctx, owner, *c, opID, keys, args, line, lineTTL, now)
		if approves && err == nil && len(v) == 1 && v[0] == "recorded" {
			v = []string{"recorded", opID, refRev, c.Summary, string(c.Terms), ns(c.Expires)}
		}
	}
	if err != nil {
		s.failed(err)
		return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", err)
	}
	if len(v) == 0 {
		return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", errReply)
	}
	if opts.Once != "" && v[0] != "replayed" {
		s.markers.add(ctx, s.client, opts.OnceUntil, 1, now)
	}
	var r storedriver.RecordReply
	switch v[0] {
	case "replayed":
		r.Result = storedriver.Replayed
	case "notfound":
		r.Result = storedriver.NotFound
	case "signin":
		r.Result = storedriver.SignInRequired
	case "performing":
		r.Result = storedriver.BeingPerformed
	case "performed":
		r.Result = storedriver.AlreadyPerformed
		if len(v) > 1 && v[1] != "" {
			r.Answer = []byte(v[1])
		}
	case "expired":
		r.Result = storedriver.OperationExpired
	case "limited":
		r.Result = storedriver.RateLimited
	case "mismatch", "recorded", "already":
		op, ok := operation(v[1:])
		if !ok {
			return storedriver.RecordReply{Result: storedriver.NotFound}, nil
		}
		r.Operation = op
		r.Result = map[string]storedriver.RecordResult{"mismatch": storedriver.RevisionMismatch, "recorded": storedriver.Recorded, "already": storedriver.AlreadyRecorded}[v[0]]
	default:
		return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", errReply)
	}
	return r, nil
}

// Finish implements store.Store.
func (s *rstore) Finish(ctx context.Context, claim store.Claim, outcome store.Outcome, now time.Time) error {
	var o string
	switch outcome {
	case store.OutcomePerformed:
		o = "done"
	case store.OutcomeNotPerformed:
		o = "notdone"
	case store.OutcomeUnknown:
		o = "unknown"
	default:
		return fmt.Errorf("redisstore: finish: invalid outcome %d", int(outcome))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: finish: %w", err)
	}
	if !storekit.ValidID(claim.Operation.ID) || claim.Token == "" {
		return storedriver.ErrClaimLost
	}
	base := s.base(claim.Owner.Agent, claim.Owner.User)
	what := map[store.Outcome]string{store.OutcomePerformed: storekit.EntryPerformed, store.OutcomeNotPerformed: storekit.EntryNotPerformed, store.OutcomeUnknown: storekit.EntryUnknown}[outcome]
	keys, args := s.finishArgs(ctx, base, claim.Owner, claim.Operation.ID, claim.Token, o, what, claim.Operation.Revision, claim.Operation.Terms, now)
	n, err := s.finish(ctx, claim.Owner, claim.Operation.ID, keys, args, o, false)
	if err != nil {
		s.failed(err)
		return fmt.Errorf("redisstore: finish: %w", err)
	}
	// A Finish is confirmed as its claim was (W135): otherwise a replica
	// promoted before it had the Finish keeps the operation performing
	// although it was performed. Not confirmed, it is an error, and the
	// Gate tries the Finish again; a Finish that already landed is then
	// confirmed again, and a replica promoted meanwhile gets it.
	if err := s.confirmFinish(ctx, keys[0]); err != nil {
		return fmt.Errorf("redisstore: finish: %w", err)
	}
	if n != 1 {
		return storedriver.ErrClaimLost
	}
	if o == "done" { // performed: it leaves the overall count of open operations
		s.open.add(ctx, s.client, claim.Operation.ExpiresAt, -1, now)
	}
	return nil
}

// finishArgs are finish.lua's keys and arguments for operation opID of
// owner (its keys start with base), claimed with token ("" to resolve),
// with outcome o and an audit entry what, of claimed revision rev and
// terms, when the caller knows them ("" and nil when it doesn't).
func (s *rstore) finishArgs(ctx context.Context, base string, owner store.Owner, opID, token, o, what, rev string, terms []byte, now time.Time) ([]string, []any) {
	keys := []string{base + "op:" + opID, s.indexKeyOfBase(base), base + "lg:" + opID}
	retained := now.Add(s.retention)
	suffix, account := "", ""
	if o == "notdone" {
		suffix = revisionSuffix()
	}
	if token == "" {
		account = owner.Account
	}
	head, digest := entryHeadOf(ctx, what, owner, "", terms, now)
	keep := now.Add(s.auditRetention)
	answer := ""
	if o == "done" && token != "" {
		answer = string(storedriver.AnswerOf(ctx))
	}
	return keys, []any{token, o, ns(now), ns(retained), ttlMs(retained, now), base, rev, account, suffix,
		head, digest, ns(keep), ttlMs(keep, now), answer}
}

// maxTokenLength bounds a caller's claim token, which becomes part of a key.
const maxTokenLength = 128

// Release implements store.Store.
func (s *rstore) Release(ctx context.Context, owner store.Owner, token string, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("redisstore: release: %w", err)
	}
	if token == "" || len(token) > maxTokenLength {
		return false, nil
	}
	base := s.base(owner.Agent, owner.User)
	keys := []string{base + "tok:" + token, s.indexKeyOfBase(base)}
	args := []any{token, ns(now), ttlMs(now.Add(storekit.ClaimTokenTTL), now), ns(now.Add(storekit.ClaimTokenTTL))}
	args = append(args, s.auditArgs(ctx, storekit.EntryReleased, owner, "", nil, now)...)
	// A released claim's operation comes back to its agent's count.
	n, _, err := withAgentCount(s, owner, keys, args, func(keys []string, args []any) (int, error) {
		return s.run(ctx, s.client, releaseStep, keys, args...).Int()
	})
	if err != nil {
		s.failed(err)
		return false, fmt.Errorf("redisstore: release: %w", err)
	}
	return n == 1, nil
}

// recordNotFound is Record's answer to a ref that names nothing, found so
// before any step ran: not found, once the request's single-use key is
// used up, as the step would have used it first (a replay is Replayed
// whatever its ref, as in the memory store).
func (s *rstore) recordNotFound(ctx context.Context, opts storedriver.RecordOptions, now time.Time) (storedriver.RecordReply, error) {
	if opts.Once != "" {
		used, err := s.UseOnce(ctx, opts.Once, opts.OnceUntil, now)
		if errors.Is(err, storekit.ErrOverall) {
			return storedriver.RecordReply{Result: storedriver.RateLimited}, nil
		}
		if err != nil {
			return storedriver.RecordReply{}, fmt.Errorf("redisstore: record: %w", err)
		}
		if !used {
			return storedriver.RecordReply{Result: storedriver.Replayed}, nil
		}
	}
	return storedriver.RecordReply{Result: storedriver.NotFound}, nil
}

// Lookup implements store.Store. It is one HGETALL: the operation hash holds
// everything Lookup reports, and a single command is as atomic as a script.
func (s *rstore) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	if err := ctx.Err(); err != nil {
		return storedriver.Found{}, false, fmt.Errorf("redisstore: lookup: %w", err)
	}
	if isComputedRef(ref) {
		rec, found, err := s.lookupComputed(ctx, owner, ref, now)
		if err != nil {
			s.failed(err)
			return storedriver.Found{}, false, fmt.Errorf("redisstore: lookup: %w", err)
		}
		return rec, found, nil
	}
	opID, refRev, ok := storekit.SplitRef(ref)
	if !ok {
		return storedriver.Found{}, false, nil // W74
	}
	h, err := s.client.HGetAll(ctx, s.base(owner.Agent, owner.User)+"op:"+opID).Result()
	if err != nil {
		s.failed(err)
		return storedriver.Found{}, false, fmt.Errorf("redisstore: lookup: %w", err)
	}
	if _, ok := h["t:"+refRev]; !ok {
		// A revision this operation never returned (or no longer keeps):
		// §4 "Any other reference" is not found (W74).
		return storedriver.Found{}, false, nil
	}
	rec, ok := record(h, opID, now)
	if !ok {
		return storedriver.Found{}, false, nil
	}
	rec.Owner.Agent, rec.Owner.User = owner.Agent, owner.User
	return rec, true, nil
}

// record reads an operation hash; ok is false for a missing or malformed one.
func record(h map[string]string, opID string, now time.Time) (storedriver.Found, bool) {
	state, cur := h["state"], h["cur"]
	acct, okAcct := h["acct"]
	// Past its keep-until (k) an operation is forgotten, whether or not its
	// TTL has fired yet (W139).
	k, okK := parseTime(h["k"])
	if !okAcct || cur == "" || !okK || now.After(k) {
		return storedriver.Found{}, false
	}
	if state == "performed" {
		// A performed operation keeps only what its status and §7 need
		// (finish.lua): its current revision's name, no terms.
		return storedriver.Found{Owner: store.Owner{Account: acct}, Current: store.Operation{ID: opID, Revision: cur}, Status: storedriver.StatusPerformed}, true
	}
	curOp, ok := operation([]string{opID, cur, h["s:"+cur], h["t:"+cur], h["x:"+cur]})
	if !ok || h["t:"+cur] == "" {
		return storedriver.Found{}, false
	}
	rec := storedriver.Found{Owner: store.Owner{Account: acct}, Current: curOp}
	switch state {
	case "performing":
		rec.Status = storedriver.StatusPerforming
	case "performed":
		rec.Status = storedriver.StatusPerformed
	case "open":
		rec.Status = storedriver.StatusWaiting
	default:
		return storedriver.Found{}, false
	}
	for _, rev := range strings.Fields(h["al"]) {
		data, ok := h["a:"+rev]
		if !ok {
			continue
		}
		a := decodeApproval(data, opID, rev)
		if u, ok := h["u:"+rev]; ok {
			a.UsedAt, _ = parseTime(u)
		}
		rec.Approvals = append(rec.Approvals, a)
		// §6 "Looking up": approved while an approval waits for the
		// browser's request: neither used up nor expired (W106).
		x, ok := parseTime(h["x:"+rev])
		if rec.Status == storedriver.StatusWaiting && a.UsedAt.IsZero() && ok && !now.After(x) {
			rec.Status = storedriver.StatusApproved
		}
	}
	// W75: an expired operation's ref gets invalid_request.
	rec.Expired = rec.Status == storedriver.StatusWaiting && now.After(curOp.ExpiresAt)
	return rec, true
}

// onceKey is the Redis key of a single-use key: with its owner's records
// for a key made by storekit.OnceKey (so Record can use it up in the same
// script, on one Cluster slot), in a slot of its own otherwise.
func (s *rstore) onceKey(key string) string {
	if slot, id, ok := storekit.SplitOnceKey(key); ok {
		sum := sha256.Sum256([]byte(id))
		return s.prefix + "{" + slot + "}:jti:" + base64.RawURLEncoding.EncodeToString(sum[:15])
	}
	sum := sha256.Sum256([]byte(key))
	return s.prefix + "jti:{" + base64.RawURLEncoding.EncodeToString(sum[:15]) + "}"
}

// MarkedInTake reports that Take checks the marker its context names
// (storekit.MarkedInTake).
func (s *rstore) MarkedInTake() bool { return true }

// takeMarker returns the key take.lua is to check as the marker ctx
// names (storekit.WithMarker), its KEYS[4]; with none, the action key,
// which take.lua then doesn't check. A marker of another slot than the
// owner's can't be read in Take's step on a Cluster: it is checked by a
// step of its own first.
func (s *rstore) takeMarker(ctx context.Context, owner store.Owner, actKey string, now time.Time) (key string, err error) {
	m := storekit.MarkerOf(ctx)
	if m == "" {
		return actKey, nil
	}
	if slot, _, ok := storekit.SplitOnceKey(m); ok && slot == storekit.Slot(owner.Agent, owner.User) {
		return s.onceKey(m), nil
	}
	marked, err := s.Marked(ctx, m, now)
	if err != nil {
		return "", err
	}
	if marked {
		return "", storekit.ErrMarked
	}
	return actKey, nil
}

// Marked reports whether key is marked by UseOnce and not expired at now,
// without marking it (storekit.OnceMarked): a step of its own, so that
// it shares round trips with the others (Options.Pipelines).
func (s *rstore) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("redisstore: marked: %w", err)
	}
	n, err := s.run(ctx, s.client, markedStep, []string{s.onceKey(key)}, ns(now)).Int()
	if err != nil {
		s.failed(err)
		return false, fmt.Errorf("redisstore: marked: %w", err)
	}
	return n == 1, nil
}

// UseOnce implements store.Store.
func (s *rstore) UseOnce(ctx context.Context, key string, until time.Time, now time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("redisstore: use once: %w", err)
	}
	if refused, err := s.markerRefused(ctx, now); err != nil {
		return false, fmt.Errorf("redisstore: use once: %w", err)
	} else if refused {
		return false, fmt.Errorf("redisstore: use once: %w", errOverallCap)
	}
	n, err := s.run(ctx, s.client, useOnceStep, []string{s.onceKey(key)}, ns(until), ns(now)).Int()
	if err != nil {
		s.failed(err)
		return false, fmt.Errorf("redisstore: use once: %w", err)
	}
	if n == 1 {
		s.markers.add(ctx, s.client, until, 1, now)
	}
	return n == 1, nil
}
