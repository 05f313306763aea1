package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// ---- The epoch's turn, and revisions sent late (issue 34) ----
//
// A store that computes waiting operations into their refs computes their
// operation_ids per epoch (internal/computed): midnight UTC is a turn for
// the default retention of 24 hours, and for any that divides a day.

// turn is the first midnight UTC after base.
var turn = base.Truncate(24 * time.Hour).Add(24 * time.Hour)

var _ = add("W19 W20 one operation_id per waiting action across the epoch's turn", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_turn", `{"size":"M"}`)
	first := e.noClaim(signedIn, a, turn.Add(-2*time.Second)) // 23:59:58 UTC
	second := e.noClaim(signedIn, a, turn.Add(2*time.Second)) // 00:00:02 UTC
	if second.Operation.ID != first.Operation.ID {
		t.Fatalf("W19: the same waiting action got operation %s at 23:59:58 and %s at 00:00:02", first.Operation.ID, second.Operation.ID)
	}
	// W20: other terms after the turn, the same operation.
	other := e.noClaim(signedIn, action(t, "exchange:ord_turn", `{"size":"L"}`), turn.Add(3*time.Second))
	if other.Operation.ID != first.Operation.ID || other.Operation.Revision == first.Operation.Revision {
		t.Fatalf("W20: other terms after the turn: %s %s, want operation %s with another revision", other.Operation.ID, other.Operation.Revision, first.Operation.ID)
	}
	// The ref handed out before the turn is approved after it, and the
	// action is performed once; the ref from after the turn says so.
	e.approve(signedIn, first, turn.Add(4*time.Second))
	c := e.claim(signedIn, a, turn.Add(5*time.Second))
	if c.Operation.ID != first.Operation.ID {
		t.Fatalf("claimed %s, want %s", c.Operation.ID, first.Operation.ID)
	}
	e.finish(c, store.OutcomePerformed, turn.Add(6*time.Second))
	e.wantRecord(signedIn, second.Ref, approvalOf(second.Operation), turn.Add(7*time.Second), storedriver.AlreadyPerformed)
	e.status(signedIn, second.Ref, turn.Add(7*time.Second), storedriver.StatusPerformed)
	// W141: the next request is a new operation, and its approval
	// performs it once more.
	next := e.noClaim(signedIn, a, turn.Add(8*time.Second))
	if next.Operation.ID == first.Operation.ID {
		t.Fatalf("W141: after performing, issued the performed operation %s again", next.Operation.ID)
	}
	e.approve(signedIn, next, turn.Add(9*time.Second))
	if c := e.claim(signedIn, a, turn.Add(10*time.Second)); c.Operation.ID != next.Operation.ID {
		t.Fatalf("claimed %s, want %s", c.Operation.ID, next.Operation.ID)
	}
})

// Two web servers whose clocks disagree at the turn compute two
// operation_ids for one action: the one ahead a ref in the new epoch, the
// one behind a ref in the old. The action still keeps one operation: the
// other ref's approval stores nothing, before or after the action's
// operation is performed (W19, W135), whichever side was approved.
var _ = add("W19 W135 refs computed on both sides of the turn store one operation: the later one's refused", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_skew1", `{"size":"M"}`)
	// The server ahead computes its ref first: nothing is stored.
	ahead := e.noClaim(signedIn, a, turn.Add(2*time.Second))
	// The server behind: its revision could still be approved after the
	// turn, so the operation is stored, under the old epoch's id.
	behind := e.noClaim(signedIn, a, turn.Add(-10*time.Second))
	if ahead.Operation.ID == behind.Operation.ID {
		t.Skip("this store computes no operation_id per epoch")
	}
	e.wantRecord(signedIn, ahead.Ref, approvalOf(ahead.Operation), turn.Add(3*time.Second), storedriver.NotFound)
	e.approve(signedIn, behind, turn.Add(3*time.Second))
	e.finish(e.claim(signedIn, a, turn.Add(4*time.Second)), store.OutcomePerformed, turn.Add(4*time.Second))
	// Performed after the ref ahead was handed out: that ref can never
	// store a second operation of the action.
	e.wantRecord(signedIn, ahead.Ref, approvalOf(ahead.Operation), turn.Add(5*time.Second), storedriver.NotFound)
	if _, found := e.lookup(signedIn, ahead.Ref, turn.Add(5*time.Second)); found {
		t.Errorf("the ref from the other side of the turn is found after the action was performed")
	}
	if r := e.take(signedIn, a, turn.Add(6*time.Second)); r.Claim != nil {
		t.Fatalf("performed twice: %+v", r.Claim.Operation)
	}
})

