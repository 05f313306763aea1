// Package storetest is the conformance suite every storedriver.Store passes: the
// memory store, and the Redis store against miniredis, a redis-server and a
// Redis Cluster. Each subtest names the requirement IDs it shows
// (webkit/RULES.md), so `grep -rnw W135 .` finds it.
//
// The suite passes its own clock reading to every call (a fixed base plus
// offsets, moving forward only within a subtest), so a store must judge
// every expiry by the caller's now (package store doc).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/store"
)

// Harness is one backend under test, with fresh, empty data.
type Harness struct {
	Store storedriver.Store
	// Clients are extra Stores over the same data, as separate web servers
	// would have (e.g. 4 Redis clients). nil/empty → only Store.
	Clients []storedriver.Store
	// Advance moves the backend's own clock (miniredis FastForward) so that
	// backend TTLs fire; nil when the backend has no simulated clock.
	Advance func(d time.Duration)
	// Size reports how many records/keys the backend holds (memory:
	// entries; Redis: DBSIZE), nil if unknown. Used to show nothing grows
	// without bound. Leave it nil for a backend whose records expire only by
	// real time (a real redis-server with no Advance).
	Size func(ctx context.Context) (int, error)
	// Down makes the backend unreachable; nil if the backend cannot be
	// stopped.
	Down func()
}

// base is the suite's clock: every call passes base plus an offset.
var base = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

// The owners of the suite (§3 "Who can approve it"; webkit/RULES.md "Sessions and
// owners").
var (
	signedOut    = store.Owner{Agent: "agent-a", User: "user-1"}
	signedIn     = store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-1"}
	otherAccount = store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-2"}
	otherAgent   = store.Owner{Agent: "agent-b", User: "user-1", Account: "acct-1"}
	otherUser    = store.Owner{Agent: "agent-a", User: "user-2", Account: "acct-1"}
)

const lifetime = 10 * time.Minute

// action returns the action key with terms given as JSON, canonicalised as
// the Gate does (W118).
func action(t testing.TB, key, terms string) storedriver.TakeRequest {
	t.Helper()
	c, err := storekit.CanonicalTerms([]byte(terms))
	if err != nil {
		t.Fatalf("terms %s: %v", terms, err)
	}
	return storedriver.TakeRequest{Key: key, Terms: c, Summary: "Do " + key + " with " + string(c), Lifetime: lifetime}
}

// approvalOf is the agent's user approval of a revision (§6).
func approvalOf(op store.Operation) store.Approval {
	return store.Approval{
		OperationID: op.ID,
		Revision:    op.Revision,
		Approver:    "user",
		ApprovedAt:  base,
		InputType:   "tap",
		Reference:   "apr_" + op.Revision,
	}
}

// env is one subtest's backend, with helpers that fail the test on a store
// error.
type env struct {
	t *testing.T
	h Harness
}

func (e *env) ctx() context.Context { return e.t.Context() }

// clients returns every Store over the data: Store first.
func (e *env) clients() []storedriver.Store {
	return append([]storedriver.Store{e.h.Store}, e.h.Clients...)
}

// client returns the i-th client, cycling, so that steps of one scenario run
// on different web servers when the harness has several.
func (e *env) client(i int) storedriver.Store {
	c := e.clients()
	return c[i%len(c)]
}

func (e *env) issue(o store.Owner, a storedriver.TakeRequest, now time.Time) storedriver.TakeResult {
	e.t.Helper()
	is, err := Issue(e.ctx(), e.h.Store, o, a, now)
	if err != nil {
		e.t.Fatalf("Issue: %v", err)
	}
	if id, rev, ok := storekit.SplitRef(is.Ref); is.Operation.ID == "" || !ok || id != is.Operation.ID || rev != is.Operation.Revision {
		e.t.Fatalf("Issue: ref %q does not name operation %+v", is.Ref, is.Operation)
	}
	return is
}

func (e *env) take(o store.Owner, a storedriver.TakeRequest, now time.Time) storedriver.TakeResult {
	e.t.Helper()
	res, err := e.client(1).Take(e.ctx(), o, a, now)
	if err != nil {
		e.t.Fatalf("Take: %v", err)
	}
	checkTakeResult(e.t, res)
	return res
}

// checkTakeResult checks that exactly one of Claim, Issued and Busy is set.
func checkTakeResult(t testing.TB, res storedriver.TakeResult) {
	t.Helper()
	n := 0
	if res.Claim != nil {
		n++
		if res.Claim.Token == "" {
			t.Errorf("Take: claim without a token: %+v", res.Claim)
		}
	}
	if res.Ref != "" {
		n++
	}
	if res.Busy {
		n++
	}
	if n != 1 {
		t.Fatalf("Take: want exactly one of Claim, Issued, Busy; got %+v", res)
	}
}

// claim takes and requires a claim.
func (e *env) claim(o store.Owner, a storedriver.TakeRequest, now time.Time) *store.Claim {
	e.t.Helper()
	res := e.take(o, a, now)
	if res.Claim == nil {
		e.t.Fatalf("Take: want a claim, got %+v", res)
	}
	return res.Claim
}

// noClaim takes and requires an issued operation.
func (e *env) noClaim(o store.Owner, a storedriver.TakeRequest, now time.Time) storedriver.TakeResult {
	e.t.Helper()
	res := e.take(o, a, now)
	if res.Ref == "" {
		e.t.Fatalf("Take: want an issued operation, got %+v", res)
	}
	return res
}

func (e *env) record(o store.Owner, ref string, ap store.Approval, now time.Time) storedriver.RecordReply {
	e.t.Helper()
	rep, err := e.client(2).Record(e.ctx(), o, ref, ap, now, storedriver.RecordOptions{})
	if err != nil {
		e.t.Fatalf("Record: %v", err)
	}
	return rep
}

// approve records the approval of is and requires Recorded.
func (e *env) approve(o store.Owner, is storedriver.TakeResult, now time.Time) {
	e.t.Helper()
	if rep := e.record(o, is.Ref, approvalOf(is.Operation), now); rep.Result != storedriver.Recorded {
		e.t.Fatalf("Record: want recorded, got %v", rep.Result)
	}
}

func (e *env) wantRecord(o store.Owner, ref string, ap store.Approval, now time.Time, want storedriver.RecordResult) storedriver.RecordReply {
	e.t.Helper()
	rep := e.record(o, ref, ap, now)
	if rep.Result != want {
		e.t.Fatalf("Record: want %v, got %v", want, rep.Result)
	}
	return rep
}

func (e *env) lookup(o store.Owner, ref string, now time.Time) (storedriver.Found, bool) {
	e.t.Helper()
	rec, found, err := e.client(3).Lookup(e.ctx(), o, ref, now)
	if err != nil {
		e.t.Fatalf("Lookup: %v", err)
	}
	return rec, found
}

// status looks ref up and requires it found with the given status.
func (e *env) status(o store.Owner, ref string, now time.Time, want storedriver.Status) storedriver.Found {
	e.t.Helper()
	rec, found := e.lookup(o, ref, now)
	if !found {
		e.t.Fatalf("Lookup %s at %v: not found, want %s", ref, now.Sub(base), want)
	}
	if rec.Status != want {
		e.t.Fatalf("Lookup %s at %v: status %s, want %s", ref, now.Sub(base), rec.Status, want)
	}
	return rec
}

func (e *env) finish(c *store.Claim, out store.Outcome, now time.Time) {
	e.t.Helper()
	if err := e.client(4).Finish(e.ctx(), *c, out, now); err != nil {
		e.t.Fatalf("Finish %v: %v", out, err)
	}
}

func sameOperation(a, b store.Operation) bool {
	return a.ID == b.ID && a.Revision == b.Revision && a.Summary == b.Summary &&
		string(a.Terms) == string(b.Terms) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// Run runs the whole conformance suite; newHarness is called once per
// subtest (fresh, empty data). Subtests run one after another, because a
// backend such as one redis-server may hand every harness the same
// database, flushed.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if h.Store == nil {
				t.Fatal("harness without a Store")
			}
			tc.run(t, &env{t: t, h: h})
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, e *env)
}

var cases []testCase

// storedAction is action with a summary too long for a 2048-character
// ref: a store that computes waiting operations into their refs can't
// compute this one, and stores it when its ref is returned (the stored
// fallback, internal/computed), so the case judges stored revisions. Its
// cases call wantStored on the first ref.
func storedAction(t testing.TB, key, terms string) storedriver.TakeRequest {
	t.Helper()
	a := action(t, key, terms)
	a.Summary += strings.Repeat(" and then some more", 120)
	return a
}

// wantStored fails the case unless is's ref is of the stored form,
// "<operation_id>.<revision>" and nothing after.
func wantStored(t testing.TB, is storedriver.TakeResult) {
	t.Helper()
	if strings.Count(is.Ref, ".") != 1 {
		t.Fatalf("ref %.60s… is sealed: the case needs a stored operation", is.Ref)
	}
}

func add(name string, run func(t *testing.T, e *env)) struct{} {
	cases = append(cases, testCase{name, run})
	return struct{}{}
}

// ---- Issue (§3, §4) ----

var _ = add("W19 W20 W24 W34 new terms keep the operation_id and get a new revision", func(t *testing.T, e *env) {
	a := storedAction(t, "exchange:ord_1", `{"size":"M"}`)
	first := e.issue(signedIn, a, at(0))
	wantStored(t, first)
	again := e.issue(signedIn, a, at(time.Minute))
	if again.Operation.ID != first.Operation.ID || again.Operation.Revision != first.Operation.Revision {
		t.Fatalf("same terms: got %+v, want reuse of %+v", again.Operation, first.Operation)
	}
	changed := e.issue(signedIn, storedAction(t, "exchange:ord_1", `{"size":"L"}`), at(2*time.Minute))
	if changed.Operation.ID != first.Operation.ID {
		t.Errorf("W20: new terms changed operation_id %s → %s", first.Operation.ID, changed.Operation.ID)
	}
	if changed.Operation.Revision == first.Operation.Revision {
		t.Errorf("W24: new terms kept revision %s", first.Operation.Revision)
	}
	if string(changed.Operation.Terms) != `{"size":"L"}` {
		t.Errorf("terms = %s", changed.Operation.Terms)
	}
	if want := at(2*time.Minute + lifetime); !changed.Operation.ExpiresAt.Equal(want) {
		t.Errorf("expires_at = %v, want now+Lifetime %v", changed.Operation.ExpiresAt, want)
	}
	// W34: a price change back to the first terms is again new terms.
	back := e.issue(signedIn, a, at(3*time.Minute))
	if back.Operation.ID != first.Operation.ID || back.Operation.Revision == changed.Operation.Revision {
		t.Errorf("W34: back to the first terms: got %+v", back.Operation)
	}
})

var _ = add("W39 same terms reuse the revision while half its lifetime is left", func(t *testing.T, e *env) {
	a := storedAction(t, "k", `{"n":1}`)
	first := e.issue(signedOut, a, at(0))
	wantStored(t, first)
	if again := e.issue(signedOut, a, at(lifetime/2)); again.Operation.Revision != first.Operation.Revision {
		t.Errorf("at half the lifetime: new revision %s, want %s", again.Operation.Revision, first.Operation.Revision)
	}
	later := e.issue(signedOut, a, at(lifetime/2+time.Second))
	if later.Operation.Revision == first.Operation.Revision || later.Operation.ID != first.Operation.ID {
		t.Errorf("past half the lifetime: got %+v, want a new revision of %s", later.Operation, first.Operation.ID)
	}
	if want := at(lifetime/2 + time.Second + lifetime); !later.Operation.ExpiresAt.Equal(want) {
		t.Errorf("expires_at = %v, want %v", later.Operation.ExpiresAt, want)
	}
})

var _ = add("W25 a new fixed expires_at is a new revision", func(t *testing.T, e *env) {
	a := action(t, "seat:12A", `{"seat":"12A"}`)
	a.ExpiresAt = at(5 * time.Minute)
	first := e.issue(signedIn, a, at(0))
	if !first.Operation.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("expires_at = %v, want the fixed %v", first.Operation.ExpiresAt, a.ExpiresAt)
	}
	// A fixed expires_at is reused while it lasts, whatever is left of it.
	if again := e.issue(signedIn, a, at(4*time.Minute)); again.Operation.Revision != first.Operation.Revision {
		t.Errorf("same fixed expires_at: new revision %s", again.Operation.Revision)
	}
	a.ExpiresAt = at(6 * time.Minute)
	moved := e.issue(signedIn, a, at(4*time.Minute))
	if moved.Operation.Revision == first.Operation.Revision || moved.Operation.ID != first.Operation.ID {
		t.Errorf("new expires_at: got %+v, want a new revision of %s", moved.Operation, first.Operation.ID)
	}
	if !moved.Operation.ExpiresAt.Equal(a.ExpiresAt) {
		t.Errorf("expires_at = %v, want %v", moved.Operation.ExpiresAt, a.ExpiresAt)
	}
})

var _ = add("W22 W23 W36 200 different terms get 200 distinct revisions", func(t *testing.T, e *env) {
	seen := map[string]bool{}
	var id string
	for i := range 200 {
		is := e.issue(signedIn, action(t, "k", fmt.Sprintf(`{"n":%d}`, i)), at(time.Duration(i)*time.Second))
		if !storekit.ValidID(is.Operation.ID) || !storekit.ValidID(is.Operation.Revision) || !storekit.ValidRef(is.Ref) {
			t.Fatalf("W22 W23: invalid id, revision or ref: %+v", is)
		}
		if id == "" {
			id = is.Operation.ID
		} else if is.Operation.ID != id {
			t.Fatalf("W20: operation_id changed to %s", is.Operation.ID)
		}
		if seen[is.Operation.Revision] {
			t.Fatalf("W36: revision %s given to two terms", is.Operation.Revision)
		}
		seen[is.Operation.Revision] = true
	}
})

