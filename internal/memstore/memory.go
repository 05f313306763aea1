// Package memstore is the in-memory store: a Kit's default (webkit.New),
// right for a website that runs as one process, and the reference the
// Redis store is compared with (internal/storetest's differential).
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/computed"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// New returns a store for a website that runs as one process. Every method is one critical section under one
// mutex, which is what makes Take claim at most once (§7 W135).
//
// It follows the caller's clock: whether a record is forgotten is judged
// by the now each call passes, never by time.Now, so answers never depend
// on when memory is given back. Nothing grows with expired records, and no
// call holds the lock for long (webkit/RULES.md "Bounded work"): every
// record sits in an expiry heap, and each call drops at most
// memSweepBudget expired records, O(log n) each; each map is split into
// shards, and a shard that has shrunk to an eighth of its peak is rebuilt,
// because a Go map never gives back the memory of deleted entries. A
// goroutine of the store's own drops the rest, about a millisecond of
// lock at a time, so that after a mass expiry the heap returns to about an
// empty store's with no further call: it goes by the latest now a call
// passed, and counts time on by the machine's clock only once no call has
// come for a minute. It starts with the store's first record and ends by
// itself once the store is empty or no longer referenced; there is nothing
// to stop. Once performed, an operation keeps only its account, its id
// and the names of its revisions (Record), and its audit entries (Entry:
// approval recorded, claimed, performed) in one compact string
// (memlog.go): about 660 bytes in all (TestMemoryRetainedOperation).
//
// It keeps its records in the process: a restart forgets every
// approval, and every claim with it, which can lose an approval but never
// perform one twice (webkit/RULES.md "Durability"). A performed operation is
// remembered for 24 hours at least (§7 W137); an agent and User may have 100
// open operations (waiting: not being performed, not performed, not
// forgotten), and an agent 10,000: a request that would open one more gets
// ErrRateLimited.
func New(cfg Config) *Store {
	return &Store{m: &memory{cfg: cfg}}
}

// Config is what a test may set: zero fields are the defaults, a negative
// cap is none.
type Config = storekit.MemoryConfig

// Store is the memory store: a store.Store for a website (Kit's default),
// whose Driver is the kit's steps.
type Store struct{ m *memory }

// Driver is the store's steps (storedriver.Store).
func (s *Store) Driver() any { return s.m }

// Steps is Driver, typed, for the kit's tests.
func (s *Store) Steps() storedriver.Store { return s.m }

// Size reports how many records the store holds (operations, actions,
// single-use marks and claim tokens).
func (s *Store) Size() int { return s.m.size() }

// The steps, for the kit's tests that call the store directly (the kit
// itself calls Driver's).

func (s *Store) Take(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	return s.m.Take(ctx, owner, action, now)
}

func (s *Store) Finish(ctx context.Context, claim store.Claim, outcome store.Outcome, now time.Time) error {
	return s.m.Finish(ctx, claim, outcome, now)
}

func (s *Store) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	return s.m.Lookup(ctx, owner, ref, now)
}

func (s *Store) Record(ctx context.Context, owner store.Owner, ref string, approval store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	return s.m.Record(ctx, owner, ref, approval, now, opts)
}

func (s *Store) Release(ctx context.Context, owner store.Owner, token string, now time.Time) (bool, error) {
	return s.m.Release(ctx, owner, token, now)
}

func (s *Store) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	return s.m.UseOnce(ctx, key, until, now)
}

// Performing is store.Store's.
func (s *Store) Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error] {
	return s.m.Performing(ctx, claimedBefore, now)
}

// Resolve is store.Store's: by goes in the step's audit entry.
func (s *Store) Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, by string, now time.Time) error {
	return s.m.Resolve(storedriver.WithEntry(ctx, store.Entry{By: by}), owner, operationID, outcome, now)
}

// Entries is store.Store's.
func (s *Store) Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[store.Entry, error] {
	return s.m.Entries(ctx, operationID, from, to)
}

// memory is New's store; its zero value is ready to use.
type memory struct {
	// cfg is what a test may set (New): zero fields are the defaults. Set
	// before the first call.
	cfg storekit.MemoryConfig

	mu         sync.Mutex
	sealer     *computed.Sealer                 // made on first use
	ops        shrinkMap[memKey, *memOperation] // (slot, operation_id)
	actions    shrinkMap[memKey, *memAction]    // (slot, storekit.ActionDigest(account, key))
	once       shrinkMap[string, *memTimer]     // UseOnce key → until
	claims     shrinkMap[string, *memClaim]     // claim token → its claim
	performing map[memKey]struct{}              // operations performing, for storedriver.StatusPerforming
	openOwner  shrinkMap[string, int]           // open operations by storekit.Slot(agent, user)
	openAgent  shrinkMap[string, int]           // open operations by agent
	logs       shrinkMap[memKey, *memOrphanLog] // audit logs that outlive their operation (memOperation.log)
	nlogs      int                              // audit logs, of operations and in logs
	openAll    int                              // open operations of every agent
	expiry     memHeap                          // every record, by when it is forgotten
	seq        uint64                           // order of recorded approvals (W95)

	sweeper memSweeper // the background sweep (memheap.go)
}

var _ storekit.InProcess = (*memory)(nil)

// InProcess reports true: memory never waits on I/O (storekit.InProcess).
func (m *memory) InProcess() bool { return true }

var (
	_ storedriver.Store = (*memory)(nil)
	_ store.Store       = (*Store)(nil)
)

// memMaxRevisions caps the revisions one operation keeps, so that a client
// asking for ever new terms cannot grow one operation without bound.
const memMaxRevisions = storekit.MaxRevisionsPerOperation

// memSweepBudget is how many expired records one call drops at most. Each
// costs O(log n), so a call's share is a fraction of a millisecond even at a
// million records; each call adds at most a few records, so sweeping keeps
// up with any rate of calls.
const memSweepBudget = 256

type memKey struct{ slot, id string }

type memState uint8

const (
	memOpen memState = iota
	memPerforming
	memPerformed
)

// memOperation is one stored operation. Once it is performed it keeps
// only what its status answer and §7 need (store.Record): its account,
// the names of its revisions and when it was claimed (which a computed
// neighbour's mayStore asks); everything else is in its *memPending,
// which Finish(Done) drops, so that a retained operation costs a few
// hundred bytes (BenchmarkMemoryRetained).
type memOperation struct {
	account  string   // its owner's; its agent and User are in memPending (Lookup names the caller's)
	actionID string   // its action's digest (its key's slot is the operation's): to find the live approvals
	order    []string // the revisions kept, oldest issued first: the last is the current one
	timer    memTimer // forgotten after timer.until
	// claimedAt is when it was last claimed: while performing, and once
	// performed (mayStore).
	claimedAt int64 // Unix ns (nanos): a time.Time would cost 16 bytes more
	state     memState
	logN      uint8 // memLog.n
	// unknown: an Unknown outcome was reported while performing.
	unknown bool
	// computed (its id was computed, and an approval stored it) or ka
	// (stored by Take, its operation not computable: its action keeps
	// naming it once it is performed, as redisstore's action key).
	computed, ka bool
	// answer is what the claim that performed it kept (storedriver.
	// WithAnswer): the first answer of an API or MCP server, for a retry
	// with the same approval (§7 P90, M90).
	answer []byte

	// logData, logUntil and logN are its audit log (memLog, memlog.go;
	// logData "" while it has none), kept in the operation: no key, timer
	// or allocation of its own while the operation is remembered. One
	// that outlives it moves to memory.logs. (One the operation outlives
	// is held until the operation is dropped or writes another entry, as
	// a forgotten one.)
	logData  string
	logUntil int64

	*memPending // nil once performed
}