var _ = add("W19 W135 refs computed on both sides of the turn store one operation: the earlier one's refused", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_skew2", `{"size":"M"}`)
	short := a
	short.Lifetime = time.Second // expires before the turn: computed, not stored
	// The server behind computes a ref whose revision expires before the
	// turn; the server ahead, one in the new epoch, which is approved and
	// performed first.
	behind := e.noClaim(signedIn, short, turn.Add(-3*time.Second))
	ahead := e.noClaim(signedIn, a, turn.Add(2*time.Second))
	if ahead.Operation.ID == behind.Operation.ID {
		t.Skip("this store computes no operation_id per epoch")
	}
	e.approve(signedIn, ahead, turn.Add(3*time.Second))
	e.finish(e.claim(signedIn, a, turn.Add(4*time.Second)), store.OutcomePerformed, turn.Add(4*time.Second))
	// The ref behind, still within its lifetime on its server's clock:
	// handed out before the action was performed, it stores nothing.
	at := turn.Add(-2 * time.Second)
	if _, found := e.lookup(signedIn, behind.Ref, at); found {
		t.Errorf("the ref from before the turn is found after the action was performed")
	}
	e.wantRecord(signedIn, behind.Ref, approvalOf(behind.Operation), at, storedriver.NotFound)
	if r := e.take(signedIn, short, at); r.Claim != nil {
		t.Fatalf("performed twice: %+v", r.Claim.Operation)
	}
})

// W141: once a stored operation of the action is performed, the next
// request's operation must be one its approval can store: a ref computed
// then would name an action whose operation is remembered, and every
// approval of it would be refused.
var _ = add("W141 after a stored operation is performed, the next operation can be approved", func(t *testing.T, e *env) {
	big := storedAction(t, "exchange:ord_next", `{"size":"M"}`)
	first := e.noClaim(signedIn, big, at(0))
	wantStored(t, first)
	e.approve(signedIn, first, at(time.Second))
	e.finish(e.claim(signedIn, big, at(2*time.Second)), store.OutcomePerformed, at(2*time.Second))
	// The same action with terms and a summary that fit a ref.
	small := action(t, "exchange:ord_next", `{"size":"L"}`)
	next := e.noClaim(signedIn, small, at(3*time.Second))
	if next.Operation.ID == first.Operation.ID {
		t.Fatalf("W141: issued the performed operation %s again", first.Operation.ID)
	}
	e.status(signedIn, next.Ref, at(4*time.Second), storedriver.StatusWaiting)
	e.approve(signedIn, next, at(4*time.Second))
	if c := e.claim(signedIn, small, at(5*time.Second)); c.Operation.ID != next.Operation.ID {
		t.Fatalf("claimed %s, want %s", c.Operation.ID, next.Operation.ID)
	}
})

// §6 check 3: a request failing it gets the operation, or invalid_request
// once the operation has expired. An expired revision sent late never
// makes a live operation read as expired: revision M expires at 10
// minutes; revision L, returned at 5 minutes and approved, is used up by a
// handler's 4xx, so a fresh revision of L's terms lives until 15 minutes;
// the M ref sent at 11 minutes fails check 3 with the operation's live
// revision, and L's ref still finds the live operation.
var _ = add("W72 W100 W101 an expired revision sent late never makes a live operation read as expired", func(t *testing.T, e *env) {
	m := e.noClaim(signedIn, action(t, "exchange:ord_late", `{"size":"M"}`), at(0))
	la := action(t, "exchange:ord_late", `{"size":"L"}`)
	l := e.noClaim(signedIn, la, at(5*time.Minute))
	if l.Operation.ID != m.Operation.ID {
		t.Fatalf("W20: %s then %s", m.Operation.ID, l.Operation.ID)
	}
	e.approve(signedIn, l, at(5*time.Minute))
	e.finish(e.claim(signedIn, la, at(6*time.Minute)), store.OutcomeNotPerformed, at(6*time.Minute)) // W98: the handler's 4xx
	fresh := e.status(signedIn, l.Ref, at(7*time.Minute), storedriver.StatusWaiting).Current
	if fresh.Revision == l.Operation.Revision || !fresh.ExpiresAt.Equal(l.Operation.ExpiresAt) {
		t.Fatalf("W122: after the 4xx the operation offers %+v", fresh)
	}
	late := at(11 * time.Minute)
	rep := e.wantRecord(signedIn, m.Ref, approvalOf(m.Operation), late, storedriver.RevisionMismatch)
	if rep.Operation.Revision != fresh.Revision {
		t.Errorf("W100 W122: check 3 answered revision %s, want the live %s", rep.Operation.Revision, fresh.Revision)
	}
	for name, ref := range map[string]string{"L's ref": l.Ref, "M's ref": m.Ref} {
		rec := e.status(signedIn, ref, late, storedriver.StatusWaiting)
		if rec.Expired || rec.Current.Revision != fresh.Revision {
			t.Errorf("%s after the expired M ref was sent: expired %v, current %s; want the live %s", name, rec.Expired, rec.Current.Revision, fresh.Revision)
		}
	}
	// The live revision is still approved and performed.
	e.approve(signedIn, storedriver.TakeResult{Operation: fresh, Ref: storekit.MakeRef(fresh.ID, fresh.Revision)}, late)
	if c := e.claim(signedIn, la, late.Add(time.Second)); c.Operation.Revision != fresh.Revision {
		t.Fatalf("claimed %s, want %s", c.Operation.Revision, fresh.Revision)
	}
	// Once every revision has expired, a late ref is the expired
	// operation's: invalid_request (W101), whether the store still keeps
	// it or not.
	m2 := e.noClaim(signedIn, action(t, "exchange:ord_late2", `{"size":"M"}`), at(0))
	e.approve(signedIn, m2, at(time.Minute))
	if rep := e.record(signedIn, m2.Ref, approvalOf(m2.Operation), at(lifetime+time.Minute)); rep.Result != storedriver.OperationExpired && rep.Result != storedriver.NotFound {
		t.Errorf("W101: the expired operation's ref: %v, want 400 (expired or not found)", rep.Result)
	}
})