var _ = add("W19 W21 different actions and owners get different operation_ids", func(t *testing.T, e *env) {
	ids := map[string]string{}
	for _, o := range []store.Owner{signedOut, signedIn, otherAccount, otherAgent, otherUser} {
		for _, key := range []string{"exchange:ord_1", "exchange:ord_2"} {
			is := e.issue(o, action(t, key, `{"same":true}`), at(0))
			what := fmt.Sprintf("%+v %s", o, key)
			if prev, dup := ids[is.Operation.ID]; dup {
				t.Fatalf("W21: %s and %s share operation_id %s", prev, what, is.Operation.ID)
			}
			ids[is.Operation.ID] = what
		}
	}
})

var _ = add("W26 a revision keeps its terms and expires_at", func(t *testing.T, e *env) {
	a1 := storedAction(t, "k", `{"v":1}`)
	r1 := e.issue(signedIn, a1, at(0))
	wantStored(t, r1)
	rec1 := e.status(signedIn, r1.Ref, at(time.Second), storedriver.StatusWaiting)
	if !sameOperation(rec1.Current, r1.Operation) {
		t.Fatalf("Lookup current %+v, want %+v", rec1.Current, r1.Operation)
	}
	r2 := e.issue(signedIn, storedAction(t, "k", `{"v":2}`), at(2*time.Second))
	// The first revision is unchanged: its approval is recorded for it,
	// and a request with its terms takes exactly it.
	rep := e.wantRecord(signedIn, r1.Ref, approvalOf(r1.Operation), at(3*time.Second), storedriver.Recorded)
	if !sameOperation(rep.Operation, r1.Operation) {
		t.Errorf("Recorded operation %+v, want %+v", rep.Operation, r1.Operation)
	}
	rec := e.status(signedIn, r1.Ref, at(4*time.Second), storedriver.StatusApproved)
	if !sameOperation(rec.Current, r2.Operation) {
		t.Errorf("Lookup current %+v, want the latest %+v", rec.Current, r2.Operation)
	}
	c := e.claim(signedIn, a1, at(5*time.Second))
	if !sameOperation(c.Operation, r1.Operation) {
		t.Errorf("claimed %+v, want %+v", c.Operation, r1.Operation)
	}
})

var _ = add("W141 W145 while performed, Issue keeps the operation (its approval waits, check 2); once performed, the next Issue gets a new operation_id", func(t *testing.T, e *env) {
	a := action(t, "k", `{"v":1}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	// No second operation of the action is offered for approval while the
	// first may be taking effect: other terms get a revision of the one
	// being performed, and an approval of it is refused for now.
	during := e.issue(signedIn, action(t, "k", `{"v":2}`), at(3*time.Second))
	if during.Operation.ID != is.Operation.ID || during.Operation.Revision == is.Operation.Revision {
		t.Errorf("while performing: Issue gave %s, want a new revision of %s", during.Ref, is.Operation.ID)
	}
	e.wantRecord(signedIn, during.Ref, approvalOf(during.Operation), at(3*time.Second), storedriver.BeingPerformed)
	e.finish(c, store.OutcomePerformed, at(4*time.Second))
	after := e.issue(signedIn, a, at(5*time.Second))
	if after.Operation.ID == is.Operation.ID {
		t.Errorf("after performing: Issue kept operation_id %s", is.Operation.ID)
	}
	if took := e.noClaim(signedIn, a, at(6*time.Second)); took.Operation.ID == is.Operation.ID {
		t.Errorf("after performing: Take issued the performed operation %s", is.Operation.ID)
	}
})

var _ = add("revisions of one operation are capped at 32, dropping the oldest never approved", func(t *testing.T, e *env) {
	var revs []storedriver.TakeResult
	revs = append(revs, e.issue(signedIn, action(t, "k", `{"n":0}`), at(0)))
	e.approve(signedIn, revs[0], at(0))
	for i := 1; i <= 40; i++ {
		revs = append(revs, e.issue(signedIn, action(t, "k", fmt.Sprintf(`{"n":%d}`, i)), at(time.Second)))
	}
	now := at(2 * time.Second)
	// Kept: the approved revision 0 and the latest 31 (10…40).
	e.wantRecord(signedIn, revs[0].Ref, approvalOf(revs[0].Operation), now, storedriver.AlreadyRecorded)
	for _, i := range []int{1, 9} {
		// A dropped revision fails check 3 (W114), and its own ref is one
		// the operation no longer knows: not found, as any ref the
		// Company never returned (W74).
		rep := e.wantRecord(signedIn, revs[40].Ref, approvalOf(revs[i].Operation), now, storedriver.RevisionMismatch)
		if rep.Operation.Revision != revs[40].Operation.Revision {
			t.Errorf("revision %d: mismatch answers %s, want the current %s", i, rep.Operation.Revision, revs[40].Operation.Revision)
		}
		e.wantRecord(signedIn, revs[i].Ref, approvalOf(revs[i].Operation), now, storedriver.NotFound)
		if _, found := e.lookup(signedIn, revs[i].Ref, now); found {
			t.Errorf("revision %d: its ref is still found", i)
		}
	}
	e.wantRecord(signedIn, revs[10].Ref, approvalOf(revs[10].Operation), now, storedriver.Recorded)
	e.wantRecord(signedIn, revs[40].Ref, approvalOf(revs[40].Operation), now, storedriver.Recorded)
})

// ---- Record (§6 "What the Company checks") ----

var _ = add("W74 W77 an unknown or malformed ref is not found", func(t *testing.T, e *env) {
	is := e.issue(signedIn, action(t, "k", `{}`), at(0))
	other := e.issue(signedIn, action(t, "other", `{}`), at(0))
	id := is.Operation.ID
	for _, ref := range []string{
		"", ".", "x", id, id + ".", "." + is.Operation.Revision,
		"op_00000000000000000000." + is.Operation.Revision,
		id + ".rev.extra", id + ".re v", id + ".rev\n", is.Ref + "\x00",
		// §4 "Any other reference": a real operation_id with a revision
		// never returned for it, or returned for another operation.
		id + ".madeUp", id + "." + other.Operation.Revision, id + ".1791487200-AAAAAAAAAAAAAAAA",
		strings.Repeat("a", storekit.MaxRefLength+1),
		strings.Repeat("a", 300) + "." + is.Operation.Revision,
	} {
		rep := e.record(signedIn, ref, approvalOf(is.Operation), at(time.Second))
		if rep.Result != storedriver.NotFound {
			t.Errorf("Record ref %q: %v, want not found", ref, rep.Result)
		}
		if _, found := e.lookup(signedIn, ref, at(time.Second)); found {
			t.Errorf("Lookup ref %q: found", ref)
		}
	}
	// Nothing was recorded through them.
	if rec := e.status(signedIn, is.Ref, at(time.Second), storedriver.StatusWaiting); len(rec.Approvals) != 0 {
		t.Errorf("approvals recorded through bad refs: %+v", rec.Approvals)
	}
	e.noClaim(signedIn, action(t, "k", `{}`), at(2*time.Second))
})

// nearRefs are refs that differ from a real one by a character or a part:
// §4's "any other reference", which must not be taken for it (W74).
func nearRefs(is storedriver.TakeResult) []string {
	id, rev := is.Operation.ID, is.Operation.Revision
	return []string{
		is.Ref + ".", is.Ref + "..", "." + is.Ref, is.Ref + ". ",
		" " + is.Ref, is.Ref + " ", is.Ref + "\t", is.Ref + "\n",
		id + ".." + rev, id + "." + rev + "." + rev, is.Ref + "." + is.Ref,
		id + "." + rev + ".x", id + "." + rev + ".AAAA",
		strings.ToUpper(id[:1]) + id[1:] + "." + rev, id + "." + rev[:len(rev)-1],
	}
}

var _ = add("W74 a real ref with a character or a part added or changed is not that ref", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	noFind := func(what string, now time.Time) {
		t.Helper()
		for _, ref := range nearRefs(is) {
			if ref == is.Ref {
				continue
			}
			if rec, found := e.lookup(signedIn, ref, now); found {
				t.Errorf("%s: Lookup %q found %s", what, ref, rec.Status)
			}
			if rep := e.record(signedIn, ref, approvalOf(is.Operation), now); rep.Result != storedriver.NotFound {
				t.Errorf("%s: Record %q: %v, want not found", what, ref, rep.Result)
			}
		}
	}
	noFind("waiting", at(time.Second))
	// Nothing was recorded through them.
	if rec := e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusWaiting); len(rec.Approvals) != 0 {
		t.Errorf("approvals recorded through near refs: %+v", rec.Approvals)
	}
	e.noClaim(signedIn, a, at(2*time.Second))
	e.approve(signedIn, is, at(3*time.Second))
	noFind("approved", at(4*time.Second))
	c := e.claim(signedIn, a, at(5*time.Second))
	noFind("performing", at(6*time.Second))
	e.finish(c, store.OutcomePerformed, at(7*time.Second))
	noFind("performed", at(8*time.Second))
	e.status(signedIn, is.Ref, at(9*time.Second), storedriver.StatusPerformed)
})

var _ = add("W74 W136 once performed, every revision it returned is still found, and no other", func(t *testing.T, e *env) {
	a1 := action(t, "k", `{"v":1}`)
	r1 := e.issue(signedIn, a1, at(0))
	r2 := e.issue(signedIn, action(t, "k", `{"v":2}`), at(time.Second))
	e.approve(signedIn, r1, at(2*time.Second))
	e.finish(e.claim(signedIn, a1, at(3*time.Second)), store.OutcomePerformed, at(4*time.Second))
	// A store may keep a performed operation small (storedriver.Found): its refs
	// still answer performed, and a made-up one still isn't found.
	for _, is := range []storedriver.TakeResult{r1, r2} {
		e.status(signedIn, is.Ref, at(5*time.Second), storedriver.StatusPerformed)
		e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(5*time.Second), storedriver.AlreadyPerformed)
	}
	id := r1.Operation.ID
	for _, ref := range []string{id + ".madeUp", id + ".1791487200-AAAAAAAAAAAAAAAA"} {
		if rep := e.record(signedIn, ref, approvalOf(r1.Operation), at(5*time.Second)); rep.Result != storedriver.NotFound {
			t.Errorf("Record ref %q of a performed operation: %v, want not found", ref, rep.Result)
		}
		if _, found := e.lookup(signedIn, ref, at(5*time.Second)); found {
			t.Errorf("Lookup ref %q of a performed operation: found", ref)
		}
	}
	// Check 1 still holds: another account's Session doesn't see it.
	if rep := e.record(otherAccount, r1.Ref, approvalOf(r1.Operation), at(5*time.Second)); rep.Result != storedriver.NotFound {
		t.Errorf("another account: %v, want not found", rep.Result)
	}
})

var _ = add("W74 W34 every revision returned for an operation makes a ref that is found", func(t *testing.T, e *env) {
	r1 := e.issue(signedIn, storedAction(t, "k", `{"v":1}`), at(0))
	r2 := e.issue(signedIn, storedAction(t, "k", `{"v":2}`), at(time.Second))
	wantStored(t, r2)
	for _, is := range []storedriver.TakeResult{r1, r2} {
		rec := e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusWaiting)
		if !sameOperation(rec.Current, r2.Operation) {
			t.Errorf("Lookup %s: current %+v, want the latest %+v", is.Ref, rec.Current, r2.Operation)
		}
	}
	// The ref of one revision carries the approval of another revision of
	// the same operation (check 3 compares the approval with the operation).
	e.wantRecord(signedIn, r2.Ref, approvalOf(r1.Operation), at(3*time.Second), storedriver.Recorded)
})

var _ = add("W45 W76 W104 another agent or User finds nothing", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	for _, o := range []store.Owner{otherAgent, otherUser, {Agent: otherAgent.Agent, User: otherAgent.User}} {
		e.wantRecord(o, is.Ref, approvalOf(is.Operation), at(time.Second), storedriver.NotFound)
		if _, found := e.lookup(o, is.Ref, at(time.Second)); found {
			t.Errorf("Lookup as %+v: found", o)
		}
	}
	e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusWaiting)
})

var _ = add("W42 W43 W77 a signed-in Session meets a signed-out or another account's operation: not found", func(t *testing.T, e *env) {
	out := e.issue(signedOut, action(t, "k", `{}`), at(0))
	e.wantRecord(signedIn, out.Ref, approvalOf(out.Operation), at(time.Second), storedriver.NotFound)
	in := e.issue(signedIn, action(t, "k", `{}`), at(0))
	e.wantRecord(otherAccount, in.Ref, approvalOf(in.Operation), at(time.Second), storedriver.NotFound)
	// Lookup finds them for the agent and User; the owner's account tells
	// the caller they are not this Session's (§3).
	if rec, found := e.lookup(signedIn, out.Ref, at(2*time.Second)); !found || rec.Owner != signedOut {
		t.Errorf("Lookup signed-out op: found=%v owner=%+v", found, rec.Owner)
	}
	if rec, found := e.lookup(otherAccount, in.Ref, at(2*time.Second)); !found || rec.Owner != signedIn {
		t.Errorf("Lookup account op: found=%v owner=%+v", found, rec.Owner)
	}
	e.status(signedOut, out.Ref, at(3*time.Second), storedriver.StatusWaiting)
	e.status(signedIn, in.Ref, at(3*time.Second), storedriver.StatusWaiting)
})

var _ = add("W44 W73 a signed-out Session meets an account's operation: sign-in required", func(t *testing.T, e *env) {
	is := e.issue(signedIn, action(t, "k", `{}`), at(0))
	rep := e.wantRecord(signedOut, is.Ref, approvalOf(is.Operation), at(time.Second), storedriver.SignInRequired)
	if rep.Operation.ID != "" {
		t.Errorf("sign-in required reveals the operation: %+v", rep.Operation)
	}
	rec, found := e.lookup(signedOut, is.Ref, at(time.Second))
	if !found || rec.Owner.Account != signedIn.Account {
		t.Errorf("Lookup: found=%v owner=%+v, want the account's operation", found, rec.Owner)
	}
	e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusWaiting) // nothing recorded
})

var _ = add("W100 W114 W122 a revision never returned: mismatch with the current revision", func(t *testing.T, e *env) {
	is := e.issue(signedIn, action(t, "k", `{"v":1}`), at(0))
	for _, rev := range []string{"1791487200-made-up", "", is.Operation.Revision + "x"} {
		ap := approvalOf(is.Operation)
		ap.Revision = rev
		rep := e.wantRecord(signedIn, is.Ref, ap, at(time.Second), storedriver.RevisionMismatch)
		if !sameOperation(rep.Operation, is.Operation) {
			t.Errorf("revision %q: answered %+v, want the current %+v", rev, rep.Operation, is.Operation)
		}
		if rep.Operation.Revision == rev {
			t.Errorf("W122: answered with the named revision %q", rev)
		}
	}
	e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusWaiting)
})

var _ = add("W115 an expired revision while a newer one is current: mismatch", func(t *testing.T, e *env) {
	r1 := e.issue(signedIn, storedAction(t, "k", `{"v":1}`), at(0))
	r2 := e.issue(signedIn, storedAction(t, "k", `{"v":2}`), at(6*time.Minute))
	wantStored(t, r2)
	rep := e.wantRecord(signedIn, r1.Ref, approvalOf(r1.Operation), r1.Operation.ExpiresAt.Add(time.Second), storedriver.RevisionMismatch)
	if !sameOperation(rep.Operation, r2.Operation) {
		t.Errorf("answered %+v, want the current %+v", rep.Operation, r2.Operation)
	}
})

var _ = add("W120 a replaced revision still passes check 3 (the MAY is not taken), and only its own terms take it", func(t *testing.T, e *env) {
	// The kit does not take §6 check 3's option to fail a replaced revision:
	// an agent may approve the terms it showed the User while the page
	// already asks for others, and each approval applies only to requests
	// with its own terms, once (W37).
	a1, a2 := storedAction(t, "k", `{"size":"M"}`), storedAction(t, "k", `{"size":"L"}`)
	r1 := e.issue(signedIn, a1, at(0))
	r2 := e.issue(signedIn, a2, at(time.Second))
	wantStored(t, r2)
	if r2.Operation.ID != r1.Operation.ID || r2.Operation.Revision == r1.Operation.Revision {
		t.Fatalf("r2 %+v does not replace r1 %+v", r2.Operation, r1.Operation)
	}
	rep := e.wantRecord(signedIn, r1.Ref, approvalOf(r1.Operation), at(2*time.Second), storedriver.Recorded)
	if !sameOperation(rep.Operation, r1.Operation) {
		t.Errorf("recorded %+v, want the replaced revision %+v", rep.Operation, r1.Operation)
	}
	rec := e.status(signedIn, r2.Ref, at(3*time.Second), storedriver.StatusApproved)
	if !sameOperation(rec.Current, r2.Operation) {
		t.Errorf("current %+v, want r2 %+v", rec.Current, r2.Operation)
	}
	// r2's terms do not take r1's approval (W117) and get r2 again.
	if got := e.noClaim(signedIn, a2, at(4*time.Second)); got.Operation.Revision != r2.Operation.Revision {
		t.Errorf("r2's terms: issued %s, want r2 %s", got.Operation.Revision, r2.Operation.Revision)
	}
	c := e.claim(signedIn, a1, at(5*time.Second))
	if c.Operation.Revision != r1.Operation.Revision {
		t.Errorf("took %s, want r1 %s", c.Operation.Revision, r1.Operation.Revision)
	}
	e.finish(c, store.OutcomePerformed, at(6*time.Second))
	e.wantRecord(signedIn, r2.Ref, approvalOf(r2.Operation), at(7*time.Second), storedriver.AlreadyPerformed)
})

var _ = add("W90 W91 W122 an approval used up without performing fails check 3, with a revision that can still be approved", func(t *testing.T, e *env) {
	a := action(t, "k", `{"v":1}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	e.finish(c, store.OutcomeNotPerformed, at(3*time.Second))

	// Lookup offers a revision other than the used-up one, with the same
	// terms and expires_at.
	rec := e.status(signedIn, is.Ref, at(4*time.Second), storedriver.StatusWaiting)
	cur := rec.Current
	if cur.ID != is.Operation.ID || cur.Revision == is.Operation.Revision ||
		string(cur.Terms) != string(is.Operation.Terms) || !cur.ExpiresAt.Equal(is.Operation.ExpiresAt) {
		t.Fatalf("after not done: current %+v, want a fresh revision of %+v", cur, is.Operation)
	}
	if rec.Expired {
		t.Errorf("after not done: reported expired")
	}
	// The used-up revision, through either ref: check 3 fails, and the
	// answer names the revision Lookup offers, never the named one.
	for _, ref := range []string{is.Ref, storekit.MakeRef(cur.ID, cur.Revision)} {
		for _, check := range []bool{false, true} {
			rep, err := e.client(2).Record(e.ctx(), signedIn, ref, approvalOf(is.Operation), at(5*time.Second), storedriver.RecordOptions{CheckOnly: check})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Result != storedriver.RevisionMismatch || rep.Operation.Revision == is.Operation.Revision {
				t.Fatalf("used-up revision via %s (check only %v): %v %+v, want a mismatch with another revision", ref, check, rep.Result, rep.Operation)
			}
			if !sameOperation(rep.Operation, cur) {
				t.Errorf("mismatch answers %+v, want Lookup's %+v", rep.Operation, cur)
			}
		}
	}
	// Nothing was recorded, and the browser's next request with the same
	// terms is answered with that same revision (no loop).
	if rec := e.status(signedIn, is.Ref, at(6*time.Second), storedriver.StatusWaiting); len(rec.Approvals) != 1 {
		t.Errorf("approvals = %+v, want only the used-up one", rec.Approvals)
	}
	if got := e.noClaim(signedIn, a, at(7*time.Second)); !sameOperation(got.Operation, cur) {
		t.Errorf("next request: issued %+v, want Lookup's %+v", got.Operation, cur)
	}
	// It can be approved and then performs.
	fresh := storedriver.TakeResult{Operation: cur, Ref: storekit.MakeRef(cur.ID, cur.Revision)}
	e.approve(signedIn, fresh, at(8*time.Second))
	e.wantRecord(signedIn, fresh.Ref, approvalOf(cur), at(9*time.Second), storedriver.AlreadyRecorded)
	e.status(signedIn, is.Ref, at(9*time.Second), storedriver.StatusApproved)
	c = e.claim(signedIn, a, at(10*time.Second))
	if c.Operation.Revision != cur.Revision {
		t.Errorf("took %s, want %s", c.Operation.Revision, cur.Revision)
	}
	e.finish(c, store.OutcomePerformed, at(11*time.Second))
	e.status(signedIn, is.Ref, at(12*time.Second), storedriver.StatusPerformed)
})

var _ = add("W98 W90 not done after the revision expired: nothing left to approve, the operation has expired", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	late := is.Operation.ExpiresAt.Add(time.Second)
	e.finish(c, store.OutcomeNotPerformed, late)
	if rec, found := e.lookup(signedIn, is.Ref, late); found && (!rec.Expired || rec.Status != storedriver.StatusWaiting) {
		t.Errorf("after not done past expires_at: %+v, want expired and waiting (or not found)", rec)
	}
	if rep := e.record(signedIn, is.Ref, approvalOf(is.Operation), late); rep.Result != storedriver.OperationExpired && rep.Result != storedriver.NotFound {
		t.Errorf("approval past expires_at: %v, want operation expired (or not found)", rep.Result)
	}
	if got := e.noClaim(signedIn, a, late); got.Operation.Revision == is.Operation.Revision || !got.Operation.ExpiresAt.After(late) {
		t.Errorf("next request: %+v, want a new live revision", got.Operation)
	}
})