// memPending is what an operation keeps until it is performed.
type memPending struct {
	agent, user string                  // its owner's (memOperation.account)
	revisions   map[string]*memRevision // every revision kept, by name
	approvals   []store.Approval        // recorded approvals, first recorded first (W81)

	// While performing: the claim's token, the revision it performs, and
	// the claimed approval's place among the action's live approvals (to
	// put it back on Release).
	token    string
	claimed  string
	claimSeq uint64
}

// actionKey is the key of op's action; its slot is op's (an owner's
// actions and operations are in its slot).
func (op *memOperation) actionKey() memKey { return memKey{op.timer.key.slot, op.actionID} }

// setOwner makes a new operation's owner o (its strings copied, so that
// the operation doesn't keep the caller's, a part of a request it
// parsed, alive), and its memPending.
func (op *memOperation) setOwner(o store.Owner) {
	op.account = strings.Clone(o.Account)
	op.memPending = &memPending{agent: strings.Clone(o.Agent), user: strings.Clone(o.User), revisions: make(map[string]*memRevision)}
}

// owner is whom the operation belongs to: its account only once it is
// performed.
func (op *memOperation) owner() store.Owner {
	if op.memPending == nil {
		return store.Owner{Account: op.account}
	}
	return store.Owner{Agent: op.agent, User: op.user, Account: op.account}
}

// current is the operation's current (latest issued) revision; "" for an
// operation just made, before its first.
func (op *memOperation) current() string {
	if len(op.order) == 0 {
		return ""
	}
	return op.order[len(op.order)-1]
}

// keeps says whether the operation keeps revision rev (W74).
func (op *memOperation) keeps(rev string) bool {
	if op.memPending != nil {
		return op.revisions[rev] != nil
	}
	return slices.Contains(op.order, rev)
}

type memRevision struct {
	op       store.Operation
	approved bool // an approval of it was recorded (used up or not)
	used     bool // its approval was used up by a browser request
}

// memAction is one owner's action: its current operation, and the approvals
// recorded for it that may still be taken, by the digest of their terms and
// first recorded first (W95), so that Take reads only those that can match
// its request (webkit/RULES.md "Bounded work").
type memAction struct {
	current string // operation_id; "" for none
	live    map[termsKey][]memLive
}

// termsKey is the digest of an action's canonical terms.
type termsKey [sha256.Size]byte

func keyOf(terms []byte) termsKey { return sha256.Sum256(terms) }

// addLive files l under its terms, in first-recorded order.
func (a *memAction) addLive(k termsKey, l memLive) {
	if a.live == nil {
		a.live = make(map[termsKey][]memLive)
	}
	list := a.live[k]
	i, _ := slices.BinarySearchFunc(list, l.seq, func(x memLive, seq uint64) int { return cmp.Compare(x.seq, seq) })
	a.live[k] = slices.Insert(list, i, l)
}

// removeLive drops op's live approval of rev, if it is filed.
func (a *memAction) removeLive(k termsKey, op, rev string) {
	a.setLive(k, slices.DeleteFunc(a.live[k], func(l memLive) bool { return l.op == op && l.revision == rev }))
}

// setLive files list as the live approvals of terms k; an empty list is
// none, and an action without any keeps no map (a map never shrinks, and a
// performed operation's action may be retained for a day).
func (a *memAction) setLive(k termsKey, list []memLive) {
	if len(list) > 0 {
		a.live[k] = list
		return
	}
	delete(a.live, k)
	if len(a.live) == 0 {
		a.live = nil
	}
}

type memLive struct {
	op, revision string
	seq          uint64 // when it was recorded, store-wide order
}

// memClaim is what a claim token names: the claimed operation, or a
// released token (W144).
type memClaim struct {
	timer    memTimer
	op       memKey
	released bool
}

func (m *memory) retention() time.Duration {
	if m.cfg.Retention > 0 {
		return m.cfg.Retention
	}
	return storekit.DefaultRetention
}

// lock takes the mutex, failing as every Store does when ctx is already
// done, and drops a bounded batch of expired records.
func (m *memory) lock(ctx context.Context, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: memory: %w", err)
	}
	m.mu.Lock()
	m.sweeper.saw(now)
	m.sweep(now)
	return nil
}

// unlock releases the mutex, starting the background sweep when the store
// holds records and none runs, or waking it when this call left expired
// records behind (memheap.go).
func (m *memory) unlock() {
	m.wakeSweep()
	m.mu.Unlock()
}

// size reports how many records the store holds (operations, actions,
// single-use marks and claim tokens), so tests can show that nothing grows
// without bound.
func (m *memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops.len() + m.actions.len() + m.once.len() + m.claims.len() + m.nlogs
}

// sweep drops up to memSweepBudget records the caller's now has made
// forgettable, earliest first.
func (m *memory) sweep(now time.Time) {
	for range memSweepBudget {
		if !m.dropExpired(now) {
			break
		}
	}
}

// dropExpired drops the record that is forgotten first, if now has made
// it forgettable, and reports whether it did.
func (m *memory) dropExpired(now time.Time) bool {
	t := m.expiry.popExpired(now)
	if t == nil {
		return false
	}
	switch t.kind {
	case memKindOp:
		m.dropOp(t.key)
	case memKindOnce:
		m.once.del(t.key.slot)
	case memKindClaim:
		m.claims.del(t.key.slot)
	case memKindLog:
		m.dropLog(t)
	}
	return true
}

// dropOp forgets an operation, and its action once nothing of the action
// is left.
func (m *memory) dropOp(k memKey) {
	op, ok := m.ops.get(k)
	if !ok {
		return
	}
	m.ops.del(k)
	delete(m.performing, k)
	if l, ok := op.auditLog(); ok {
		op.setLog(memLog{})
		if l.until > op.timer.until {
			// Kept longer than the operation (for the audit retention
			// after its latest entry): on a timer of its own.
			o := &memOrphanLog{timer: memTimer{until: l.until, kind: memKindLog, key: k}, memLog: l}
			m.logs.put(k, o)
			m.expiry.add(&o.timer)
		} else {
			m.nlogs--
		}
	}
	a, ok := m.actions.get(op.actionKey())
	if !ok {
		return
	}
	if a.current == k.id {
		a.current = ""
	}
	m.dropLive(k.id, op, a)
	if a.current == "" && len(a.live) == 0 {
		m.actions.del(op.actionKey())
	}
	if op.state == memOpen {
		m.opened(k.slot, op.agent, -1)
	}
}