// W72: a revision returned before the current one, sent while both live,
// is kept and can be approved, but doesn't replace the current one.
var _ = add("W72 a revision sent after a later one was stored doesn't become the current one", func(t *testing.T, e *env) {
	m := e.noClaim(signedIn, action(t, "exchange:ord_older", `{"size":"M"}`), at(0))
	la := action(t, "exchange:ord_older", `{"size":"L"}`)
	l := e.noClaim(signedIn, la, at(5*time.Minute))
	e.approve(signedIn, l, at(5*time.Minute))
	e.approve(signedIn, m, at(6*time.Minute))
	rec := e.status(signedIn, l.Ref, at(7*time.Minute), storedriver.StatusApproved)
	if rec.Current.Revision != l.Operation.Revision {
		t.Errorf("current revision %s after the older M was approved, want L's %s", rec.Current.Revision, l.Operation.Revision)
	}
})

// ---- What an approval adds is bounded in bytes (webkit/RULES.md "Bounded work") ----

var _ = add("W82 W83 an input_type or reference beyond its bound is kept as absent, never refused", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_long", `{"size":"M"}`)
	is := e.noClaim(signedIn, a, at(0))
	ap := approvalOf(is.Operation)
	ap.InputType = strings.Repeat("x", 7000)
	ap.Reference = strings.Repeat("r", storekit.MaxKeptReference+1)
	e.wantRecord(signedIn, is.Ref, ap, at(time.Second), storedriver.Recorded)
	rec := e.status(signedIn, is.Ref, at(time.Second), storedriver.StatusApproved)
	if len(rec.Approvals) != 1 || rec.Approvals[0].InputType != "" || rec.Approvals[0].Reference != "" {
		t.Errorf("the approval keeps %+v, want no input_type or reference", rec.Approvals)
	}
	e.finish(e.claim(signedIn, a, at(2*time.Second)), store.OutcomePerformed, at(2*time.Second))
	got := e.entries(is.Operation.ID, at(0), at(time.Hour))
	wantEntries(t, got, storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryPerformed)
	for _, en := range got {
		if en.Approval.InputType != "" || en.Approval.Reference != "" {
			t.Errorf("%s entry keeps an input_type of %d bytes and a reference of %d", en.What, len(en.Approval.InputType), len(en.Approval.Reference))
		}
	}
	// At the bounds, kept whole.
	b := action(t, "exchange:ord_bound", `{"size":"M"}`)
	bi := e.noClaim(signedIn, b, at(0))
	ap = approvalOf(bi.Operation)
	ap.InputType, ap.Reference = strings.Repeat("t", storekit.MaxInputType), strings.Repeat("r", storekit.MaxKeptReference)
	e.wantRecord(signedIn, bi.Ref, ap, at(time.Second), storedriver.Recorded)
	if rec := e.status(signedIn, bi.Ref, at(time.Second), storedriver.StatusApproved); rec.Approvals[0].InputType != ap.InputType || rec.Approvals[0].Reference != ap.Reference {
		t.Errorf("at the bounds the approval keeps %+v", rec.Approvals[0])
	}
})