var _ = add("W18 W101 W115 the current revision expired: operation expired; expires_at itself is accepted", func(t *testing.T, e *env) {
	late := e.issue(signedIn, action(t, "late", `{}`), at(0))
	ontime := e.issue(signedIn, action(t, "ontime", `{}`), at(0))
	e.wantRecord(signedIn, ontime.Ref, approvalOf(ontime.Operation), ontime.Operation.ExpiresAt, storedriver.Recorded)
	e.status(signedIn, ontime.Ref, ontime.Operation.ExpiresAt, storedriver.StatusApproved)
	// Both answers are invalid_request (W75, W101): a store may forget an
	// unperformed operation once every revision has expired (W38).
	if rep := e.record(signedIn, late.Ref, approvalOf(late.Operation), late.Operation.ExpiresAt.Add(time.Second)); rep.Result != storedriver.OperationExpired && rep.Result != storedriver.NotFound {
		t.Errorf("one second after expires_at: %v, want operation expired (or not found)", rep.Result)
	}

	// Remembered for an approval of a longer-lived revision, the operation
	// has still expired when its current revision has.
	long := action(t, "long", `{"v":1}`)
	long.Lifetime = time.Hour
	r1 := e.issue(signedIn, long, at(lifetime+2*time.Second))
	e.approve(signedIn, r1, at(lifetime+2*time.Second))
	r2 := e.issue(signedIn, action(t, "long", `{"v":2}`), at(lifetime+3*time.Second))
	after := r2.Operation.ExpiresAt.Add(time.Second)
	e.wantRecord(signedIn, r2.Ref, approvalOf(r2.Operation), after, storedriver.OperationExpired)
	bad := approvalOf(r2.Operation)
	bad.Revision = "0-bogus"
	e.wantRecord(signedIn, r2.Ref, bad, after, storedriver.OperationExpired)
	e.wantRecord(signedIn, r1.Ref, approvalOf(r1.Operation), after, storedriver.AlreadyRecorded)
})

var _ = add("W116 W122 an approval of another operation: mismatch, never with the named revision", func(t *testing.T, e *env) {
	x := e.issue(signedIn, action(t, "x", `{}`), at(0))
	y := e.issue(signedIn, action(t, "y", `{}`), at(0))
	rep := e.wantRecord(signedIn, y.Ref, approvalOf(x.Operation), at(time.Second), storedriver.RevisionMismatch)
	if !sameOperation(rep.Operation, y.Operation) {
		t.Errorf("answered %+v, want y's current %+v", rep.Operation, y.Operation)
	}
	// x's operation_id with y's own current revision still fails check 3
	// (the ref is y's), and the answer must not name that revision.
	ap := approvalOf(y.Operation)
	ap.OperationID = x.Operation.ID
	rep = e.wantRecord(signedIn, y.Ref, ap, at(2*time.Second), storedriver.RevisionMismatch)
	if rep.Operation.Revision == ap.Revision || rep.Operation.ID != y.Operation.ID {
		t.Errorf("W122: answered %+v for named revision %s", rep.Operation, ap.Revision)
	}
	e.status(signedIn, x.Ref, at(3*time.Second), storedriver.StatusWaiting)
	e.status(signedIn, y.Ref, at(3*time.Second), storedriver.StatusWaiting)
})

var _ = add("W97 W113 W136 performing and performed operations fail check 2", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(3*time.Second), storedriver.BeingPerformed)
	e.finish(c, store.OutcomePerformed, at(4*time.Second))
	e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(5*time.Second), storedriver.AlreadyPerformed)
	e.status(signedIn, is.Ref, at(6*time.Second), storedriver.StatusPerformed)
})

var _ = add("W111 the first failing check decides", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	bad := approvalOf(is.Operation)
	bad.Revision = "0-bogus"
	now := at(time.Second)
	// Checks 1 and 3 fail: check 1's answer.
	e.wantRecord(otherAgent, is.Ref, bad, now, storedriver.NotFound)
	e.wantRecord(otherAccount, is.Ref, bad, now, storedriver.NotFound)
	e.wantRecord(signedOut, is.Ref, bad, now, storedriver.SignInRequired)
	e.wantRecord(signedOut, is.Ref, approvalOf(is.Operation), now, storedriver.SignInRequired)
	// Checks 2 and 3 fail: check 2's answer.
	e.approve(signedIn, is, at(2*time.Second))
	c := e.claim(signedIn, a, at(3*time.Second))
	e.wantRecord(signedIn, is.Ref, bad, at(4*time.Second), storedriver.BeingPerformed)
	// Checks 1 and 2 fail: check 1's answer.
	e.wantRecord(otherAccount, is.Ref, approvalOf(is.Operation), at(4*time.Second), storedriver.NotFound)
	e.finish(c, store.OutcomePerformed, at(5*time.Second))
	e.wantRecord(signedIn, is.Ref, bad, at(6*time.Second), storedriver.AlreadyPerformed)
	e.wantRecord(signedOut, is.Ref, bad, at(6*time.Second), storedriver.SignInRequired)
})