// dropLive takes op's approvals that were not used up off its action's
// live lists: O(approvals of op).
func (m *memory) dropLive(id string, op *memOperation, a *memAction) {
	if op.memPending == nil {
		return // performed: dropped when it was
	}
	for _, ap := range op.approvals {
		if r := op.revisions[ap.Revision]; r != nil && ap.UsedAt.IsZero() {
			a.removeLive(keyOf(r.op.Terms), id, ap.Revision)
		}
	}
}

// opened counts an owner's and its agent's open operations (waiting: not
// being performed, not performed, not forgotten) up or down, as
// redisstore's sets of open operations count them. slot is the owner's
// (storekit.Slot, which every caller has at hand), agent its agent's.
func (m *memory) opened(slot, agent string, d int) {
	for _, c := range [...]struct {
		m *shrinkMap[string, int]
		k string
	}{{&m.openOwner, slot}, {&m.openAgent, agent}} {
		if n, _ := c.m.get(c.k); n+d > 0 {
			c.m.put(c.k, n+d)
		} else {
			c.m.del(c.k)
		}
	}
	m.openAll = max(m.openAll+d, 0)
}

// errOverallCap is what a call an overall cap refused returns
// (storekit.MemoryConfig.MaxOpen, MaxReplayMarkers; redisstore's
// Options).
var errOverallCap = fmt.Errorf("%w (%w)", storedriver.ErrRateLimited, storekit.ErrOverall)

// overAll says whether every agent together already has as many open
// operations as the overall cap allows, once those forgotten by now are
// dropped.
func (m *memory) overAll(now time.Time) bool {
	for over(m.openAll, m.cfg.MaxOpen, storekit.DefaultMaxOpen) {
		if !m.dropExpired(now) {
			return true
		}
	}
	return false
}

// markersFull says whether the store holds as many single-use markers as
// the overall cap allows, once those expired by now are dropped.
func (m *memory) markersFull(now time.Time) bool {
	for over(m.once.len(), m.cfg.MaxReplayMarkers, storekit.DefaultMaxReplayMarkers) {
		if !m.dropExpired(now) {
			return true
		}
	}
	return false
}

// overCaps says whether owner (in slot) already has as many open
// operations as its cap allows, or its agent as many as the agent's.
func (m *memory) overCaps(owner store.Owner, slot string) bool {
	byOwner, _ := m.openOwner.get(slot)
	byAgent, _ := m.openAgent.get(owner.Agent)
	return over(byOwner, m.cfg.MaxOpenPerOwner, storekit.DefaultMaxOpenPerOwner) ||
		over(byAgent, m.cfg.MaxOpenPerAgent, storekit.DefaultMaxOpenPerAgent)
}

// op returns the operation, or nil when it is unknown or forgotten: a
// record past its keep-until is gone whether or not a sweep has run yet, so
// answers never depend on when sweeps happen.
func (m *memory) op(slot, id string, now time.Time) *memOperation {
	op, _ := m.ops.get(memKey{slot, id})
	if op == nil || op.timer.past(now) {
		return nil
	}
	return op
}

// pruneLive drops the live approvals of terms k that can never be taken
// again: their operation is gone or performed, or their revision has
// expired (W103).
func (m *memory) pruneLive(slot string, a *memAction, k termsKey, now time.Time) {
	list := slices.DeleteFunc(a.live[k], func(l memLive) bool {
		op := m.op(slot, l.op, now)
		if op == nil || op.state == memPerformed {
			return true
		}
		r := op.revisions[l.revision]
		return r == nil || now.After(r.op.ExpiresAt)
	})
	a.setLive(k, list)
}

// keep makes op remembered at least until the given instant.
func (m *memory) keep(op *memOperation, until time.Time) { m.expiry.extend(&op.timer, until) }

// Issue returns the operation for owner's action: the current operation
// for the action key until it is performed (W19, W20), then a new
// operation_id (W141); its current revision while the terms are equal
// and the revision is reusable, else a new revision (W24, W25, W36).
// While the operation is being performed (or its outcome is not known)
// a new revision is one no approval can use until it is done (§6 check
// 2): no second operation of the action is offered for approval while
// the first may be taking effect (W145).
//
// It is Take without the approvals: the conformance suite sets up
// operations with it (storetest.Issue).
func (m *memory) Issue(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if err := m.lock(ctx, now); err != nil {
		return storedriver.TakeResult{}, err
	}
	defer m.unlock()
	slot := storekit.Slot(owner.Agent, owner.User)
	return m.issue(owner, memKey{slot, storekit.ActionDigest(owner.Account, action.Key)}, action, now)
}

// issue returns the action's operation and revision, reusing what it can
// (W19, W20, W39) and making new ones only when it must (W24, W25, W141).
// A new operation beyond the owner's or the agent's cap of open ones is
// ErrRateLimited. ak is the action's key (the owner's slot, the action's
// digest), which the caller has computed.
func (m *memory) issue(owner store.Owner, ak memKey, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	slot := ak.slot
	a, _ := m.actions.get(ak)
	op := (*memOperation)(nil)
	if a != nil {
		op = m.op(slot, a.current, now)
	}
	// W141: once performed, a new operation. While one is being performed
	// (or its outcome is not known) it stays the action's: a revision for
	// other terms is added to it, which no approval can use while it
	// performs (§6 check 2), so that no second operation of the action is
	// offered for approval while the first may be taking effect (W145).
	if op == nil || op.state == memPerformed {
		// As redisstore (§3: a Company doesn't have to store operations
		// that haven't been performed): nothing is stored for a new
		// operation while neither the action's (performed and marked ka)
		// nor the one computed is remembered; the caller gets it sealed in
		// its ref, and its first approval stores it. Terms too long for a
		// ref, or a lifetime beyond the retention, are stored. So is one
		// whose revision could still be approved after the epoch's turn,
		// under the operation_id computed now: the requests after the turn
		// then find it, and the action keeps one operation_id across the
		// turn (W19, W20; computed.Crosses).
		storeAs := ""
		if c, ok := m.computable(owner, ak.id, action, now); ok {
			k := m.sealerLocked()
			c.ID = k.ID(slot, c)
			if !(op != nil && op.ka) && m.op(slot, c.ID, now) == nil {
				// An API's or MCP server's revision is stored, under the
				// operation_id computed now: its approval names it, not a
				// ref (storedriver.TakeRequest.Via).
				if action.Via == "" && !computed.Crosses(now, c.Expires, m.retention()) {
					return computedIssued(k, slot, c), nil
				}
				storeAs = c.ID
			}
		}
		if m.overAll(now) {
			return storedriver.TakeResult{}, errOverallCap
		}
		if m.overCaps(owner, slot) {
			return storedriver.TakeResult{}, storedriver.ErrRateLimited
		}
		if storeAs != "" {
			if old, ok := m.ops.get(memKey{slot, storeAs}); ok { // forgotten by now, not swept yet
				m.expiry.remove(&old.timer)
				m.dropOp(memKey{slot, storeAs})
				a, _ = m.actions.get(ak)
			}
		}
		if a == nil {
			a = &memAction{}
			m.actions.put(ak, a)
		}
		a.current = storeAs
		if storeAs == "" {
			a.current = storekit.NewOperationID()
		}
		m.opened(slot, owner.Agent, +1)
		k := memKey{slot, a.current}
		op = &memOperation{actionID: ak.id, ka: storeAs == "", computed: storeAs != ""}
		op.setOwner(owner)
		// Kept until its first revision's expires_at (m.keep below), even
		// one already past (a fixed expires_at): forgotten from the start,
		// as redisstore judges it.
		op.timer = memTimer{kind: memKindOp, key: k}
		m.ops.put(k, op)
		m.expiry.add(&op.timer)
	}
	// The interface's latest revision: each revision is the one
	// interface's that returned it (storedriver.TakeRequest.Via).
	if cur := op.latest(action.Via); cur != nil && reusable(cur, action, now) {
		return storedriver.TakeResult{Operation: cur.op, Ref: storekit.MakeRef(cur.op.ID, cur.op.Revision)}, nil
	}
	expiresAt := action.ExpiresAt
	if expiresAt.IsZero() {
		expiresAt = now.Add(action.Lifetime)
	}
	// expires_at goes out in whole seconds (RFC 3339), so it is kept that
	// way: what an approval is judged by is exactly what the agent saw.
	expiresAt = time.Unix(expiresAt.Unix(), 0).UTC()
	r := &memRevision{op: store.Operation{
		ID:        a.current,
		Revision:  storekit.ViaRevision(storekit.NewRevision(expiresAt), action.Via),
		Summary:   action.Summary,
		Terms:     bytes.Clone(action.Terms),
		ExpiresAt: expiresAt,
	}}
	if action.Via != "" && op.current() != "" && storekit.RevisionVia(op.current()) == "" {
		// Another interface's revision never replaces the website's
		// current one, which Lookup and Record answer a website's refs
		// with (W72, W100).
		op.addBefore(r)
	} else {
		op.add(r)
	}
	m.keep(op, expiresAt)
	return storedriver.TakeResult{Operation: r.op, Ref: storekit.MakeRef(r.op.ID, r.op.Revision)}, nil
}

