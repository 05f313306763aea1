package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is the Store for a website that runs as one process. Its zero
// value is ready to use; [NewMemory] returns one too. Every method is one
// critical section under one mutex, which is what makes Take claim at most
// once (§7 W135).
//
// Memory follows the caller's clock only: records are forgotten, and swept
// away, by the now each call passes, never by time.Now. Nothing grows with
// expired records: a sweep runs on the calls themselves, at most once a
// minute of the caller's clock or when the store has doubled since the last
// one, so its cost is amortised, and no goroutine is ever started.
type Memory struct {
	// Retention is how long a performed operation is remembered at least,
	// beyond its approved revision's expires_at, and how long a performing
	// one is kept since its claim or its last Unknown (§7 W137, W138).
	// Zero means DefaultRetention. Set it before the first call.
	Retention time.Duration

	mu      sync.Mutex
	ops     map[memKey]*memOperation // (slot, operation_id)
	actions map[memKey]*memAction    // (slot, ActionDigest(account, key))
	once    map[string]time.Time     // UseOnce key → until

	nextSweep time.Time
	sweptLen  int // Len after the last sweep
}

// NewMemory returns an empty Memory with DefaultRetention.
func NewMemory() *Memory { return &Memory{} }

var _ Store = (*Memory)(nil)

// memMaxRevisions caps the revisions one operation keeps, so that a client
// asking for ever new terms cannot grow one operation without bound.
const memMaxRevisions = 32

// memSweepEvery is how often, in the caller's time, the whole store is swept.
const memSweepEvery = time.Minute

type memKey struct{ slot, id string }

type memState int

const (
	memOpen memState = iota
	memPerforming
	memPerformed
)

type memOperation struct {
	owner     Owner
	action    memKey // its action's key, to find the live approvals
	state     memState
	current   string                  // the current revision
	revisions map[string]*memRevision // every revision kept
	order     []string                // revisions, oldest issued first
	approvals []Approval              // recorded approvals, first recorded first (W81)
	token     string                  // the claim's token while performing
	claimed   string                  // the revision the claim is performing
	keepUntil time.Time               // forgotten after this instant
}

type memRevision struct {
	op       Operation
	approved bool // an approval of it was recorded (used up or not)
	used     bool // its approval was used up by a browser request
}

// memAction is one owner's action: its current operation, and the approvals
// recorded for it that may still be taken, first recorded first (W95).
type memAction struct {
	current string // operation_id; "" for none
	live    []memLive
}

type memLive struct{ op, revision string }

func (m *Memory) retention() time.Duration {
	if m.Retention > 0 {
		return m.Retention
	}
	return DefaultRetention
}

// lock takes the mutex, failing as every Store does when ctx is already
// done, and sweeps when a sweep is due.
func (m *Memory) lock(ctx context.Context, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: memory: %w", err)
	}
	m.mu.Lock()
	if m.ops == nil {
		m.ops = make(map[memKey]*memOperation)
		m.actions = make(map[memKey]*memAction)
		m.once = make(map[string]time.Time)
	}
	if !now.Before(m.nextSweep) || m.lenLocked() > 2*m.sweptLen+1024 {
		m.sweep(now)
	}
	return nil
}

// Len reports how many records the store holds (operations, actions and
// single-use marks), so tests can show that nothing grows without bound.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lenLocked()
}

func (m *Memory) lenLocked() int { return len(m.ops) + len(m.actions) + len(m.once) }

// sweep drops every record the caller's now has made forgettable.
func (m *Memory) sweep(now time.Time) {
	for k, op := range m.ops {
		if now.After(op.keepUntil) {
			delete(m.ops, k)
		}
	}
	for k, a := range m.actions {
		m.pruneLive(k.slot, a, now)
		if a.current != "" && m.ops[memKey{k.slot, a.current}] == nil {
			a.current = ""
		}
		if a.current == "" && len(a.live) == 0 {
			delete(m.actions, k)
		}
	}
	for k, until := range m.once {
		if now.After(until) {
			delete(m.once, k)
		}
	}
	m.nextSweep = now.Add(memSweepEvery)
	m.sweptLen = m.lenLocked()
}