var _ = add("W135 W136 recording the same revision again records nothing new", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	rep := e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(2*time.Second), storedriver.AlreadyRecorded)
	if !sameOperation(rep.Operation, is.Operation) {
		t.Errorf("already recorded: operation %+v, want %+v", rep.Operation, is.Operation)
	}
	if rec := e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusApproved); len(rec.Approvals) != 1 {
		t.Fatalf("approvals = %d, want 1", len(rec.Approvals))
	}
	c := e.claim(signedIn, a, at(4*time.Second))
	e.finish(c, store.OutcomeNotPerformed, at(5*time.Second))
	// The one approval is used up; sending it again revives nothing (W98)
	// and fails check 3 (W90, W122).
	e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(6*time.Second), storedriver.RevisionMismatch)
	if got := e.noClaim(signedIn, a, at(7*time.Second)); got.Operation.Revision == is.Operation.Revision {
		t.Errorf("after the approval was used: issued the used revision %s again", got.Operation.Revision)
	}
})

var _ = add("W110 W134 CheckOnly records nothing", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	for range 2 {
		rep, err := e.h.Store.Record(e.ctx(), signedIn, is.Ref, approvalOf(is.Operation), at(time.Second), storedriver.RecordOptions{CheckOnly: true})
		if err != nil || rep.Result != storedriver.Recorded || !sameOperation(rep.Operation, is.Operation) {
			t.Fatalf("CheckOnly: %+v, %v; want recorded with %+v", rep, err, is.Operation)
		}
	}
	bad := approvalOf(is.Operation)
	bad.Revision = "0-bogus"
	if rep, err := e.h.Store.Record(e.ctx(), signedIn, is.Ref, bad, at(time.Second), storedriver.RecordOptions{CheckOnly: true}); err != nil || rep.Result != storedriver.RevisionMismatch {
		t.Fatalf("CheckOnly with a bad revision: %+v, %v", rep, err)
	}
	if rec := e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusWaiting); len(rec.Approvals) != 0 {
		t.Fatalf("CheckOnly recorded %d approvals", len(rec.Approvals))
	}
	e.noClaim(signedIn, a, at(3*time.Second))
	e.approve(signedIn, is, at(4*time.Second))
	e.claim(signedIn, a, at(5*time.Second))
})

// ---- Lookup (§6 "Looking up an approved operation") ----

var _ = add("W105 W106 W107 W108 status follows the operation", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	rec := e.status(signedIn, is.Ref, at(time.Second), storedriver.StatusWaiting)
	if rec.Expired || rec.Owner != signedIn || !sameOperation(rec.Current, is.Operation) {
		t.Errorf("waiting: %+v", rec)
	}
	e.approve(signedIn, is, at(2*time.Second))
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusApproved)
	c := e.claim(signedIn, a, at(4*time.Second))
	e.status(signedIn, is.Ref, at(5*time.Second), storedriver.StatusPerforming)
	e.finish(c, store.OutcomePerformed, at(6*time.Second))
	rec = e.status(signedIn, is.Ref, at(7*time.Second), storedriver.StatusPerformed)
	if rec.Expired {
		t.Errorf("performed reported expired")
	}
})

var _ = add("W75 expired is set when the current revision expired and nothing is recorded", func(t *testing.T, e *env) {
	is := e.issue(signedIn, action(t, "k", `{}`), at(0))
	if rec := e.status(signedIn, is.Ref, is.Operation.ExpiresAt, storedriver.StatusWaiting); rec.Expired {
		t.Errorf("expired at exactly expires_at (W18)")
	}
	// A store may forget it once expired; if it remembers it, it says so.
	if rec, found := e.lookup(signedIn, is.Ref, is.Operation.ExpiresAt.Add(time.Second)); found && (!rec.Expired || rec.Status != storedriver.StatusWaiting) {
		t.Errorf("past expires_at: %+v, want expired and waiting", rec)
	}

})

var _ = add("W75 W102 an approved operation is not expired, though its current revision is", func(t *testing.T, e *env) {
	long := action(t, "j", `{"v":1}`)
	long.Lifetime = time.Hour
	r1 := e.issue(signedIn, long, at(0))
	e.approve(signedIn, r1, at(time.Second))
	r2 := e.issue(signedIn, action(t, "j", `{"v":2}`), at(2*time.Second))
	after := r2.Operation.ExpiresAt.Add(time.Second)
	if rec := e.status(signedIn, r1.Ref, after, storedriver.StatusApproved); rec.Expired || !sameOperation(rec.Current, r2.Operation) {
		t.Errorf("approved with an expired current revision: %+v", rec)
	}
	// Once the approval has expired too, nothing keeps it.
	if rec, found := e.lookup(signedIn, r1.Ref, r1.Operation.ExpiresAt.Add(time.Second)); found && (!rec.Expired || rec.Status != storedriver.StatusWaiting) {
		t.Errorf("past every expires_at: %+v", rec)
	}
})

var _ = add("W81 approvals keep their statements, and when they were used", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	ap := store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: "user",
		ApprovedAt: at(-time.Hour), InputType: "blink", Reference: "apr_7Qz"}
	e.wantRecord(signedIn, is.Ref, ap, at(time.Second), storedriver.Recorded)
	agent := e.issue(signedIn, action(t, "k2", `{}`), at(0))
	e.wantRecord(signedIn, agent.Ref, store.Approval{OperationID: agent.Operation.ID, Revision: agent.Operation.Revision, Approver: "agent"}, at(time.Second), storedriver.Recorded)

	rec := e.status(signedIn, is.Ref, at(2*time.Second), storedriver.StatusApproved)
	want := ap
	want.RecordedAt = at(time.Second)
	if len(rec.Approvals) != 1 || !sameApproval(rec.Approvals[0], want) {
		t.Fatalf("approvals = %+v, want [%+v]", rec.Approvals, want)
	}
	c := e.claim(signedIn, a, at(3*time.Second))
	want.UsedAt = at(3 * time.Second)
	if !sameApproval(c.Approval, want) {
		t.Errorf("claim approval = %+v, want %+v", c.Approval, want)
	}
	if c.Owner != signedIn || !sameOperation(c.Operation, is.Operation) {
		t.Errorf("claim = %+v", c)
	}
	e.finish(c, store.OutcomePerformed, at(4*time.Second))
	// Once performed, a store may keep only what the status answer and §7
	// need (storedriver.Found): the approval went to the handler in the Claim.
	rec = e.status(signedIn, is.Ref, at(5*time.Second), storedriver.StatusPerformed)
	if rec.Current.ID != is.Operation.ID || len(rec.Approvals) > 1 || (len(rec.Approvals) == 1 && !sameApproval(rec.Approvals[0], want)) {
		t.Errorf("after performing: %+v, want operation %s and at most the approval %+v", rec, is.Operation.ID, want)
	}
	rec = e.status(signedIn, agent.Ref, at(5*time.Second), storedriver.StatusApproved)
	if len(rec.Approvals) != 1 || rec.Approvals[0].Approver != "agent" || !rec.Approvals[0].ApprovedAt.IsZero() || rec.Approvals[0].Reference != "" {
		t.Errorf("agent approval = %+v", rec.Approvals)
	}
})

func sameApproval(a, b store.Approval) bool {
	return a.OperationID == b.OperationID && a.Revision == b.Revision && a.Approver == b.Approver &&
		a.ApprovedAt.Equal(b.ApprovedAt) && a.InputType == b.InputType && a.Reference == b.Reference &&
		a.RecordedAt.Equal(b.RecordedAt) && a.UsedAt.Equal(b.UsedAt)
}

// ---- Take (§6 "Websites") ----

var _ = add("W94 W99 with no matching approval Take issues as Issue does", func(t *testing.T, e *env) {
	a := storedAction(t, "k", `{}`)
	took := e.noClaim(signedIn, a, at(0))
	wantStored(t, took)
	is := e.issue(signedIn, a, at(time.Second))
	if !sameOperation(took.Operation, is.Operation) || took.Ref != is.Ref {
		t.Errorf("Take issued %+v, Issue %+v: want the same", took, is)
	}
	e.approve(signedIn, is, at(2*time.Second))
	e.claim(signedIn, a, at(3*time.Second))
})

var _ = add("W95 W96 the first recorded approval is taken, one per request", func(t *testing.T, e *env) {
	a := action(t, "k", `{"same":"terms"}`)
	r1 := e.issue(signedIn, a, at(0))
	r2 := e.issue(signedIn, a, at(lifetime/2+time.Second)) // same terms, a new revision (W39)
	if r2.Operation.Revision == r1.Operation.Revision {
		t.Fatal("setup: want two revisions with the same terms")
	}
	e.approve(signedIn, r2, at(6*time.Minute)) // recorded first
	e.approve(signedIn, r1, at(7*time.Minute))
	c := e.claim(signedIn, a, at(8*time.Minute))
	if c.Operation.Revision != r2.Operation.Revision {
		t.Fatalf("W95: took %s, want the first recorded %s", c.Operation.Revision, r2.Operation.Revision)
	}
	e.finish(c, store.OutcomeNotPerformed, at(8*time.Minute))
	rec := e.status(signedIn, r1.Ref, at(8*time.Minute), storedriver.StatusApproved) // W96: r1's is still there
	if len(rec.Approvals) != 2 || rec.Approvals[0].UsedAt.IsZero() || !rec.Approvals[1].UsedAt.IsZero() {
		t.Errorf("approvals = %+v, want the first used and the second waiting", rec.Approvals)
	}
	c = e.claim(signedIn, a, at(9*time.Minute))
	if c.Operation.Revision != r1.Operation.Revision {
		t.Errorf("took %s, want the remaining %s", c.Operation.Revision, r1.Operation.Revision)
	}
	e.finish(c, store.OutcomePerformed, at(9*time.Minute))
	e.noClaim(signedIn, a, at(9*time.Minute))
})

var _ = add("W135 64 concurrent requests with one approval claim once", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	// The same approval sent concurrently is recorded once.
	results := make([]storedriver.RecordResult, 64)
	run(t, e, 64, func(i int, s storedriver.Store) error {
		rep, err := s.Record(t.Context(), signedIn, is.Ref, approvalOf(is.Operation), at(time.Second), storedriver.RecordOptions{})
		results[i] = rep.Result
		return err
	})
	recorded := 0
	for _, r := range results {
		switch r {
		case storedriver.Recorded:
			recorded++
		case storedriver.AlreadyRecorded:
		default:
			t.Errorf("concurrent Record: %v", r)
		}
	}
	if recorded != 1 {
		t.Fatalf("concurrent Record: recorded %d times, want 1", recorded)
	}
	takes := make([]storedriver.TakeResult, 64)
	run(t, e, 64, func(i int, s storedriver.Store) error {
		var err error
		takes[i], err = s.Take(t.Context(), signedIn, a, at(2*time.Second))
		return err
	})
	claims := 0
	for _, res := range takes {
		checkTakeResult(t, res)
		switch {
		case res.Claim != nil:
			claims++
		case res.Ref != "" && res.Operation.ID == is.Operation.ID:
			t.Errorf("W141: issued the performing operation %s", is.Operation.ID)
		}
	}
	if claims != 1 {
		t.Fatalf("W135: %d claims, want exactly 1", claims)
	}
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusPerforming)
})

// run calls f n times concurrently, spread over the harness's clients.
func run(t *testing.T, e *env, n int, f func(i int, s storedriver.Store) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i, e.client(i))
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

var _ = add("W46 W104 only a Session that can approve the operation takes its approval", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	for _, o := range []store.Owner{otherAgent, otherUser, otherAccount, signedOut} {
		if got := e.noClaim(o, a, at(2*time.Second)); got.Operation.ID == is.Operation.ID {
			t.Errorf("%+v: issued the other owner's operation %s", o, got.Operation.ID)
		}
	}
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusApproved)
	// Any client (web server) of the same store takes it.
	res, err := e.client(len(e.clients())-1).Take(t.Context(), signedIn, a, at(4*time.Second))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take on the last client: %+v, %v", res, err)
	}
})

var _ = add("W32 W99 W117 W118 only equal terms match", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_1", `{"item":"itm_4Qa","size":"M","price":{"amount":"70.00","currency":"USD"}}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	other := action(t, "exchange:ord_1", `{"item":"itm_4Qa","size":"L","price":{"amount":"70.00","currency":"USD"}}`)
	got := e.noClaim(signedIn, other, at(2*time.Second))
	if got.Operation.ID != is.Operation.ID || got.Operation.Revision == is.Operation.Revision {
		t.Errorf("W99: other terms got %+v, want a new revision of %s", got.Operation, is.Operation.ID)
	}
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusApproved)
	// The same meaning in another member order is the same request (W118).
	reordered := action(t, "exchange:ord_1", `{"price":{"currency":"USD","amount":"70.00"},"size":"M","item":"itm_4Qa"}`)
	if c := e.claim(signedIn, reordered, at(4*time.Second)); !sameOperation(c.Operation, is.Operation) {
		t.Errorf("claimed %+v, want %+v", c.Operation, is.Operation)
	}
})