// over says whether n open operations reach a configured cap: its default
// when 0, none when negative.
func over(n, limit, def int) bool {
	switch {
	case limit < 0:
		return false
	case limit == 0:
		limit = def
	}
	return n >= limit
}

// reusable says whether the current revision can answer action again: same
// terms (W24), same fixed expires_at (W25) or at least half its lifetime left
// (W39), not expired, and never approved, so that an operation whose approval
// was used up without performing can be approved again (W98).
func reusable(r *memRevision, action storedriver.TakeRequest, now time.Time) bool {
	if r.approved || now.After(r.op.ExpiresAt) || !bytes.Equal(r.op.Terms, action.Terms) {
		return false
	}
	if !action.ExpiresAt.IsZero() {
		return r.op.ExpiresAt.Unix() == action.ExpiresAt.Unix()
	}
	return r.op.ExpiresAt.Sub(now) >= action.Lifetime/2
}

// latest is the latest issued revision of interface via that the
// operation keeps; nil for none.
func (op *memOperation) latest(via string) *memRevision {
	for i := len(op.order) - 1; i >= 0; i-- {
		if storekit.RevisionVia(op.order[i]) == via {
			return op.revisions[op.order[i]]
		}
	}
	return nil
}

// add makes r the operation's current revision, dropping the oldest
// never-approved one beyond memMaxRevisions. Approved revisions are kept
// for check 3 and "already recorded" (§6, §7).
func (op *memOperation) add(r *memRevision) {
	op.revisions[r.op.Revision] = r
	op.order = append(op.order, r.op.Revision)
	op.capRevisions()
}

// addBefore keeps r as a revision of the operation without making it the
// current one: a revision returned earlier than the current one (a
// computed ref sent after its operation was stored), which must not make
// Lookup name it instead of the current one (W72, §6 check 3).
func (op *memOperation) addBefore(r *memRevision) {
	op.revisions[r.op.Revision] = r
	op.order = slices.Insert(op.order, max(len(op.order)-1, 0), r.op.Revision)
	op.capRevisions()
}

// capRevisions drops the oldest never-approved revision but the current
// one beyond memMaxRevisions.
func (op *memOperation) capRevisions() {
	if len(op.order) > memMaxRevisions {
		for i, rev := range op.order[:len(op.order)-1] {
			if !op.revisions[rev].approved {
				delete(op.revisions, rev)
				op.order = slices.Delete(op.order, i, i+1)
				break
			}
		}
	}
}

func (m *memory) Take(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if err := m.lock(ctx, now); err != nil {
		return storedriver.TakeResult{}, err
	}
	defer m.unlock()
	// The marker the Gate names (Unbind's, for the browser's join
	// cookie), checked in the same step (storekit.MarkedInTake).
	if key := storekit.MarkerOf(ctx); key != "" {
		if prev, ok := m.once.get(key); ok && !prev.past(now) {
			return storedriver.TakeResult{}, fmt.Errorf("store: take: %w", storekit.ErrMarked)
		}
	}
	slot := storekit.Slot(owner.Agent, owner.User)
	token := action.ClaimToken
	if token != "" {
		// A Take repeated with its token (a lost reply) gets its own claim
		// again, and one after Release claims nothing (W144).
		if c, ok := m.claims.get(token); ok && !c.timer.past(now) {
			if c.released {
				return storedriver.TakeResult{}, storedriver.ErrClaimLost
			}
			op := m.op(c.op.slot, c.op.id, now)
			if c.op.slot != slot || op == nil || op.state != memPerforming || op.token != token {
				return storedriver.TakeResult{}, storedriver.ErrClaimLost
			}
			return storedriver.TakeResult{Claim: m.claimOf(op)}, nil
		}
	}
	// The action's approvals are filed under the owner's account as well, so
	// no other account's or signed-out approval is ever found (W104).
	ak := memKey{slot, storekit.ActionDigest(owner.Account, action.Key)}
	a, _ := m.actions.get(ak)
	busy := false
	if a != nil {
		// W145: the action's operation is being performed or its outcome
		// is not known: a request, whatever its terms, waits for it.
		if op := m.op(slot, a.current, now); op != nil && op.state == memPerforming {
			busy = true
		}
	}
	if a != nil && !busy {
		// Only approvals of these terms can pass check 3 (W117): they are
		// filed apart, so the others cost nothing here.
		k := keyOf(action.Terms)
		m.pruneLive(slot, a, k, now) // W103: expired and performed ones go
		for i, l := range a.live[k] {
			// Only an approval of this interface's revisions, and at an
			// API or MCP server only the one the request carries
			// (storedriver.TakeRequest.Via, Approved).
			if storekit.RevisionVia(l.revision) != action.Via || action.Via != "" && l.revision != action.Approved {
				continue
			}
			op := m.op(slot, l.op, now)
			r := op.revisions[l.revision]
			if !bytes.Equal(r.op.Terms, action.Terms) { // §6 check 3
				continue
			}
			if op.state == memPerforming { // W145: check 2 fails for now
				busy = true
				continue
			}
			if m.logFull(slot, l.op, now) { // webkit/RULES.md "Bounded work"
				return storedriver.TakeResult{}, fmt.Errorf("%w: the operation's audit log is full", storedriver.ErrRateLimited)
			}
			// W95: the first recorded match; W96: only it is used up.
			if token == "" {
				token = storekit.NewToken() // only a claim needs one
			}
			a.setLive(k, slices.Delete(a.live[k], i, i+1))
			r.used = true
			op.state = memPerforming
			m.opened(slot, op.agent, -1) // an approval bounds it now, not the caps
			op.token, op.claimed, op.claimSeq, op.claimedAt, op.unknown = token, l.revision, l.seq, nanos(now), false
			m.keep(op, now.Add(m.retention())) // W138
			for j := range op.approvals {
				ap := &op.approvals[j]
				if ap.Revision == l.revision && ap.UsedAt.IsZero() {
					ap.UsedAt = now
					break
				}
			}
			k := memKey{slot, l.op}
			if m.performing == nil {
				m.performing = make(map[memKey]struct{})
			}
			m.performing[k] = struct{}{}
			m.setClaim(token, &memClaim{op: k}, now)
			c := m.claimOf(op)
			m.log(op, newEntry(ctx, storekit.EntryClaimed, c.Owner, c.Operation, c.Approval, now))
			return storedriver.TakeResult{Claim: c}, nil
		}
	}
	if busy {
		// Answer 503 and issue nothing: a new operation now would invite a
		// second approval of an action that may be taking effect (§7).
		return storedriver.TakeResult{Busy: true}, nil
	}
	is, err := m.issue(owner, ak, action, now) // W99
	if err != nil {
		return storedriver.TakeResult{}, err
	}
	return is, nil
}