// op returns the operation, or nil when it is unknown or forgotten: a
// record past its keepUntil is gone whether or not a sweep has run yet, so
// answers never depend on when sweeps happen.
func (m *Memory) op(slot, id string, now time.Time) *memOperation {
	op := m.ops[memKey{slot, id}]
	if op == nil || now.After(op.keepUntil) {
		return nil
	}
	return op
}

// pruneLive drops the live approvals that can never be taken again: their
// operation is gone or performed, or their revision has expired (W103).
func (m *Memory) pruneLive(slot string, a *memAction, now time.Time) {
	a.live = slices.DeleteFunc(a.live, func(l memLive) bool {
		op := m.op(slot, l.op, now)
		if op == nil || op.state == memPerformed {
			return true
		}
		r := op.revisions[l.revision]
		return r == nil || now.After(r.op.ExpiresAt)
	})
}

func (m *Memory) Issue(ctx context.Context, owner Owner, action Action, now time.Time) (Issued, error) {
	if err := m.lock(ctx, now); err != nil {
		return Issued{}, err
	}
	defer m.mu.Unlock()
	return m.issue(owner, action, now), nil
}

// issue returns the action's operation and revision, reusing what it can
// (W19, W20, W39) and making new ones only when it must (W24, W25, W141).
func (m *Memory) issue(owner Owner, action Action, now time.Time) Issued {
	slot := Slot(owner.Agent, owner.User)
	ak := memKey{slot, ActionDigest(owner.Account, action.Key)}
	a := m.actions[ak]
	if a == nil {
		a = &memAction{}
		m.actions[ak] = a
	}
	op := m.op(slot, a.current, now)
	if op == nil || op.state != memOpen { // W141: performing or performed → new operation
		a.current = NewOperationID()
		op = &memOperation{owner: owner, action: ak, revisions: make(map[string]*memRevision)}
		m.ops[memKey{slot, a.current}] = op
	}
	if cur := op.revisions[op.current]; cur != nil && reusable(cur, action, now) {
		return Issued{Operation: cur.op, Ref: MakeRef(cur.op.ID, cur.op.Revision)}
	}
	expiresAt := action.ExpiresAt
	if expiresAt.IsZero() {
		expiresAt = now.Add(action.Lifetime)
	}
	// expires_at goes out in whole seconds (RFC 3339), so it is kept that
	// way: what an approval is judged by is exactly what the agent saw.
	expiresAt = time.Unix(expiresAt.Unix(), 0).UTC()
	r := &memRevision{op: Operation{
		ID:        a.current,
		Revision:  NewRevision(expiresAt),
		Summary:   action.Summary,
		Terms:     bytes.Clone(action.Terms),
		ExpiresAt: expiresAt,
	}}
	op.add(r)
	op.keep(expiresAt)
	return Issued{Operation: r.op, Ref: MakeRef(r.op.ID, r.op.Revision)}
}

// reusable says whether the current revision can answer action again: same
// terms (W24), same fixed expires_at (W25) or at least half its lifetime left
// (W39), not expired, and never approved, so that an operation whose approval
// was used up without performing can be approved again (W98).
func reusable(r *memRevision, action Action, now time.Time) bool {
	if r.approved || now.After(r.op.ExpiresAt) || !bytes.Equal(r.op.Terms, action.Terms) {
		return false
	}
	if !action.ExpiresAt.IsZero() {
		return r.op.ExpiresAt.Unix() == action.ExpiresAt.Unix()
	}
	return r.op.ExpiresAt.Sub(now) >= action.Lifetime/2
}