var _ = add("W102 W103 an approval applies until its revision's expires_at", func(t *testing.T, e *env) {
	a, b := action(t, "ontime", `{}`), action(t, "late", `{}`)
	is := e.issue(signedIn, a, at(0))
	late := e.issue(signedIn, b, at(0))
	e.approve(signedIn, is, at(time.Second))
	e.approve(signedIn, late, at(time.Second))
	e.claim(signedIn, a, is.Operation.ExpiresAt.Add(-time.Second))
	if got := e.noClaim(signedIn, b, late.Operation.ExpiresAt.Add(time.Second)); got.Operation.Revision == late.Operation.Revision {
		t.Errorf("W103: issued the expired revision again")
	}
})

// W103 with a later revision: the approved revision is no longer the
// operation's current one, and the current one is still live, so a store
// that judged the approval by its operation's current revision, not by its
// own, would apply it. The later revision is for other terms, or for the
// same terms renewed past half their lifetime (W39), and is returned before
// or after the approval is recorded. Each store is judged by the rule here,
// not by agreeing with another store (TestSameAsMemory). Everything goes
// through Take, the Gate's step.
// Each runs with the operation computed into its refs and with it stored
// (storedAction): a store that never stored the later revision may have
// forgotten the operation by then (W38), one that stored it may not.
var _ = addLaterRevision("other terms, after the approval", `{"v":2}`, true, false)
var _ = addLaterRevision("other terms, before the approval", `{"v":2}`, false, false)
var _ = addLaterRevision("the same terms renewed, before the approval", `{"v":1}`, false, false)
var _ = addLaterRevision("other terms, after the approval, stored", `{"v":2}`, true, true)
var _ = addLaterRevision("other terms, before the approval, stored", `{"v":2}`, false, true)
var _ = addLaterRevision("the same terms renewed, before the approval, stored", `{"v":1}`, false, true)

func addLaterRevision(what, laterTerms string, approveFirst, stored bool) struct{} {
	return add("W103 W115 an expired approval stays expired after a later revision of its operation: "+what, func(t *testing.T, e *env) {
		act := action
		if stored {
			act = storedAction
		}
		a1 := act(t, "k", `{"v":1}`)
		r1 := e.noClaim(signedIn, a1, at(0))
		if stored {
			wantStored(t, r1)
		}
		if approveFirst {
			e.approve(signedIn, r1, at(time.Second))
		}
		// Past half the lifetime, so that the same terms are renewed too.
		r2 := e.noClaim(signedIn, act(t, "k", laterTerms), at(lifetime/2+time.Second))
		if r2.Operation.ID != r1.Operation.ID || r2.Operation.Revision == r1.Operation.Revision {
			t.Fatalf("later request: %+v, want a new revision of %s", r2.Operation, r1.Operation.ID)
		}
		if !r2.Operation.ExpiresAt.After(r1.Operation.ExpiresAt.Add(time.Second)) {
			t.Fatalf("later revision expires %v, not after the approved one's %v", r2.Operation.ExpiresAt, r1.Operation.ExpiresAt)
		}
		if !approveFirst {
			e.approve(signedIn, r1, at(lifetime/2+2*time.Second))
		}
		// At its expires_at the approval still applies (W102, W18): looked
		// up, not taken, so that it is there for the step after.
		e.status(signedIn, r1.Ref, r1.Operation.ExpiresAt, storedriver.StatusApproved)
		// One second later, the later revision still live: it no longer
		// applies. (Computed, the later revision was never stored, so the
		// store may have forgotten the operation, W38.)
		late := r1.Operation.ExpiresAt.Add(time.Second)
		if rec, found := e.lookup(signedIn, r1.Ref, late); found {
			if rec.Status != storedriver.StatusWaiting || len(rec.Approvals) > 1 || len(rec.Approvals) == 1 && !rec.Approvals[0].UsedAt.IsZero() {
				t.Errorf("Lookup: %s with approvals %+v, want waiting, the expired one unused (or forgotten)", rec.Status, rec.Approvals)
			}
		} else if stored {
			t.Errorf("Lookup: not found, though its revision %s is live until %v", r2.Operation.Revision, r2.Operation.ExpiresAt)
		}
		res := e.take(signedIn, a1, late)
		if res.Claim != nil {
			t.Fatalf("the approved terms requested after the approved revision's expires_at claimed %s.%s: an expired approval was applied", res.Claim.Operation.ID, res.Claim.Operation.Revision)
		}
		if res.Ref == "" {
			t.Fatalf("the approved terms requested after the approved revision's expires_at: %+v, want a new ref", res)
		}
		got := res.Operation
		if got.Revision == r1.Operation.Revision || !got.ExpiresAt.After(late) {
			t.Errorf("issued %+v, want a live revision other than the expired %s", got, r1.Operation.Revision)
		}
		// The approval sent again fails check 3 (W115), answered with a
		// live revision, never the one it names (W122). Computed, the later
		// revision was never stored: the store may have forgotten the
		// operation, or find it expired (W101).
		switch rep := e.record(signedIn, r1.Ref, approvalOf(r1.Operation), late); {
		case rep.Result == storedriver.RevisionMismatch:
			if rep.Operation.Revision == r1.Operation.Revision || !rep.Operation.ExpiresAt.After(late) {
				t.Errorf("re-approval answered %+v, want a live revision other than %s", rep.Operation, r1.Operation.Revision)
			}
		case !stored && (rep.Result == storedriver.NotFound || rep.Result == storedriver.OperationExpired):
		default:
			t.Errorf("re-approval of the expired revision: %v, want revision mismatch", rep.Result)
		}
		// Nothing was performed: a fresh approval of these terms is taken.
		e.approve(signedIn, res, late)
		if c := e.claim(signedIn, a1, late.Add(time.Second)); c.Operation.Revision != got.Revision {
			t.Errorf("claimed %s, want the fresh approval's %s", c.Operation.Revision, got.Revision)
		}
	})
}

var _ = add("W37 two approved revisions of one operation: the request's terms choose, and it is performed once", func(t *testing.T, e *env) {
	a1, a2 := action(t, "k", `{"size":"M"}`), action(t, "k", `{"size":"L"}`)
	r1 := e.issue(signedIn, a1, at(0))
	r2 := e.issue(signedIn, a2, at(time.Second))
	e.approve(signedIn, r1, at(2*time.Second))
	e.approve(signedIn, r2, at(3*time.Second))
	c := e.claim(signedIn, a2, at(4*time.Second))
	if c.Operation.Revision != r2.Operation.Revision {
		t.Fatalf("took %s, want the second's %s", c.Operation.Revision, r2.Operation.Revision)
	}
	rec := e.status(signedIn, r1.Ref, at(5*time.Second), storedriver.StatusPerforming)
	if len(rec.Approvals) != 2 || rec.Approvals[0].Revision != r1.Operation.Revision || !rec.Approvals[0].UsedAt.IsZero() {
		t.Errorf("approvals = %+v, want the first still recorded", rec.Approvals)
	}
	// W145: the first's request meets a performing operation.
	if res := e.take(signedIn, a1, at(6*time.Second)); !res.Busy {
		t.Errorf("while performing: %+v, want busy", res)
	}
	e.finish(c, store.OutcomePerformed, at(7*time.Second))
	got := e.noClaim(signedIn, a1, at(8*time.Second))
	if got.Operation.ID == r1.Operation.ID {
		t.Errorf("W141: after performing, issued the performed operation")
	}
	e.status(signedIn, r1.Ref, at(9*time.Second), storedriver.StatusPerformed)
})

var _ = add("W145 a matching approval of a performing operation: busy", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	r1 := e.issue(signedIn, a, at(0))
	r2 := e.issue(signedIn, a, at(lifetime/2+time.Second))
	e.approve(signedIn, r1, at(6*time.Minute))
	e.approve(signedIn, r2, at(6*time.Minute))
	c := e.claim(signedIn, a, at(7*time.Minute))
	res := e.take(signedIn, a, at(7*time.Minute))
	if !res.Busy {
		t.Fatalf("want busy, got %+v", res)
	}
	e.status(signedIn, r1.Ref, at(7*time.Minute), storedriver.StatusPerforming)
	e.finish(c, store.OutcomePerformed, at(8*time.Minute))
	// W37: performed, so the other approval is never taken.
	if got := e.noClaim(signedIn, a, at(9*time.Minute)); got.Operation.ID == r1.Operation.ID {
		t.Errorf("W141: issued the performed operation")
	}
})