// setClaim files c under token until now+ClaimTokenTTL.
func (m *memory) setClaim(token string, c *memClaim, now time.Time) {
	if old, ok := m.claims.get(token); ok {
		m.expiry.remove(&old.timer)
	}
	c.timer = memTimer{until: instant(now.Add(storekit.ClaimTokenTTL)), kind: memKindClaim, key: memKey{slot: token}}
	m.claims.put(token, c)
	m.expiry.add(&c.timer)
}

// claimOf is the claim op's current claim makes.
func (m *memory) claimOf(op *memOperation) *store.Claim {
	var used store.Approval
	for _, ap := range op.approvals {
		if ap.Revision == op.claimed && !ap.UsedAt.IsZero() {
			used = ap
		}
	}
	return &store.Claim{Owner: op.owner(), Operation: op.revisions[op.claimed].op, Approval: used, Token: op.token}
}

func (m *memory) Finish(ctx context.Context, claim store.Claim, outcome store.Outcome, now time.Time) error {
	if outcome != store.OutcomePerformed && outcome != store.OutcomeNotPerformed && outcome != store.OutcomeUnknown {
		return fmt.Errorf("store: memory: finish: invalid outcome %d", outcome)
	}
	if err := m.lock(ctx, now); err != nil {
		return err
	}
	defer m.unlock()
	slot := storekit.Slot(claim.Owner.Agent, claim.Owner.User)
	op := m.op(slot, claim.Operation.ID, now)
	if op == nil || op.state != memPerforming || claim.Token == "" || op.token != claim.Token {
		return storedriver.ErrClaimLost
	}
	m.end(ctx, memKey{slot, claim.Operation.ID}, op, outcome, false, now)
	return nil
}

// end ends op's claim with outcome (Finish, Resolve when resolved), and
// writes its audit entry: none for an store.OutcomeUnknown outcome reported again,
// which changes nothing.
func (m *memory) end(ctx context.Context, k memKey, op *memOperation, outcome store.Outcome, resolved bool, now time.Time) {
	c, again := m.claimOf(op), outcome == store.OutcomeUnknown && op.unknown
	defer func() {
		if !again {
			m.log(op, newEntry(ctx, endEntry(outcome, resolved), c.Owner, c.Operation, c.Approval, now))
		}
	}()
	switch outcome {
	case store.OutcomePerformed:
		// The claim's token is never asked about again (as redisstore
		// deletes its key): a Take that names it is a new request.
		if c, ok := m.claims.get(op.token); ok {
			m.expiry.remove(&c.timer)
			m.claims.del(op.token)
		}
		// W137: remembered until the approved revision's expires_at, and for
		// Retention at least.
		op.state, op.token = memPerformed, ""
		// What an API or MCP server answered, for a retry with the same
		// approval (§7 P90, M90); none after Resolve.
		if !resolved {
			op.answer = bytes.Clone(storedriver.AnswerOf(ctx))
		}
		if r := op.revisions[op.claimed]; r != nil {
			m.keep(op, r.op.ExpiresAt)
		}
		m.keep(op, now.Add(m.retention()))
		if a, _ := m.actions.get(op.actionKey()); a != nil {
			m.dropLive(k.id, op, a) // W37: its other approvals are never taken
		}
		// Performed, it keeps only what its status and §7 need
		// (store.Record): its account and its revisions' names, not their
		// terms, summaries or approvals.
		op.memPending = nil
		if cap(op.order) > len(op.order) {
			op.order = slices.Clone(op.order)
		}
		delete(m.performing, k)
		// A computed operation's action no longer names it once it is
		// performed (as redisstore drops its action key): whether the
		// action names it or nothing, Take, Issue and Record answer the
		// same, and the action costs nothing while it is retained.
		if a, _ := m.actions.get(op.actionKey()); a != nil && !op.ka && a.current == k.id {
			a.current = ""
			if len(a.live) == 0 {
				m.actions.del(op.actionKey())
			}
		}
		if !op.ka {
			// Nothing asks for its action again (dropOp finds none): its
			// digest is not kept for the retention.
			op.actionID = ""
		}
	case store.OutcomeNotPerformed:
		// W98: the approval stays used up; the operation waits again.
		op.state, op.token = memOpen, ""
		m.opened(k.slot, op.agent, +1)
		delete(m.performing, k)
		// W90, W122: the used-up revision can't be approved again, so the
		// operation offers the same terms under a fresh revision, with the
		// same expires_at: Lookup then names a revision an approval can
		// still use, and the next request with these terms reuses it.
		if r := op.revisions[op.claimed]; r != nil && op.current() == op.claimed && !now.After(r.op.ExpiresAt) {
			fresh := r.op
			fresh.Revision = storekit.ViaRevision(storekit.NewRevision(fresh.ExpiresAt), storekit.RevisionVia(r.op.Revision))
			op.add(&memRevision{op: fresh})
		}
	case store.OutcomeUnknown:
		// W142, W138: still performing, and kept while it is; the claim
		// stays held so that the outcome can be reported once known, but it
		// can no longer be released: the action may have taken effect.
		op.unknown = true
		m.keep(op, now.Add(m.retention()))
	}
}