// add makes r the operation's current revision, dropping the oldest
// never-approved one beyond memMaxRevisions. Approved revisions are kept
// for check 3 and "already recorded" (§6, §7).
func (op *memOperation) add(r *memRevision) {
	op.revisions[r.op.Revision] = r
	op.order = append(op.order, r.op.Revision)
	op.current = r.op.Revision
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

func (op *memOperation) keep(until time.Time) {
	if until.After(op.keepUntil) {
		op.keepUntil = until
	}
}

func (m *Memory) Take(ctx context.Context, owner Owner, action Action, now time.Time) (TakeResult, error) {
	if err := m.lock(ctx, now); err != nil {
		return TakeResult{}, err
	}
	defer m.mu.Unlock()
	slot := Slot(owner.Agent, owner.User)
	// The action's approvals are filed under the owner's account as well, so
	// no other account's or signed-out approval is ever found (W104).
	a := m.actions[memKey{slot, ActionDigest(owner.Account, action.Key)}]
	busy := false
	if a != nil {
		m.pruneLive(slot, a, now) // W103: expired and performed ones go
		for i, l := range a.live {
			op := m.op(slot, l.op, now)
			r := op.revisions[l.revision]
			if !bytes.Equal(r.op.Terms, action.Terms) { // §6 check 3
				continue
			}
			if op.state == memPerforming { // W145: check 2 fails for now
				busy = true
				continue
			}
			// W95: the first recorded match; W96: only it is used up.
			a.live = slices.Delete(a.live, i, i+1)
			r.used = true
			op.state = memPerforming
			op.token, op.claimed = NewToken(), l.revision
			op.keep(now.Add(m.retention())) // W138
			var used Approval
			for j := range op.approvals {
				ap := &op.approvals[j]
				if ap.Revision == l.revision && ap.UsedAt.IsZero() {
					ap.UsedAt = now
					used = *ap
					break
				}
			}
			return TakeResult{Claim: &Claim{Owner: op.owner, Operation: r.op, Approval: used, Token: op.token}}, nil
		}
	}
	if busy {
		// Answer 503 and issue nothing: a new operation now would invite a
		// second approval of an action that may be taking effect (§7).
		return TakeResult{Busy: true}, nil
	}
	is := m.issue(owner, action, now) // W99
	return TakeResult{Issued: &is}, nil
}

func (m *Memory) Finish(ctx context.Context, claim Claim, outcome Outcome, now time.Time) error {
	if outcome != Done && outcome != NotDone && outcome != Unknown {
		return fmt.Errorf("store: memory: finish: invalid outcome %d", outcome)
	}
	if err := m.lock(ctx, now); err != nil {
		return err
	}
	defer m.mu.Unlock()
	slot := Slot(claim.Owner.Agent, claim.Owner.User)
	op := m.op(slot, claim.Operation.ID, now)
	if op == nil || op.state != memPerforming || claim.Token == "" || op.token != claim.Token {
		return ErrClaimLost
	}
	switch outcome {
	case Done:
		// W137: remembered until the approved revision's expires_at, and for
		// Retention at least.
		op.state, op.token = memPerformed, ""
		if r := op.revisions[op.claimed]; r != nil {
			op.keep(r.op.ExpiresAt)
		}
		op.keep(now.Add(m.retention()))
		if a := m.actions[op.action]; a != nil {
			m.pruneLive(slot, a, now) // W37: its other approvals are never taken
		}
	case NotDone:
		// W98: the approval stays used up; the operation waits again.
		op.state, op.token = memOpen, ""
		// W90, W122: the used-up revision can't be approved again, so the
		// operation offers the same terms under a fresh revision, with the
		// same expires_at: Lookup then names a revision an approval can
		// still use, and the next request with these terms reuses it.
		if r := op.revisions[op.claimed]; r != nil && op.current == op.claimed && !now.After(r.op.ExpiresAt) {
			fresh := r.op
			fresh.Revision = NewRevision(fresh.ExpiresAt)
			op.add(&memRevision{op: fresh})
		}
	case Unknown:
		// W142, W138: still performing, and kept while it is; the claim
		// stays held so that the outcome can be reported once known.
		op.keep(now.Add(m.retention()))
	}
	return nil
}

func (m *Memory) Lookup(ctx context.Context, owner Owner, ref string, now time.Time) (Record, bool, error) {
	if err := m.lock(ctx, now); err != nil {
		return Record{}, false, err
	}
	defer m.mu.Unlock()
	slot := Slot(owner.Agent, owner.User)
	id, op := m.refOp(slot, ref, now)
	if op == nil {
		return Record{}, false, nil // W74
	}
	cur := op.revisions[op.current].op
	rec := Record{Owner: op.owner, Current: cur, Status: Waiting, Approvals: slices.Clone(op.approvals)}
	switch {
	case op.state == memPerforming:
		rec.Status = Performing // W107
	case op.state == memPerformed:
		rec.Status = Performed // W108, W109
	case m.approved(slot, id, op, now):
		rec.Status = Approved // W106
	default:
		rec.Expired = now.After(cur.ExpiresAt) // W75
	}
	return rec, true, nil
}

// approved says whether op has a recorded approval that is neither used up
// nor expired.
func (m *Memory) approved(slot, id string, op *memOperation, now time.Time) bool {
	a := m.actions[op.action]
	if a == nil {
		return false
	}
	for _, l := range a.live {
		if l.op != id {
			continue
		}
		if r := op.revisions[l.revision]; r != nil && !now.After(r.op.ExpiresAt) {
			return true
		}
	}
	return false
}

func (m *Memory) Record(ctx context.Context, owner Owner, ref string, approval Approval, now time.Time, opts RecordOptions) (RecordReply, error) {
	if err := m.lock(ctx, now); err != nil {
		return RecordReply{}, err
	}
	defer m.mu.Unlock()
	slot := Slot(owner.Agent, owner.User)
	id, op := m.refOp(slot, ref, now)
	if op == nil {
		return RecordReply{Result: NotFound}, nil // W74, W45
	}
	// Check 1 (§3 "Who can approve it").
	if op.owner.Account != owner.Account {
		if owner.Account == "" {
			return RecordReply{Result: SignInRequired}, nil // W44
		}
		return RecordReply{Result: NotFound}, nil // W42, W43
	}
	// Check 2.
	switch op.state {
	case memPerforming:
		return RecordReply{Result: IsPerforming}, nil
	case memPerformed:
		return RecordReply{Result: IsPerformed}, nil
	}
	// Check 3: a revision returned for this operation (W114, W116), not
	// expired (W115, W18: expires_at itself is still accepted), and not used
	// up: a used-up approval can never apply again, so answering it
	// "already recorded" would be a 204 that records nothing usable (W90,
	// W91); it gets a revision that can still be approved instead (W122).
	r := op.revisions[approval.Revision]
	if approval.OperationID != id || r == nil || now.After(r.op.ExpiresAt) || r.used {
		cur := op.revisions[op.current]
		if now.After(cur.op.ExpiresAt) {
			return RecordReply{Result: OperationExpired}, nil // W101
		}
		if cur.op.Revision == approval.Revision {
			// Only reachable with another operation's id (W116): the answer
			// must still not name the approval's revision (W122), so the
			// same terms get a fresh revision.
			cur = &memRevision{op: cur.op}
			cur.op.Revision = NewRevision(cur.op.ExpiresAt)
			op.add(cur)
		}
		return RecordReply{Result: RevisionMismatch, Operation: cur.op}, nil // W100, W122
	}
	if r.approved {
		return RecordReply{Result: AlreadyRecorded, Operation: r.op}, nil // §7
	}
	if opts.CheckOnly {
		return RecordReply{Result: Recorded, Operation: r.op}, nil
	}
	r.approved = true
	approval.OperationID, approval.RecordedAt, approval.UsedAt = id, now, time.Time{}
	op.approvals = append(op.approvals, approval)
	op.keep(r.op.ExpiresAt) // W102
	a := m.actions[op.action]
	if a == nil {
		a = &memAction{}
		m.actions[op.action] = a
	}
	a.live = append(a.live, memLive{op: id, revision: r.op.Revision})
	return RecordReply{Result: Recorded, Operation: r.op}, nil
}

// refOp returns the operation a ref names, or nil when the ref is malformed,
// its operation unknown or forgotten, or its revision not one the operation
// keeps: a ref the Company never returned is not found (§4 "Any other
// reference", W74).
func (m *Memory) refOp(slot, ref string, now time.Time) (string, *memOperation) {
	id, rev, ok := SplitRef(ref)
	if !ok {
		return "", nil
	}
	op := m.op(slot, id, now)
	if op == nil || op.revisions[rev] == nil {
		return "", nil
	}
	return id, op
}

func (m *Memory) UseOnce(ctx context.Context, key string, until time.Time, now time.Time) (bool, error) {
	if err := m.lock(ctx, now); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	if prev, ok := m.once[key]; ok && !now.After(prev) {
		return false, nil
	}
	m.once[key] = until
	return true, nil
}