var _ = add("W145 while an action's operation is performed, a request for it is busy, whatever its terms", func(t *testing.T, e *env) {
	a := action(t, "k", `{"size":"M"}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	// The same terms again (the browser's repeat while the handler runs, or
	// while a lost claim awaits Release), and other terms: neither gets a
	// new operation to approve while the first may be taking effect.
	for _, terms := range []string{`{"size":"M"}`, `{"size":"L"}`} {
		if res := e.take(signedIn, action(t, "k", terms), at(3*time.Second)); !res.Busy {
			t.Errorf("%s while performing: %+v, want busy", terms, res)
		}
	}
	e.finish(c, store.OutcomePerformed, at(4*time.Second))
	if got := e.noClaim(signedIn, a, at(5*time.Second)); got.Operation.ID == is.Operation.ID {
		t.Errorf("W141: after performing, issued the performed operation")
	}
})

var _ = add("W145 an Issue while the action's operation is performed offers nothing new to approve: requests stay busy until it is done", func(t *testing.T, e *env) {
	a := action(t, "k", `{"size":"M"}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	// Issue is not the Gate's path, but a site may call it (a page that
	// shows the operation's terms ahead of the request): other terms get a
	// revision of the operation being performed, which no approval can use
	// until it is done, on every store alike.
	other := e.issue(signedIn, action(t, "k", `{"size":"L"}`), at(3*time.Second))
	if other.Operation.ID != is.Operation.ID {
		t.Fatalf("Issue while performing: a second operation %s beside %s", other.Operation.ID, is.Operation.ID)
	}
	e.wantRecord(signedIn, other.Ref, approvalOf(other.Operation), at(3*time.Second), storedriver.BeingPerformed)
	for _, terms := range []string{`{"size":"M"}`, `{"size":"L"}`, `{"size":"S"}`} {
		if res := e.take(signedIn, action(t, "k", terms), at(4*time.Second)); !res.Busy {
			t.Errorf("%s after an Issue while performing: %+v, want busy", terms, res)
		}
	}
	// Not performed after all (W98): the operation waits again, and the
	// revision Issue added can now be approved and performed.
	e.finish(c, store.OutcomeNotPerformed, at(5*time.Second))
	e.approve(signedIn, other, at(6*time.Second))
	got := e.claim(signedIn, action(t, "k", `{"size":"L"}`), at(7*time.Second))
	if got.Operation.ID != is.Operation.ID || got.Operation.Revision != other.Operation.Revision {
		t.Errorf("after not performing: claimed %s.%s, want %s", got.Operation.ID, got.Operation.Revision, other.Ref)
	}
})

var _ = add("W145 W142 an Issue while the outcome is not known keeps the action busy past its new revision's expiry", func(t *testing.T, e *env) {
	a := action(t, "k", `{"size":"M"}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	e.finish(c, store.OutcomeUnknown, at(3*time.Second))
	// A revision for other terms (Issue), which expires long before the
	// operation, still performing, is forgotten (W138).
	e.issue(signedIn, action(t, "k", `{"size":"L"}`), at(4*time.Second))
	later := at(lifetime + time.Hour)
	if e.h.Advance != nil {
		e.h.Advance(later.Sub(base))
	}
	for _, terms := range []string{`{"size":"M"}`, `{"size":"L"}`} {
		if res := e.take(signedIn, action(t, "k", terms), later); !res.Busy {
			t.Errorf("%s after the new revision expired, the outcome unknown: %+v, want busy", terms, res)
		}
	}
	e.status(signedIn, is.Ref, later, storedriver.StatusPerforming)
})

var _ = add("W145 W142 an outcome not known keeps its action busy past the action's lifetime", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	e.finish(c, store.OutcomeUnknown, at(3*time.Second))
	// Long after the action's own lifetime (and its revision's expiry), the
	// operation is still performing (W138): a request for the action must
	// still not get a new operation to approve.
	later := at(lifetime + time.Hour)
	if e.h.Advance != nil {
		e.h.Advance(later.Sub(base))
	}
	if res := e.take(signedIn, a, later); !res.Busy {
		t.Errorf("after the lifetime, outcome unknown: %+v, want busy", res)
	}
	e.status(signedIn, is.Ref, later, storedriver.StatusPerforming)
})

// ---- Finish (§7) ----

var _ = addRemembered(lifetime, "expires_at before now+retention")
var _ = addRemembered(3*storekit.DefaultRetention, "expires_at after now+retention")

func addRemembered(life time.Duration, what string) struct{} {
	return add("W137 W109 a performed operation is remembered until max(expires_at, now+retention): "+what, func(t *testing.T, e *env) {
		a := action(t, "k", `{}`)
		a.Lifetime = life
		is := e.issue(signedIn, a, at(0))
		e.approve(signedIn, is, at(time.Second))
		c := e.claim(signedIn, a, at(2*time.Second))
		e.finish(c, store.OutcomePerformed, at(3*time.Second))
		until := at(3 * time.Second).Add(storekit.DefaultRetention)
		if is.Operation.ExpiresAt.After(until) {
			until = is.Operation.ExpiresAt
		}
		e.status(signedIn, is.Ref, is.Operation.ExpiresAt, storedriver.StatusPerformed)
		e.status(signedIn, is.Ref, until, storedriver.StatusPerformed)
		e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), until, storedriver.AlreadyPerformed)
		if got := e.noClaim(signedIn, a, until); got.Operation.ID == is.Operation.ID {
			t.Errorf("W141: issued the performed operation")
		}
	})
}

var _ = add("W98 not done: the operation waits again, its approval used up", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	e.finish(c, store.OutcomeNotPerformed, at(3*time.Second))
	rec := e.status(signedIn, is.Ref, at(4*time.Second), storedriver.StatusWaiting)
	if len(rec.Approvals) != 1 || !rec.Approvals[0].UsedAt.Equal(at(2*time.Second)) {
		t.Errorf("approvals = %+v, want one used at the claim", rec.Approvals)
	}
	again := e.noClaim(signedIn, a, at(5*time.Second))
	if again.Operation.ID != is.Operation.ID || again.Operation.Revision == is.Operation.Revision {
		t.Fatalf("after not done: issued %+v, want a new revision of %s", again.Operation, is.Operation.ID)
	}
	e.approve(signedIn, again, at(6*time.Second))
	c = e.claim(signedIn, a, at(7*time.Second))
	if c.Operation.Revision != again.Operation.Revision {
		t.Errorf("took %s, want %s", c.Operation.Revision, again.Operation.Revision)
	}
	if err := e.h.Store.Finish(t.Context(), *c, store.OutcomePerformed, at(8*time.Second)); err != nil {
		t.Fatal(err)
	}
	e.status(signedIn, is.Ref, at(9*time.Second), storedriver.StatusPerformed)
})

var _ = add("W138 W142 unknown: the operation stays performing, even past expires_at", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	e.finish(c, store.OutcomeUnknown, at(3*time.Second))
	late := is.Operation.ExpiresAt.Add(time.Hour)
	e.status(signedIn, is.Ref, late, storedriver.StatusPerforming)
	e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), late, storedriver.BeingPerformed)
	e.finish(c, store.OutcomeUnknown, late) // renews how long it is kept
	later := late.Add(storekit.DefaultRetention - time.Second)
	e.status(signedIn, is.Ref, later, storedriver.StatusPerforming)
	// The claim is still held, so the outcome can be reported once known.
	e.finish(c, store.OutcomePerformed, later)
	e.status(signedIn, is.Ref, later, storedriver.StatusPerformed)
})

var _ = add("finishing a claim that is not held: ErrClaimLost", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	lost := func(what string, claim store.Claim, out store.Outcome) {
		t.Helper()
		if err := e.h.Store.Finish(t.Context(), claim, out, at(3*time.Second)); !errors.Is(err, storedriver.ErrClaimLost) {
			t.Errorf("%s: %v, want ErrClaimLost", what, err)
		}
	}
	wrong := *c
	wrong.Token = c.Token + "x"
	lost("wrong token", wrong, store.OutcomePerformed)
	empty := *c
	empty.Token = ""
	lost("no token", empty, store.OutcomePerformed)
	unknownOp := *c
	unknownOp.Operation.ID = "op_00000000000000000000"
	lost("unknown operation", unknownOp, store.OutcomePerformed)
	otherOwner := *c
	otherOwner.Owner = otherAgent
	lost("another owner", otherOwner, store.OutcomePerformed)
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusPerforming)
	e.finish(c, store.OutcomeNotPerformed, at(3*time.Second))
	lost("finished already", *c, store.OutcomePerformed)
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusWaiting)

	again := e.noClaim(signedIn, a, at(4*time.Second))
	e.approve(signedIn, again, at(4*time.Second))
	c2 := e.claim(signedIn, a, at(5*time.Second))
	lost("an earlier claim of the same operation", *c, store.OutcomePerformed)
	e.finish(c2, store.OutcomePerformed, at(5*time.Second))
	lost("performed", *c2, store.OutcomePerformed)
	lost("performed, not done", *c2, store.OutcomeNotPerformed)
	e.status(signedIn, is.Ref, at(6*time.Second), storedriver.StatusPerformed)
})

// ---- UseOnce ----

var _ = add("UseOnce: first use only, until the given time", func(t *testing.T, e *env) {
	use := func(key string, until, now time.Time, want bool) {
		t.Helper()
		first, err := e.client(int(now.Sub(base)/time.Second)).UseOnce(t.Context(), key, until, now)
		if err != nil || first != want {
			t.Fatalf("UseOnce(%s, now=%v): %v, %v; want %v", key, now.Sub(base), first, err, want)
		}
	}
	until := at(time.Minute)
	use("jti-1", until, at(0), true)
	use("jti-1", until, at(time.Second), false)
	use("jti-2", until, at(time.Second), true)
	use("jti-1", until, until.Add(-time.Second), false)
	use("jti-1", at(2*time.Minute), until.Add(time.Second), true)
	use("jti-1", at(2*time.Minute), until.Add(2*time.Second), false)
})

var _ = add("Marked: a UseOnce marker read without setting it, as UseOnce judges it", func(t *testing.T, e *env) {
	// The kit reads the marker Sessions.Unbind leaves with it, on a joined
	// browser's requests: with the store's own read (storekit.OnceMarked)
	// when it has one, else with storewrap.Marked's expired UseOnce; both
	// must agree with UseOnce, and the read must set nothing.
	type marker interface {
		Marked(ctx context.Context, key string, now time.Time) (bool, error)
	}
	if _, ok := e.h.Store.(storekit.OnceMarked); !ok {
		t.Logf("%T has no read of its own: storewrap.Marked uses UseOnce", e.h.Store)
	}
	readers := map[string]func(s storedriver.Store) marker{
		"own or fallback": func(s storedriver.Store) marker { return markedBy{s, storewrap.Marked} },
		"fallback":        func(s storedriver.Store) marker { return markedBy{useOnceOnly{s}, storewrap.Marked} },
	}
	for name, reader := range readers {
		key := "opsgate-unbound:" + name
		marked := func(client int, now time.Time, want bool) {
			t.Helper()
			got, err := reader(e.client(client)).Marked(e.ctx(), key, now)
			if err != nil || got != want {
				t.Fatalf("%s: Marked at %v: %v, %v; want %v", name, now.Sub(base), got, err, want)
			}
		}
		marked(0, at(0), false)
		marked(1, at(0), false) // reading set nothing
		if first, err := e.client(2).UseOnce(e.ctx(), key, at(time.Minute), at(time.Second)); err != nil || !first {
			t.Fatalf("%s: UseOnce after Marked: %v %v, want the first use", name, first, err)
		}
		marked(3, at(2*time.Second), true)
		marked(0, at(time.Minute), true) // until is inclusive, as UseOnce's
		marked(1, at(time.Minute+time.Second), false)
		if first, err := e.client(2).UseOnce(e.ctx(), key, at(2*time.Minute), at(time.Minute+2*time.Second)); err != nil || !first {
			t.Fatalf("%s: UseOnce past until: %v %v, want a first use", name, first, err)
		}
	}
})

var _ = add("MarkedInTake: a Take checks the marker its context names first, and does nothing when it is set", func(t *testing.T, e *env) {
	// The Gate names Unbind's marker for the browser's join cookie
	// (storekit.WithMarker), a OnceKey of the Take's owner, so that a
	// joined browser's gated request is one step. A store that doesn't
	// check it says so (the Gate then checks with Marked first).
	if !storewrap.MarksInTake(e.h.Store) {
		t.Skipf("%T does not check a marker in Take", e.h.Store)
	}
	key := storekit.OnceKey(signedIn.Agent, signedIn.User, "unbound:storetest")
	marked := storekit.WithMarker(e.ctx(), key)
	a := action(t, "k", `{"size":"M"}`)
	// Not marked: Take is the Take it would be.
	is, err := e.client(0).Take(marked, signedIn, a, at(0))
	if err != nil || is.Ref == "" {
		t.Fatalf("Take with a marker not set: %+v, %v; want an issued operation", is, err)
	}
	e.approve(signedIn, is, at(time.Second))
	if first, err := e.client(1).UseOnce(e.ctx(), key, at(time.Minute), at(2*time.Second)); err != nil || !first {
		t.Fatalf("UseOnce of the marker: %v %v", first, err)
	}
	// Set: nothing done, on every client, whatever the Take would do (an
	// approval waits for this one).
	for i := range e.clients() {
		res, err := e.client(i).Take(marked, signedIn, a, at(3*time.Second))
		if !errors.Is(err, storekit.ErrMarked) || res.Claim != nil {
			t.Fatalf("client %d: Take with the marker set: %+v, %v; want ErrMarked and no claim", i, res, err)
		}
	}
	if rec := e.status(signedIn, is.Ref, at(4*time.Second), storedriver.StatusApproved); len(rec.Approvals) != 1 || !rec.Approvals[0].UsedAt.IsZero() {
		t.Fatalf("after the marked Takes: %+v, want the approval unused", rec.Approvals)
	}
	// Another owner's Take, and one without the marker, are not refused.
	other := action(t, "k2", `{"size":"L"}`)
	if res, err := e.client(0).Take(e.ctx(), signedIn, other, at(5*time.Second)); err != nil || res.Ref == "" {
		t.Fatalf("Take naming no marker: %+v, %v", res, err)
	}
	// A marker that is not one of the owner's keys (another slot on a
	// Cluster) is checked too.
	for _, k := range []string{storekit.OnceKey("agent-b", "user-9", "unbound:storetest"), "unbound:plain"} {
		if first, err := e.client(0).UseOnce(e.ctx(), k, at(time.Minute), at(5*time.Second)); err != nil || !first {
			t.Fatalf("UseOnce of %s: %v %v", k, first, err)
		}
		if _, err := e.client(1).Take(storekit.WithMarker(e.ctx(), k), signedIn, a, at(6*time.Second)); !errors.Is(err, storekit.ErrMarked) {
			t.Fatalf("Take with marker %s set: %v; want ErrMarked", k, err)
		}
	}
	// Past the marker's until: Take is the Take it would be, and claims.
	c, err := e.client(1).Take(marked, signedIn, a, at(time.Minute+time.Second))
	if err != nil || c.Claim == nil {
		t.Fatalf("Take past the marker's until: %+v, %v; want the approval claimed", c, err)
	}
	e.finish(c.Claim, store.OutcomePerformed, at(time.Minute+2*time.Second))
})

// markedBy reads with f; useOnceOnly hides a store's own read, so that
// storewrap.Marked falls back to UseOnce.
type markedBy struct {
	s storedriver.Store
	f func(context.Context, storedriver.Store, string, time.Time) (bool, error)
}

func (m markedBy) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	return m.f(ctx, m.s, key, now)
}

type useOnceOnly struct{ storedriver.Store }

var _ = add("RecordOptions.Once: the request's single-use key is used up in the same step, and a replay records nothing", func(t *testing.T, e *env) {
	a := action(t, "k", `{"size":"M"}`)
	is := e.issue(signedIn, a, at(0))
	rec := func(client int, key string, now time.Time) storedriver.RecordResult {
		t.Helper()
		rep, err := e.client(client).Record(e.ctx(), signedIn, is.Ref, approvalOf(is.Operation), now,
			storedriver.RecordOptions{Once: key, OnceUntil: at(time.Minute)})
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
		return rep.Result
	}
	k1 := storekit.OnceKey(signedIn.Agent, signedIn.User, "jti:agent-a:1")
	if got := rec(0, k1, at(time.Second)); got != storedriver.Recorded {
		t.Fatalf("first Record with its key: %v", got)
	}
	// The same key again, at another web server: a replay, refused before
	// the checks (it would otherwise be "already recorded").
	if got := rec(1, k1, at(2*time.Second)); got != storedriver.Replayed {
		t.Fatalf("replayed Record: %v, want replayed", got)
	}
	// A key used by UseOnce (a lookup) is used up for Record, and back.
	k2 := storekit.OnceKey(signedIn.Agent, signedIn.User, "jti:agent-a:2")
	if first, err := e.client(2).UseOnce(e.ctx(), k2, at(time.Minute), at(3*time.Second)); err != nil || !first {
		t.Fatalf("UseOnce: %v %v", first, err)
	}
	if got := rec(3, k2, at(4*time.Second)); got != storedriver.Replayed {
		t.Fatalf("Record after UseOnce of its key: %v, want replayed", got)
	}
	k3 := storekit.OnceKey(signedIn.Agent, signedIn.User, "jti:agent-a:3")
	rec(0, k3, at(5*time.Second))
	if first, err := e.client(1).UseOnce(e.ctx(), k3, at(time.Minute), at(6*time.Second)); err != nil || first {
		t.Fatalf("UseOnce after Record used its key: %v %v, want false", first, err)
	}
	// Past its until the key may be used again (the token can't verify then).
	if got := rec(2, k1, at(time.Minute+time.Second)); got == storedriver.Replayed {
		t.Fatalf("after until: %v", got)
	}
	// A replay never records: only the first approval is there.
	got, _ := e.lookup(signedIn, is.Ref, at(7*time.Second))
	if len(got.Approvals) != 1 {
		t.Fatalf("approvals = %d, want 1", len(got.Approvals))
	}
})

// ---- Ownership (§3 "Who can approve it", §8.2) ----

var _ = add("W76 W148 an owner's operations are invisible to another owner", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedOut, a, at(0))
	e.approve(signedOut, is, at(time.Second))
	for _, o := range []store.Owner{otherAgent, otherUser} {
		if _, found := e.lookup(o, is.Ref, at(2*time.Second)); found {
			t.Errorf("%+v found another owner's operation", o)
		}
		e.wantRecord(o, is.Ref, approvalOf(is.Operation), at(2*time.Second), storedriver.NotFound)
	}
	// A signed-in Session of the same agent and User finds it (the caller
	// compares accounts) but cannot approve or take it.
	rec, found := e.lookup(signedIn, is.Ref, at(2*time.Second))
	if !found || rec.Owner != signedOut {
		t.Errorf("signed-in lookup: found=%v owner=%+v", found, rec.Owner)
	}
	e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(2*time.Second), storedriver.NotFound)
	e.noClaim(signedIn, a, at(2*time.Second))
	e.claim(signedOut, a, at(3*time.Second))
})

// ---- Garbage (webkit/RULES.md "The store": nothing grows without bound) ----

var _ = add("W139 everything expires: nothing grows without bound", func(t *testing.T, e *env) {
	var refs []string
	now := at(0)
	for i := range 20 {
		o := signedIn
		if i%2 == 1 {
			o = signedOut
		}
		// An action each (one whose operation's outcome is not known keeps
		// that operation, W145): waiting, approved, performed, outcome
		// unknown in turn.
		a := action(t, fmt.Sprint("k", i), fmt.Sprintf(`{"i":%d}`, i))
		is := e.issue(o, a, now)
		refs = append(refs, is.Ref)
		if i%4 == 0 {
			continue // waiting
		}
		e.approve(o, is, now)
		if i%4 == 1 {
			continue // approved
		}
		c := e.claim(o, a, now)
		switch i % 4 {
		case 2:
			e.finish(c, store.OutcomePerformed, now)
		case 3:
			e.finish(c, store.OutcomeUnknown, now)
		}
		if _, err := e.h.Store.UseOnce(t.Context(), fmt.Sprint("jti-", i), now.Add(time.Minute), now); err != nil {
			t.Fatal(err)
		}
	}
	if e.h.Size != nil {
		n, err := e.h.Size(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("Size = 0 with 20 operations")
		}
	}
	jump := 3*storekit.DefaultRetention + time.Hour
	if e.h.Advance != nil {
		e.h.Advance(jump)
	}
	far := now.Add(jump)
	for _, o := range []store.Owner{signedIn, signedOut} {
		for _, ref := range refs {
			if _, found := e.lookup(o, ref, far); found {
				t.Errorf("Lookup %s: still found after %v", ref, jump)
			}
		}
	}
	// Calls that change nothing, with the late clock, so that a store that
	// sweeps as it goes gets to.
	if _, err := e.h.Store.Record(t.Context(), signedIn, refs[0], store.Approval{}, far, storedriver.RecordOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.h.Size != nil {
		n, err := e.h.Size(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n > 2 {
			t.Errorf("Size = %d after every record expired, want 0 or near", n)
		}
	}
})

// ---- Store down (webkit/RULES.md "Non-negotiables": fail closed) ----

var _ = add("W144 a store that is down fails every call quickly, without a hang or panic", func(t *testing.T, e *env) {
	if e.h.Down == nil {
		t.Skip("the harness cannot stop its backend")
	}
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	e.h.Down()
	calls := map[string]func(ctx context.Context, s storedriver.Store) error{
		"Issue": func(ctx context.Context, s storedriver.Store) error {
			_, err := Issue(ctx, s, signedIn, a, at(2*time.Second))
			return err
		},
		"Take": func(ctx context.Context, s storedriver.Store) error {
			res, err := s.Take(ctx, signedIn, a, at(2*time.Second))
			if res.Claim != nil {
				t.Errorf("Take while down claimed: %+v", res)
			}
			return err
		},
		"Finish": func(ctx context.Context, s storedriver.Store) error {
			return s.Finish(ctx, store.Claim{Owner: signedIn, Operation: is.Operation, Token: "t"}, store.OutcomePerformed, at(2*time.Second))
		},
		"Lookup": func(ctx context.Context, s storedriver.Store) error {
			_, _, err := s.Lookup(ctx, signedIn, is.Ref, at(2*time.Second))
			return err
		},
		"Record": func(ctx context.Context, s storedriver.Store) error {
			_, err := s.Record(ctx, signedIn, is.Ref, approvalOf(is.Operation), at(2*time.Second), storedriver.RecordOptions{})
			return err
		},
		"UseOnce": func(ctx context.Context, s storedriver.Store) error {
			_, err := s.UseOnce(ctx, "jti", at(time.Minute), at(2*time.Second))
			return err
		},
	}
	for name, call := range calls {
		for i, s := range e.clients() {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			done := make(chan error, 1)
			go func() { done <- call(ctx, s) }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("%s on client %d: no error while down", name, i)
				} else if errors.Is(err, storedriver.ErrClaimLost) {
					t.Errorf("%s on client %d: %v, want a store error, not a lost claim", name, i, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%s on client %d: no answer within 10 s while down", name, i)
			}
			cancel()
		}
	}
})

// ---- Additions: W27 and W140 ----

var _ = add("W26 W27 a reworded summary keeps the revision and its words", func(t *testing.T, e *env) {
	a := storedAction(t, "exchange:ord_9", `{"size":"M"}`)
	first := e.issue(signedOut, a, at(0))
	wantStored(t, first)
	a.Summary = "Exchange it, reworded." + strings.Repeat(" and then some more", 120)
	again := e.issue(signedOut, a, at(time.Minute))
	if again.Operation.Revision != first.Operation.Revision {
		t.Fatalf("W27: a reworded summary made revision %s from %s", again.Operation.Revision, first.Operation.Revision)
	}
	// W26: what the revision said when it was returned is what it says now.
	if again.Operation.Summary != first.Operation.Summary || !again.Operation.ExpiresAt.Equal(first.Operation.ExpiresAt) {
		t.Errorf("W26: revision changed: %+v → %+v", first.Operation, again.Operation)
	}
})

var _ = add("W140 a retry after the operation is forgotten is not performed again", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_forgotten", `{"size":"M"}`)
	is := e.issue(signedOut, a, at(0))
	e.approve(signedOut, is, at(time.Minute))
	e.finish(e.claim(signedOut, a, at(2*time.Minute)), store.OutcomePerformed, at(2*time.Minute))
	// Far past expires_at and the retention: the store may have forgotten it.
	later := at(2*time.Minute + storekit.DefaultRetention + lifetime + time.Hour)
	if e.h.Advance != nil {
		e.h.Advance(later.Sub(base))
	}
	// The same approval again: never recorded for the old operation.
	reply := e.record(signedOut, is.Ref, approvalOf(is.Operation), later)
	if reply.Result == storedriver.Recorded || reply.Result == storedriver.AlreadyRecorded {
		t.Fatalf("the approval of a forgotten operation was recorded: %v", reply.Result)
	}
	// The browser's retry is a new request: a new operation, nothing claimed.
	iss := e.noClaim(signedOut, a, later)
	if iss.Operation.ID == is.Operation.ID {
		t.Errorf("W140: the forgotten operation %s was issued again", is.Operation.ID)
	}
})

// ---- Claims are never stranded (W144) ----

// tokenAction is a with the caller's claim token.
func tokenAction(a storedriver.TakeRequest, token string) storedriver.TakeRequest {
	a.ClaimToken = token
	return a
}

func (e *env) release(o store.Owner, token string, now time.Time, want bool) {
	e.t.Helper()
	got, err := e.client(5).Release(e.ctx(), o, token, now)
	if err != nil {
		e.t.Fatalf("Release: %v", err)
	}
	if got != want {
		e.t.Fatalf("Release %s: released=%v, want %v", token, got, want)
	}
}

var _ = add("W144 a released claim's approval performs on the next request", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	token := storekit.NewToken()
	c := e.claim(signedIn, tokenAction(a, token), at(2*time.Second))
	if c.Token != token {
		t.Fatalf("claim token %q, want the caller's %q", c.Token, token)
	}
	e.release(otherAgent, token, at(3*time.Second), false) // another owner's release is nothing
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusPerforming)
	e.release(signedIn, token, at(3*time.Second), true)
	rec := e.status(signedIn, is.Ref, at(4*time.Second), storedriver.StatusApproved)
	if len(rec.Approvals) != 1 || !rec.Approvals[0].UsedAt.IsZero() {
		t.Errorf("approvals after release = %+v, want one, not used up", rec.Approvals)
	}
	e.release(signedIn, token, at(4*time.Second), false) // idempotent
	if _, err := e.client(1).Take(e.ctx(), signedIn, tokenAction(a, token), at(5*time.Second)); !errors.Is(err, storedriver.ErrClaimLost) {
		t.Errorf("Take with the released token: %v, want ErrClaimLost", err)
	}
	// The approval was never used up: the next request performs it.
	c2 := e.claim(signedIn, tokenAction(a, storekit.NewToken()), at(6*time.Second))
	if c2.Operation.Revision != is.Operation.Revision {
		t.Fatalf("took %s, want %s", c2.Operation.Revision, is.Operation.Revision)
	}
	if err := e.client(4).Finish(e.ctx(), *c, store.OutcomePerformed, at(7*time.Second)); !errors.Is(err, storedriver.ErrClaimLost) {
		t.Errorf("Finish of the released claim: %v, want ErrClaimLost", err)
	}
	e.finish(c2, store.OutcomePerformed, at(7*time.Second))
	e.status(signedIn, is.Ref, at(8*time.Second), storedriver.StatusPerformed)
})

var _ = add("W144 a Take that runs after its Release claims nothing", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	token := storekit.NewToken()
	// The caller gave up before the store ran its Take (a stalled store):
	// the release arrives first.
	e.release(signedIn, token, at(2*time.Second), false)
	if res, err := e.client(1).Take(e.ctx(), signedIn, tokenAction(a, token), at(3*time.Second)); !errors.Is(err, storedriver.ErrClaimLost) {
		t.Fatalf("late Take: %+v, %v; want ErrClaimLost", res, err)
	}
	e.status(signedIn, is.Ref, at(4*time.Second), storedriver.StatusApproved)
	c := e.claim(signedIn, a, at(5*time.Second))
	e.finish(c, store.OutcomePerformed, at(6*time.Second))
})

var _ = add("W135 W144 a Take repeated with its token gets the same claim", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	token := storekit.NewToken()
	c := e.claim(signedIn, tokenAction(a, token), at(2*time.Second))
	again := e.claim(signedIn, tokenAction(a, token), at(3*time.Second))
	if again.Token != c.Token || !sameOperation(again.Operation, c.Operation) || !sameApproval(again.Approval, c.Approval) {
		t.Fatalf("repeated Take: %+v, want %+v", again, c)
	}
	e.finish(c, store.OutcomePerformed, at(4*time.Second))
	// A finished claim's token claims nothing again: the store may answer
	// ErrClaimLost, or (having forgotten the token with the claim) treat
	// the Take as a new request, which the performed operation never
	// matches (W141).
	res, err := e.client(1).Take(e.ctx(), signedIn, tokenAction(a, token), at(5*time.Second))
	if err != nil && !errors.Is(err, storedriver.ErrClaimLost) {
		t.Errorf("Take with a finished claim's token: %v, want ErrClaimLost or no claim", err)
	}
	if res.Claim != nil || (res.Ref != "" && res.Operation.ID == is.Operation.ID) {
		t.Errorf("Take with a finished claim's token: %+v, want no claim and not the performed operation", res)
	}
	e.release(signedIn, token, at(6*time.Second), false)
	e.status(signedIn, is.Ref, at(7*time.Second), storedriver.StatusPerformed)
})

var _ = add("W142 W144 a claim whose outcome was reported is never released", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	token := storekit.NewToken()
	c := e.claim(signedIn, tokenAction(a, token), at(2*time.Second))
	e.finish(c, store.OutcomeUnknown, at(3*time.Second))
	e.release(signedIn, token, at(4*time.Second), false)
	e.status(signedIn, is.Ref, at(5*time.Second), storedriver.StatusPerforming)
	e.finish(c, store.OutcomePerformed, at(6*time.Second))
	e.status(signedIn, is.Ref, at(7*time.Second), storedriver.StatusPerformed)

	b := action(t, "b", `{}`)
	isB := e.issue(signedIn, b, at(8*time.Second))
	e.approve(signedIn, isB, at(8*time.Second))
	tokenB := storekit.NewToken()
	cB := e.claim(signedIn, tokenAction(b, tokenB), at(9*time.Second))
	e.finish(cB, store.OutcomeNotPerformed, at(10*time.Second))
	e.release(signedIn, tokenB, at(11*time.Second), false)
	rec := e.status(signedIn, isB.Ref, at(12*time.Second), storedriver.StatusWaiting)
	if len(rec.Approvals) != 1 || rec.Approvals[0].UsedAt.IsZero() {
		t.Errorf("approvals = %+v, want the one used up", rec.Approvals)
	}
})

var _ = add("W95 W144 a released approval keeps its first-recorded place", func(t *testing.T, e *env) {
	a := action(t, "k", `{"v":1}`)
	r1 := e.issue(signedIn, a, at(0))
	e.approve(signedIn, r1, at(time.Second))
	// Past half its lifetime the same terms get a second revision (W39).
	r2 := e.issue(signedIn, a, at(lifetime/2+time.Second))
	if r2.Operation.Revision == r1.Operation.Revision {
		t.Fatalf("no second revision")
	}
	e.approve(signedIn, r2, at(lifetime/2+2*time.Second))
	token := storekit.NewToken()
	c := e.claim(signedIn, tokenAction(a, token), at(lifetime/2+3*time.Second))
	if c.Operation.Revision != r1.Operation.Revision {
		t.Fatalf("took %s, want the first recorded %s", c.Operation.Revision, r1.Operation.Revision)
	}
	e.release(signedIn, token, at(lifetime/2+4*time.Second), true)
	c = e.claim(signedIn, a, at(lifetime/2+5*time.Second))
	if c.Operation.Revision != r1.Operation.Revision {
		t.Errorf("after release took %s, want the first recorded %s again", c.Operation.Revision, r1.Operation.Revision)
	}
})

// A claim Take returned has passed its start mark (on Redis a step of its
// own, atomic with the claim; in memory the claim itself): its handler may
// be running, so no later request and no Performing undoes it, however
// late. Only its holder (Finish, or Release when it never ran the
// handler) or Resolve ends it. A store may undo a claim whose Take never
// returned it (its reply lost), but never this one.
var _ = add("W144 W145 a claim Take returned is never taken away, however late", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	c := e.claim(signedIn, a, at(2*time.Second))
	for _, later := range []time.Duration{time.Minute, time.Hour} {
		res, err := e.client(1).Take(e.ctx(), signedIn, tokenAction(a, storekit.NewToken()), at(later))
		if err != nil || !res.Busy {
			t.Fatalf("another request %v after a claim Take returned: %+v, %v; want busy (W145)", later, res, err)
		}
		if got := e.performing(at(later), at(later)); len(got) != 1 || got[is.Operation.ID].ClaimedAt.IsZero() {
			t.Fatalf("Performing %v on: %v, want the claim, listed for a person to decide", later, got)
		}
	}
	e.status(signedIn, is.Ref, at(time.Hour), storedriver.StatusPerforming)
	e.finish(c, store.OutcomePerformed, at(time.Hour))
	e.status(signedIn, is.Ref, at(time.Hour+time.Second), storedriver.StatusPerformed)
})

var _ = add("W144 a claim's holder releases it after Take returned it, and a late Take of its token claims nothing", func(t *testing.T, e *env) {
	a := action(t, "k", `{}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	token := storekit.NewToken()
	e.claim(signedIn, tokenAction(a, token), at(2*time.Second))
	// The holder never ran the handler (its browser left, its durability
	// was not confirmed): it releases, minutes later, while its store was
	// away.
	e.release(signedIn, token, at(5*time.Minute), true)
	e.status(signedIn, is.Ref, at(5*time.Minute), storedriver.StatusApproved)
	if got := e.performing(at(time.Hour), at(5*time.Minute+time.Second)); len(got) != 0 {
		t.Errorf("Performing after the release: %v, want none", got)
	}
	if _, err := e.client(1).Take(e.ctx(), signedIn, tokenAction(a, token), at(6*time.Minute)); !errors.Is(err, storedriver.ErrClaimLost) {
		t.Errorf("a Take of the released token, run late: %v, want ErrClaimLost", err)
	}
	c := e.claim(signedIn, a, at(7*time.Minute))
	e.finish(c, store.OutcomePerformed, at(7*time.Minute))
})

// ---- Performing and Resolve: outcomes nobody reported ----

func (e *env) reconciler() storedriver.Store { return e.h.Store }

func (e *env) performing(before, now time.Time) map[string]store.Stuck {
	e.t.Helper()
	out := map[string]store.Stuck{}
	for st, err := range e.reconciler().Performing(e.ctx(), before, now) {
		if err != nil {
			e.t.Fatalf("Performing: %v", err)
		}
		out[st.Operation.ID] = st
	}
	return out
}

var _ = add("W142 W137 Performing lists long-performing operations and Resolve settles them", func(t *testing.T, e *env) {
	a, b := action(t, "a", `{}`), action(t, "b", `{}`)
	isA := e.issue(signedIn, a, at(0))
	isB := e.issue(signedOut, b, at(0))
	e.approve(signedIn, isA, at(time.Second))
	e.approve(signedOut, isB, at(time.Second))
	cA := e.claim(signedIn, a, at(2*time.Second))
	e.finish(cA, store.OutcomeUnknown, at(3*time.Second))
	cB := e.claim(signedOut, b, at(10*time.Second))

	got := e.performing(at(5*time.Second), at(20*time.Second))
	if len(got) != 1 {
		t.Fatalf("claimed before 5s: %v, want only %s", got, isA.Operation.ID)
	}
	st := got[isA.Operation.ID]
	if st.Owner != signedIn || !sameOperation(st.Operation, isA.Operation) || !st.ClaimedAt.Equal(at(2*time.Second)) || !st.Unknown ||
		st.Approval.Revision != isA.Operation.Revision || !st.Approval.UsedAt.Equal(at(2*time.Second)) {
		t.Errorf("stuck = %+v", st)
	}
	got = e.performing(at(11*time.Second), at(20*time.Second))
	if len(got) != 2 || got[isB.Operation.ID].Owner != signedOut || got[isB.Operation.ID].Unknown {
		t.Fatalf("claimed before 11s: %+v, want both, b not unknown", got)
	}

	r := e.reconciler()
	if err := r.Resolve(e.ctx(), otherAccount, isA.Operation.ID, store.OutcomePerformed, at(21*time.Second)); !errors.Is(err, store.ErrNotPerforming) {
		t.Errorf("Resolve as another account: %v, want ErrNotPerforming", err)
	}
	if err := r.Resolve(e.ctx(), signedIn, isA.Operation.ID, store.OutcomeUnknown, at(21*time.Second)); err == nil {
		t.Errorf("Resolve as unknown: no error")
	}
	if err := r.Resolve(e.ctx(), signedIn, isA.Operation.ID, store.OutcomePerformed, at(21*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := r.Resolve(e.ctx(), signedIn, isA.Operation.ID, store.OutcomePerformed, at(22*time.Second)); !errors.Is(err, store.ErrNotPerforming) {
		t.Errorf("Resolve twice: %v, want ErrNotPerforming", err)
	}
	e.wantRecord(signedIn, isA.Ref, approvalOf(isA.Operation), at(23*time.Second), storedriver.AlreadyPerformed)

	if err := r.Resolve(e.ctx(), signedOut, isB.Operation.ID, store.OutcomeNotPerformed, at(24*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := e.client(4).Finish(e.ctx(), *cB, store.OutcomePerformed, at(25*time.Second)); !errors.Is(err, storedriver.ErrClaimLost) {
		t.Errorf("Finish after Resolve: %v, want ErrClaimLost", err)
	}
	rec := e.status(signedOut, isB.Ref, at(26*time.Second), storedriver.StatusWaiting)
	if rec.Current.Revision == isB.Operation.Revision {
		t.Errorf("not performed: Lookup offers the used-up revision (W90)")
	}
	if got := e.performing(at(time.Hour), at(27*time.Second)); len(got) != 0 {
		t.Errorf("after resolving: still performing %v", got)
	}
	// W137: performed is remembered for the retention at least.
	e.status(signedIn, isA.Ref, at(21*time.Second).Add(storekit.DefaultRetention-time.Second), storedriver.StatusPerformed)
})

// ---- Bounded work: caps (webkit/RULES.md "Bounded work") ----

var _ = add("an operation records at most MaxApprovalsPerOperation approvals, and keeps them among its revisions", func(t *testing.T, e *env) {
	var approved []storedriver.TakeResult
	for i := range storekit.MaxApprovalsPerOperation {
		is := e.issue(signedIn, action(t, "k", fmt.Sprintf(`{"n":%d}`, i)), at(0))
		e.approve(signedIn, is, at(0))
		approved = append(approved, is)
	}
	over := e.issue(signedIn, action(t, "k", `{"n":"over"}`), at(time.Second))
	e.wantRecord(signedIn, over.Ref, approvalOf(over.Operation), at(time.Second), storedriver.RateLimited)
	rep, err := e.h.Store.Record(e.ctx(), signedIn, over.Ref, approvalOf(over.Operation), at(time.Second), storedriver.RecordOptions{CheckOnly: true})
	if err != nil || rep.Result != storedriver.RateLimited {
		t.Errorf("CheckOnly over the cap: %v, %v", rep.Result, err)
	}
	if rec := e.status(signedIn, over.Ref, at(2*time.Second), storedriver.StatusApproved); len(rec.Approvals) != storekit.MaxApprovalsPerOperation {
		t.Errorf("approvals = %d, want %d", len(rec.Approvals), storekit.MaxApprovalsPerOperation)
	}
	// Ever new terms drop never-approved revisions, never an approved one.
	for i := range 2 * storekit.MaxRevisionsPerOperation {
		e.issue(signedIn, action(t, "k", fmt.Sprintf(`{"m":%d}`, i)), at(3*time.Second))
	}
	for _, is := range approved {
		e.wantRecord(signedIn, is.Ref, approvalOf(is.Operation), at(4*time.Second), storedriver.AlreadyRecorded)
	}
	c := e.claim(signedIn, action(t, "k", `{"n":3}`), at(5*time.Second))
	if c.Operation.Revision != approved[3].Operation.Revision {
		t.Errorf("took %s, want %s", c.Operation.Revision, approved[3].Operation.Revision)
	}
})

// The caps count stored operations: one stored when its ref is returned
// (storedAction) counts from then, and the request that would open one
// more gets ErrRateLimited.
var _ = add("an owner has at most DefaultMaxOpenPerOwner open operations: stored ones count when their ref is returned", func(t *testing.T, e *env) {
	limited := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, storedriver.ErrRateLimited) {
			t.Errorf("%s over the cap: %v, want ErrRateLimited", what, err)
		}
	}
	var first storedriver.TakeResult
	for i := range storekit.DefaultMaxOpenPerOwner {
		is := e.issue(signedIn, storedAction(t, fmt.Sprint("k", i), `{}`), at(0))
		if i == 0 {
			first = is
			wantStored(t, first)
		}
	}
	// A signed-out or another account's operation is the same agent and
	// User's: it counts too.
	_, err := Issue(e.ctx(), e.h.Store, signedOut, storedAction(t, "more", `{}`), at(time.Second))
	limited("Issue", err)
	_, err = e.client(1).Take(e.ctx(), signedIn, storedAction(t, "more", `{}`), at(time.Second))
	limited("Take", err)
	// Reusing an open operation opens nothing; another User is not counted.
	again := e.issue(signedIn, storedAction(t, "k0", `{}`), at(time.Second))
	if again.Operation.ID != first.Operation.ID {
		t.Errorf("k0 again: %s, want its operation %s", again.Operation.ID, first.Operation.ID)
	}
	e.issue(otherUser, storedAction(t, "more", `{}`), at(time.Second))
	// A performed operation is no longer open.
	e.approve(signedIn, first, at(2*time.Second))
	c := e.claim(signedIn, storedAction(t, "k0", `{}`), at(3*time.Second))
	e.finish(c, store.OutcomePerformed, at(4*time.Second))
	e.issue(signedIn, storedAction(t, "more", `{}`), at(5*time.Second))
	_, err = Issue(e.ctx(), e.h.Store, signedIn, storedAction(t, "more2", `{}`), at(5*time.Second))
	limited("Issue after one was performed and another opened", err)
	// Forgotten ones are not open either.
	e.issue(signedIn, storedAction(t, "later", `{}`), at(lifetime+time.Minute))
})

// A waiting operation computed into its ref is stored, and counted, by its
// first approval: past the cap, that approval gets RateLimited (429 from
// the endpoint) and records nothing. (A store that stores every waiting
// operation counts it when its ref is returned, as above.)
var _ = add("an owner has at most DefaultMaxOpenPerOwner open operations: a computed one counts when its first approval stores it", func(t *testing.T, e *env) {
	var first storedriver.TakeResult
	for i := range storekit.DefaultMaxOpenPerOwner {
		is := e.issue(signedIn, action(t, fmt.Sprint("k", i), `{}`), at(0))
		e.approve(signedIn, is, at(time.Second))
		if i == 0 {
			first = is
		}
	}
	overCap := func(key string, now time.Time) {
		t.Helper()
		is, err := Issue(e.ctx(), e.h.Store, signedIn, action(t, key, `{}`), now)
		if errors.Is(err, storedriver.ErrRateLimited) {
			return // counted when its ref would have been returned
		}
		if err != nil {
			t.Fatalf("Issue %s over the cap: %v", key, err)
		}
		if rep := e.record(signedIn, is.Ref, approvalOf(is.Operation), now); rep.Result != storedriver.RateLimited {
			t.Errorf("the approval of %s over the cap: %v, want RateLimited", key, rep.Result)
		}
		if rec, found := e.lookup(signedIn, is.Ref, now); found && rec.Status != storedriver.StatusWaiting {
			t.Errorf("%s after its refused approval: %s, want waiting (nothing recorded)", key, rec.Status)
		}
	}
	overCap("more", at(2*time.Second))
	// Approving a stored one again opens nothing.
	e.wantRecord(signedIn, first.Ref, approvalOf(first.Operation), at(2*time.Second), storedriver.AlreadyRecorded)
	// A performed operation is no longer open: one more may be stored,
	// and no second.
	e.finish(e.claim(signedIn, action(t, "k0", `{}`), at(3*time.Second)), store.OutcomePerformed, at(4*time.Second))
	e.approve(signedIn, e.issue(signedIn, action(t, "more", `{}`), at(5*time.Second)), at(5*time.Second))
	overCap("more2", at(6*time.Second))
	// Another User is not counted.
	e.approve(otherUser, e.issue(otherUser, action(t, "more", `{}`), at(6*time.Second)), at(6*time.Second))
	// Forgotten ones are not open either.
	later := at(lifetime + time.Minute)
	e.approve(signedIn, e.issue(signedIn, action(t, "later", `{}`), later), later)
})