func (m *memory) Release(ctx context.Context, owner store.Owner, token string, now time.Time) (bool, error) {
	if err := m.lock(ctx, now); err != nil {
		return false, err
	}
	defer m.unlock()
	if token == "" {
		return false, nil
	}
	slot := storekit.Slot(owner.Agent, owner.User)
	c, ok := m.claims.get(token)
	if !ok || c.timer.past(now) {
		// Take hasn't run (or its token was forgotten): a Take that runs
		// later with this token claims nothing.
		m.setClaim(token, &memClaim{released: true}, now)
		return false, nil
	}
	if c.op.slot != slot && !c.released {
		return false, nil // another owner's claim
	}
	// Released, and remembered ClaimTokenTTL from now, as redisstore's key.
	wasReleased := c.released
	c.released = true
	m.setClaim(token, c, now)
	if wasReleased {
		return false, nil
	}
	op := m.op(c.op.slot, c.op.id, now)
	if op == nil || op.state != memPerforming || op.token != token || op.unknown {
		return false, nil // finished, or its outcome may be known: leave it
	}
	// W144: the operation waits again and the approval applies again, in
	// its first-recorded place (W95).
	cl := m.claimOf(op)
	m.log(op, newEntry(ctx, storekit.EntryReleased, cl.Owner, cl.Operation, cl.Approval, now))
	op.state, op.token, op.unknown = memOpen, "", false
	m.opened(c.op.slot, op.agent, +1)
	delete(m.performing, c.op)
	if r := op.revisions[op.claimed]; r != nil {
		r.used = false
	}
	for j := range op.approvals {
		ap := &op.approvals[j]
		if ap.Revision == op.claimed && !ap.UsedAt.IsZero() {
			ap.UsedAt = time.Time{}
			break
		}
	}
	a, _ := m.actions.get(op.actionKey())
	if a == nil {
		a = &memAction{}
		m.actions.put(op.actionKey(), a)
	}
	if r := op.revisions[op.claimed]; r != nil {
		a.addLive(keyOf(r.op.Terms), memLive{op: c.op.id, revision: op.claimed, seq: op.claimSeq})
	}
	return true, nil
}

func (m *memory) Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	if err := m.lock(ctx, now); err != nil {
		return storedriver.Found{}, false, err
	}
	defer m.unlock()
	slot := storekit.Slot(owner.Agent, owner.User)
	var op *memOperation
	if computed.IsSealed(ref) && storekit.ValidRef(ref) {
		c, rev, err := m.sealerLocked().Open(slot, ref)
		if err != nil {
			return storedriver.Found{}, false, nil // W74
		}
		if op = m.op(slot, c.ID, now); op == nil {
			if now.After(c.Expires) || !m.mayStore(slot, c, now) {
				return storedriver.Found{}, false, nil
			}
			return storedriver.Found{Owner: store.Owner{Agent: owner.Agent, User: owner.User, Account: c.Account}, Current: computedOperation(c, rev), Status: storedriver.StatusWaiting}, true, nil
		}
	} else if _, op = m.refOp(slot, ref, now); op == nil {
		return storedriver.Found{}, false, nil // W74
	}
	// The agent and User are the caller's: the slot they make named it.
	rec := storedriver.Found{Owner: store.Owner{Agent: owner.Agent, User: owner.User, Account: op.account}, Status: storedriver.StatusPerformed}
	if op.state == memPerformed {
		// W108, W109: what a performed operation keeps (store.Record).
		rec.Current = store.Operation{ID: op.timer.key.id, Revision: op.current()}
		return rec, true, nil
	}
	cur := op.revisions[op.current()].op
	rec.Current, rec.Status, rec.Approvals = cur, storedriver.StatusWaiting, slices.Clone(op.approvals)
	switch {
	case op.state == memPerforming:
		rec.Status = storedriver.StatusPerforming // W107
	case approved(op, now):
		rec.Status = storedriver.StatusApproved // W106
	default:
		rec.Expired = now.After(cur.ExpiresAt) // W75
	}
	return rec, true, nil
}

// approved says whether op has a recorded approval that is neither used up
// nor expired: O(approvals of op), which are capped.
func approved(op *memOperation, now time.Time) bool {
	for _, ap := range op.approvals {
		if r := op.revisions[ap.Revision]; r != nil && ap.UsedAt.IsZero() && !now.After(r.op.ExpiresAt) {
			return true
		}
	}
	return false
}

func (m *memory) Record(ctx context.Context, owner store.Owner, ref string, approval store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	if err := m.lock(ctx, now); err != nil {
		return storedriver.RecordReply{}, err
	}
	defer m.unlock()
	// The request's single-use key first: a replay records nothing, and
	// none is set past the overall cap of markers.
	if opts.Once != "" && m.markersFull(now) {
		return storedriver.RecordReply{Result: storedriver.RateLimited}, nil
	}
	if opts.Once != "" && !m.useOnce(opts.Once, opts.OnceUntil, now) {
		return storedriver.RecordReply{Result: storedriver.Replayed}, nil
	}
	slot := storekit.Slot(owner.Agent, owner.User)
	// What the approval adds is bounded in bytes: a long input_type or
	// reference is kept as absent, never refused (§6).
	approval.InputType, approval.Reference = storekit.KeptMembers(approval.InputType, approval.Reference)
	var id string
	var op *memOperation
	if computed.IsSealed(ref) && storekit.ValidRef(ref) {
		var res storedriver.RecordResult
		if id, op, res = m.storeComputed(owner, slot, ref, now); res != "" {
			return storedriver.RecordReply{Result: res}, nil
		}
	} else {
		id, op = m.refOp(slot, ref, now)
	}
	if op == nil {
		return storedriver.RecordReply{Result: storedriver.NotFound}, nil // W74, W45
	}
	// Check 1 (§3 "Who can approve it").
	if op.account != owner.Account {
		if owner.Account == "" {
			return storedriver.RecordReply{Result: storedriver.SignInRequired}, nil // W44
		}
		return storedriver.RecordReply{Result: storedriver.NotFound}, nil // W42, W43
	}
	// Check 2.
	switch op.state {
	case memPerforming:
		return storedriver.RecordReply{Result: storedriver.BeingPerformed}, nil
	case memPerformed:
		return storedriver.RecordReply{Result: storedriver.AlreadyPerformed, Answer: bytes.Clone(op.answer)}, nil
	}
	// Check 3: a revision returned for this operation (W114, W116), not
	// expired (W115, W18: expires_at itself is still accepted), and not used
	// up: a used-up approval can never apply again, so answering it
	// "already recorded" would be a 204 that records nothing usable (W90,
	// W91); it gets a revision that can still be approved instead (W122).
	r := op.revisions[approval.Revision]
	if approval.OperationID != id || r == nil || now.After(r.op.ExpiresAt) || r.used {
		cur := op.revisions[op.current()]
		if now.After(cur.op.ExpiresAt) {
			return storedriver.RecordReply{Result: storedriver.OperationExpired}, nil // W101
		}
		if cur.op.Revision == approval.Revision {
			// Only reachable with another operation's id (W116): the answer
			// must still not name the approval's revision (W122), so the
			// same terms get a fresh revision.
			cur = &memRevision{op: cur.op}
			cur.op.Revision = storekit.ViaRevision(storekit.NewRevision(cur.op.ExpiresAt), storekit.RevisionVia(cur.op.Revision))
			op.add(cur)
		}
		return storedriver.RecordReply{Result: storedriver.RevisionMismatch, Operation: cur.op}, nil // W100, W122
	}
	if r.approved {
		return storedriver.RecordReply{Result: storedriver.AlreadyRecorded, Operation: r.op}, nil // §7
	}
	if len(op.approvals) >= storekit.MaxApprovalsPerOperation {
		return storedriver.RecordReply{Result: storedriver.RateLimited}, nil // webkit/RULES.md "Bounded work"
	}
	if opts.Decline != "" {
		// §6 "Declining": nothing recorded but the decline's entry.
		if m.logFull(slot, id, now) {
			return storedriver.RecordReply{Result: storedriver.RateLimited}, nil // webkit/RULES.md "Bounded work"
		}
		approval.OperationID, approval.RecordedAt, approval.UsedAt = id, time.Time{}, time.Time{}
		e := newEntry(ctx, storekit.EntryDeclined, owner, r.op, approval, now)
		e.Reason = opts.Decline
		m.log(op, e)
		return storedriver.RecordReply{Result: storedriver.Recorded, Operation: r.op}, nil
	}
	if opts.CheckOnly {
		return storedriver.RecordReply{Result: storedriver.Recorded, Operation: r.op}, nil
	}
	r.approved = true
	approval.OperationID, approval.RecordedAt, approval.UsedAt = id, now, time.Time{}
	op.approvals = append(op.approvals, approval)
	m.keep(op, r.op.ExpiresAt) // W102
	m.log(op, newEntry(ctx, storekit.EntryRecorded, owner, r.op, approval, now))
	a, _ := m.actions.get(op.actionKey())
	if a == nil {
		a = &memAction{}
		m.actions.put(op.actionKey(), a)
	}
	m.seq++
	a.addLive(keyOf(r.op.Terms), memLive{op: id, revision: r.op.Revision, seq: m.seq})
	return storedriver.RecordReply{Result: storedriver.Recorded, Operation: r.op}, nil
}

// sealerLocked returns the store's sealer, made on first use
// with a secret of its own (the store is one process). m.mu is held.
func (m *memory) sealerLocked() *computed.Sealer {
	if m.sealer == nil {
		m.sealer, _ = computed.NewSealer(computed.NewSecret())
	}
	return m.sealer
}

// computable reports whether the operation for action (its digest) can be
// computed rather than stored, and returns what it would be, as
// redisstore computes it (computed.New).
func (m *memory) computable(owner store.Owner, digest string, action storedriver.TakeRequest, now time.Time) (computed.Op, bool) {
	return computed.New(now, m.retention(), digest, owner.Account, action.ExpiresAt, action.Lifetime, action.Terms, action.Summary, storekit.MaxRefLength)
}

// computedOperation is the operation c describes, its revision rev.
func computedOperation(c computed.Op, rev string) store.Operation {
	return store.Operation{ID: c.ID, Revision: rev, Summary: c.Summary, Terms: c.Terms, ExpiresAt: c.Expires}
}

// computedIssued is what Take and Issue answer for a computed operation.
func computedIssued(k *computed.Sealer, slot string, c computed.Op) storedriver.TakeResult {
	rev, ref := k.Issue(slot, c)
	return storedriver.TakeResult{Operation: computedOperation(c, rev), Ref: ref}
}

// mayStore reports whether an approval may store the computed operation c,
// as redisstore's record.lua judges it: its action names no other
// remembered operation (one performed counts only when marked ka, as
// redisstore drops the action key of others), and neither neighbour is
// remembered, unless it was performed before c was minted (W19, W141).
func (m *memory) mayStore(slot string, c computed.Op, now time.Time) bool {
	if a, _ := m.actions.get(memKey{slot, c.Action}); a != nil && a.current != c.ID {
		if cur := m.op(slot, a.current, now); cur != nil && (cur.state != memPerformed || cur.ka) {
			return false
		}
	}
	before, after := m.sealerLocked().Neighbours(slot, c)
	for _, id := range [...]string{before, after} {
		if n := m.op(slot, id, now); n != nil && (n.state != memPerformed || !n.computed || !fromNanos(n.claimedAt).Before(c.Minted)) {
			return false
		}
	}
	return true
}

// storeComputed is Record's first part for a computed ref: the operation
// it names, stored now if it wasn't, with the ref's revision (as
// redisstore's record.lua). res is the answer when there is nothing to
// check (not found, or over a cap).
func (m *memory) storeComputed(owner store.Owner, slot, ref string, now time.Time) (string, *memOperation, storedriver.RecordResult) {
	c, rev, err := m.sealerLocked().Open(slot, ref)
	if err != nil {
		return "", nil, storedriver.NotFound // W74
	}
	// The ref's revision is a part of the ref: cloned, so that the
	// operation doesn't keep the whole ref.
	rev = strings.Clone(rev)
	revision := &memRevision{op: computedOperation(c, rev)}
	revision.op.Terms = bytes.Clone(c.Terms)
	if op := m.op(slot, c.ID, now); op != nil {
		// Stored already: an open one gets the ref's revision if it does
		// not keep it (W20), unless it has expired: an expired revision
		// fails check 3 whatever the operation keeps, and must never
		// become its current one, which would make a live operation read
		// as expired (§6 check 3, W72, W101). It becomes the current one
		// only if it lives at least as long as the current one.
		if op.state == memOpen && op.revisions[rev] == nil && !now.After(c.Expires) {
			if cur := op.revisions[op.current()]; cur != nil && cur.op.ExpiresAt.After(c.Expires) && storekit.RevisionVia(cur.op.Revision) == "" {
				op.addBefore(revision)
			} else {
				op.add(revision)
			}
			m.keep(op, c.Expires)
		}
		return c.ID, op, ""
	}
	if now.After(c.Expires) || !m.mayStore(slot, c, now) {
		return "", nil, storedriver.NotFound
	}
	if m.overCaps(owner, slot) || m.overAll(now) {
		return "", nil, storedriver.RateLimited
	}
	k := memKey{slot, c.ID}
	if old, ok := m.ops.get(k); ok {
		// Forgotten by now, not swept yet.
		m.expiry.remove(&old.timer)
		m.dropOp(k)
	}
	ak := memKey{slot, c.Action}
	a, _ := m.actions.get(ak)
	if a == nil {
		a = &memAction{}
		m.actions.put(ak, a)
	}
	a.current = c.ID
	op := &memOperation{actionID: ak.id, computed: true}
	op.setOwner(store.Owner{Agent: owner.Agent, User: owner.User, Account: c.Account})
	m.opened(slot, op.agent, +1)
	op.timer = memTimer{kind: memKindOp, key: k}
	m.ops.put(k, op)
	m.expiry.add(&op.timer)
	op.add(revision)
	m.keep(op, c.Expires)
	return c.ID, op, ""
}

// refOp returns the operation a ref names, or nil when the ref is malformed,
// its operation unknown or forgotten, or its revision not one the operation
// keeps: a ref the Company never returned is not found (§4 "Any other
// reference", W74).
func (m *memory) refOp(slot, ref string, now time.Time) (string, *memOperation) {
	id, rev, ok := storekit.SplitRef(ref)
	if !ok {
		return "", nil
	}
	op := m.op(slot, id, now)
	if op == nil || !op.keeps(rev) {
		return "", nil
	}
	return id, op
}

func (m *memory) UseOnce(ctx context.Context, key string, until time.Time, now time.Time) (bool, error) {
	if err := m.lock(ctx, now); err != nil {
		return false, err
	}
	defer m.unlock()
	if m.markersFull(now) {
		return false, errOverallCap
	}
	return m.useOnce(key, until, now), nil
}

// MarkedInTake reports that Take checks the marker its context names
// (storekit.MarkedInTake).
func (m *memory) MarkedInTake() bool { return true }

// Marked reports whether key is marked by UseOnce and not expired at now,
// without marking it (storekit.OnceMarked).
func (m *memory) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	if err := m.lock(ctx, now); err != nil {
		return false, err
	}
	defer m.unlock()
	prev, ok := m.once.get(key)
	return ok && !prev.past(now), nil
}

// useOnce marks key used until until; false when it was already.
func (m *memory) useOnce(key string, until, now time.Time) bool {
	if prev, ok := m.once.get(key); ok {
		if !prev.past(now) {
			return false
		}
		m.expiry.remove(prev)
	}
	t := &memTimer{until: instant(until), kind: memKindOnce, key: memKey{slot: key}}
	m.once.put(key, t)
	m.expiry.add(t)
	return true
}

// storedriver.StatusPerforming implements Store. The store holds an index of performing
// operations, so it reads only them, and yields outside its lock.
func (m *memory) Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error] {
	return func(yield func(store.Stuck, error) bool) {
		if err := m.lock(ctx, now); err != nil {
			yield(store.Stuck{}, err)
			return
		}
		var out []store.Stuck
		for k := range m.performing {
			op := m.op(k.slot, k.id, now)
			if op == nil || op.state != memPerforming || !fromNanos(op.claimedAt).Before(claimedBefore) {
				continue
			}
			c := m.claimOf(op)
			out = append(out, store.Stuck{Claim: store.Claim{Owner: op.owner(), Operation: c.Operation, Approval: c.Approval}, ClaimedAt: fromNanos(op.claimedAt), Unknown: op.unknown})
		}
		m.unlock()
		for _, s := range out {
			if !yield(s, nil) {
				return
			}
		}
	}
}

// Resolve implements Store.
func (m *memory) Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, now time.Time) error {
	if outcome != store.OutcomePerformed && outcome != store.OutcomeNotPerformed {
		return fmt.Errorf("store: memory: resolve: outcome must be performed or not performed, not %v", outcome)
	}
	if err := m.lock(ctx, now); err != nil {
		return err
	}
	defer m.unlock()
	slot := storekit.Slot(owner.Agent, owner.User)
	op := m.op(slot, operationID, now)
	if op == nil || op.state != memPerforming || op.account != owner.Account {
		return store.ErrNotPerforming
	}
	m.end(ctx, memKey{slot, operationID}, op, outcome, true, now)
	return nil
}

// endEntry is what the entry of a claim's end says.
func endEntry(outcome store.Outcome, resolved bool) string {
	switch {
	case resolved && outcome == store.OutcomePerformed:
		return storekit.EntryResolved
	case resolved:
		return storekit.EntryResolvedNotDo
	case outcome == store.OutcomePerformed:
		return storekit.EntryPerformed
	case outcome == store.OutcomeNotPerformed:
		return storekit.EntryNotPerformed
	}
	return storekit.EntryUnknown
}

func (m *memory) auditRetention() time.Duration {
	if m.cfg.AuditRetention > 0 {
		return m.cfg.AuditRetention
	}
	return storekit.DefaultAuditRetention
}

// auditLog is op's audit log; ok is false when it has none.
func (op *memOperation) auditLog() (l memLog, ok bool) {
	return memLog{data: op.logData, until: op.logUntil, n: op.logN}, op.logData != ""
}

// setLog makes l op's audit log (memLog{}: none).
func (op *memOperation) setLog(l memLog) { op.logData, op.logUntil, op.logN = l.data, l.until, l.n }

// logOf returns the audit log of (slot, id): its operation's, or one
// that outlived it; ok is false when there is none or it is forgotten by
// now.
func (m *memory) logOf(k memKey, now time.Time) (l memLog, ok bool) {
	if op, _ := m.ops.get(k); op != nil && op.logData != "" {
		l, ok = op.auditLog()
	} else if o, _ := m.logs.get(k); o != nil {
		l, ok = o.memLog, true
	}
	return l, ok && !l.forgottenAt(now)
}

// dropLog forgets the log that outlived its operation whose timer is t.
func (m *memory) dropLog(t *memTimer) {
	if o, _ := m.logs.get(t.key); o != nil && &o.timer == t {
		m.logs.del(t.key)
		m.nlogs--
	}
}

// logFull says whether the operation's audit log holds as many entries
// as a decline or a claim may find (storekit.EntriesBeforeRefusal).
func (m *memory) logFull(slot, id string, now time.Time) bool {
	l, ok := m.logOf(memKey{slot, id}, now)
	return ok && int(l.n) >= storekit.EntriesBeforeRefusal
}

// log appends e to the audit log of op, in the step that commits it, and
// keeps the log for the audit retention after e, and at least as long as
// op is remembered. A log that outlived an earlier operation of the same
// id and is still kept becomes op's.
func (m *memory) log(op *memOperation, e store.Entry) {
	l, ok := op.auditLog()
	if k := op.timer.key; !ok {
		if o, _ := m.logs.get(k); o != nil {
			m.logs.del(k)
			m.expiry.remove(&o.timer)
			l, ok = o.memLog, true
		}
	}
	if ok && l.forgottenAt(e.At) { // forgotten by now
		l, ok = memLog{}, false
		m.nlogs--
	}
	if !ok {
		l = memLog{until: math.MinInt64}
		m.nlogs++
	}
	l.add(e)
	l.keep(e.At.Add(m.auditRetention()))
	l.until = max(l.until, op.timer.until)
	op.setLog(l)
}

// Entries implements Store. It reads one shard of the logs at a time
// under the lock, and yields outside it.
func (m *memory) Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		for i := range memShards {
			// Not m.lock: to is the caller's now for these entries only, and
			// must not sweep what a later call still finds.
			if err := ctx.Err(); err != nil {
				yield(store.Entry{}, fmt.Errorf("store: memory: %w", err))
				return
			}
			m.mu.Lock()
			var out []store.Entry
			add := func(id string, l memLog, ok bool) {
				if ok && (operationID == "" || id == operationID) && !l.forgottenAt(to) {
					out = append(out, l.entries(id, from, to)...)
				}
			}
			for k, op := range m.ops.shards[i].m {
				l, ok := op.auditLog()
				add(k.id, l, ok)
			}
			for k, o := range m.logs.shards[i].m {
				add(k.id, o.memLog, true)
			}
			m.mu.Unlock()
			for _, e := range out {
				if !yield(e, nil) {
					return
				}
			}
		}
	}
}

// newEntry is the entry of a step of the memory store (which gives it
// its ID).
func newEntry(ctx context.Context, what string, owner store.Owner, op store.Operation, ap store.Approval, now time.Time) store.Entry {
	e := storedriver.EntryOf(ctx)
	e.What, e.At, e.Owner = what, now, owner
	e.TermsDigest = storedriver.TermsDigest(op.Terms)
	op.Terms = nil
	e.Operation, e.Approval = op, ap
	return e
}
