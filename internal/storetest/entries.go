package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// ---- Audit entries (§6, §8.1): an entry exists iff its step committed ----

// The Session and web server the suite's steps are made for.
const (
	sid      = "sid-7Hk2"
	instance = "web-1"
)

// withEntry is the context the Gate and the endpoint pass: the Session's
// sid, the action's kind and the web server.
func (e *env) withEntry(kind string) context.Context {
	return storedriver.WithEntry(e.ctx(), store.Entry{Session: sid, Kind: kind, Instance: instance})
}

// entries reads operationID's entries (every operation's when "") with At
// in [from, to).
func (e *env) entries(operationID string, from, to time.Time) []store.Entry {
	e.t.Helper()
	var out []store.Entry
	for en, err := range e.client(6).Entries(e.ctx(), operationID, from, to) {
		if err != nil {
			e.t.Fatalf("Entries: %v", err)
		}
		out = append(out, en)
	}
	return out
}

// wantEntries fails unless got says exactly want, in that order.
func wantEntries(t testing.TB, got []store.Entry, want ...string) {
	t.Helper()
	var what []string
	for _, en := range got {
		what = append(what, en.What)
	}
	if !slices.Equal(what, want) {
		t.Fatalf("entries %q, want %q", what, want)
	}
}

// digest is Entry.TermsDigest of canonical terms.
func digest(terms []byte) string {
	sum := sha256.Sum256(terms)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// checkEntry checks what every entry of op carries.
func checkEntry(t testing.TB, en store.Entry, o store.Owner, op store.Operation, ap store.Approval, now time.Time, session, kind string) {
	t.Helper()
	if en.ID == "" || !en.At.Equal(now) || en.Owner != o || en.Session != session || en.Kind != kind || en.Instance != instance {
		t.Errorf("%s: id %q at %v owner %+v session %q kind %q instance %q; want at %v owner %+v session %q kind %q instance %q",
			en.What, en.ID, en.At, en.Owner, en.Session, en.Kind, en.Instance, now, o, session, kind, instance)
	}
	if en.Operation.ID != op.ID || en.Operation.Revision != op.Revision || en.Operation.Summary != op.Summary ||
		!en.Operation.ExpiresAt.Equal(op.ExpiresAt) || en.Operation.Terms != nil || en.TermsDigest != digest(op.Terms) {
		t.Errorf("%s: operation %+v digest %q; want %+v without terms, digest %q", en.What, en.Operation, en.TermsDigest, op, digest(op.Terms))
	}
	if a := en.Approval; a.OperationID != op.ID || a.Revision != ap.Revision || a.Approver != ap.Approver ||
		!a.ApprovedAt.Equal(ap.ApprovedAt) || a.InputType != ap.InputType || a.Reference != ap.Reference {
		t.Errorf("%s: approval %+v, want %+v", en.What, a, ap)
	}
}

// flow issues a's operation at 0, approves it at 1s with sid, and claims
// it at 2s: the approval recorded and claimed.
func (e *env) flow(a storedriver.TakeRequest) (storedriver.TakeResult, store.Approval, *store.Claim) {
	e.t.Helper()
	is := e.issue(signedIn, a, at(0))
	if _, _, err := e.h.Store.Lookup(e.withEntry(""), signedIn, is.Ref, at(500*time.Millisecond)); err != nil {
		e.t.Fatal(err)
	}
	ap := approvalOf(is.Operation)
	ap.Reference = "apr 12:04 — \"exactly as sent\""
	rep, err := e.client(2).Record(e.withEntry(""), signedIn, is.Ref, ap, at(time.Second), storedriver.RecordOptions{})
	if err != nil || rep.Result != storedriver.Recorded {
		e.t.Fatalf("Record: %v %v", rep.Result, err)
	}
	res, err := e.client(1).Take(e.withEntry("exchange"), signedIn, tokenAction(a, storekit.NewToken()), at(2*time.Second))
	if err != nil || res.Claim == nil {
		e.t.Fatalf("Take: %+v %v", res, err)
	}
	return is, ap, res.Claim
}

var _ = add("§6 §8.1 a performed flow writes approval recorded, claimed, performed", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_1", `{"size":"M"}`)
	is, ap, c := e.flow(a)
	if err := e.client(4).Finish(e.withEntry("exchange"), *c, store.OutcomePerformed, at(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := e.entries(is.Operation.ID, at(0), at(time.Hour))
	wantEntries(t, got, storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryPerformed)
	checkEntry(t, got[0], signedIn, is.Operation, ap, at(time.Second), sid, "")
	checkEntry(t, got[1], signedIn, is.Operation, ap, at(2*time.Second), sid, "exchange")
	checkEntry(t, got[2], signedIn, is.Operation, ap, at(3*time.Second), sid, "exchange")
	ids := map[string]bool{}
	for _, en := range got {
		ids[en.ID] = true
		b, _ := json.Marshal(en)
		if strings.Contains(string(b), c.Token) {
			t.Errorf("%s carries the claim's token", en.What)
		}
	}
	if len(ids) != len(got) {
		t.Errorf("entry IDs repeat: %v", ids)
	}
	// By time and across operations: every operation's, in [from, to).
	wantEntries(t, e.entries("", at(0), at(time.Hour)), storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryPerformed)
	wantEntries(t, e.entries("", at(1500*time.Millisecond), at(3*time.Second)), storekit.EntryClaimed)
	wantEntries(t, e.entries("no-such-operation", at(0), at(time.Hour)))
	// Another operation's entries are its own.
	other := e.issue(signedIn, action(t, "other", `{}`), at(4*time.Second))
	e.approve(signedIn, other, at(5*time.Second))
	wantEntries(t, e.entries(other.Operation.ID, at(0), at(time.Hour)), storekit.EntryRecorded)
	if n := len(e.entries("", at(0), at(time.Hour))); n != 4 {
		t.Errorf("%d entries in all, want 4", n)
	}
})

var _ = add("§6 W134 a decline writes only its entry, with its reason", func(t *testing.T, e *env) {
	a := action(t, "cancel", `{"plan":"pro"}`)
	is := e.issue(signedIn, a, at(0))
	ap := approvalOf(is.Operation)
	st := e.client(2)
	rep, err := st.Record(e.withEntry(""), signedIn, is.Ref, ap, at(time.Second), storedriver.RecordOptions{CheckOnly: true})
	if err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record(CheckOnly): %v %v", rep.Result, err)
	}
	wantEntries(t, e.entries(is.Operation.ID, at(0), at(time.Hour))) // CheckOnly commits nothing
	rep, err = st.Record(e.withEntry(""), signedIn, is.Ref, ap, at(2*time.Second), storedriver.RecordOptions{Decline: "Only the account holder can cancel."})
	if err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record(Decline): %v %v", rep.Result, err)
	}
	got := e.entries(is.Operation.ID, at(0), at(time.Hour))
	wantEntries(t, got, storekit.EntryDeclined)
	checkEntry(t, got[0], signedIn, is.Operation, ap, at(2*time.Second), sid, "")
	if got[0].Reason != "Only the account holder can cancel." {
		t.Errorf("reason %q", got[0].Reason)
	}
	// W134: nothing recorded: no approval to take, and the same approval
	// records later.
	e.status(signedIn, is.Ref, at(3*time.Second), storedriver.StatusWaiting)
	e.noClaim(signedIn, a, at(3*time.Second))
	e.wantRecord(signedIn, is.Ref, ap, at(4*time.Second), storedriver.Recorded)
	wantEntries(t, e.entries(is.Operation.ID, at(0), at(time.Hour)), storekit.EntryDeclined, storekit.EntryRecorded)
})

var _ = add("§7 W98 a 4xx writes not performed", func(t *testing.T, e *env) {
	is, ap, c := e.flow(action(t, "k", `{"n":1}`))
	if err := e.client(4).Finish(e.withEntry("exchange"), *c, store.OutcomeNotPerformed, at(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := e.entries(is.Operation.ID, at(0), at(time.Hour))
	wantEntries(t, got, storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryNotPerformed)
	checkEntry(t, got[2], signedIn, is.Operation, ap, at(3*time.Second), sid, "exchange")
})

var _ = add("§7 W142 a 5xx writes outcome unknown, and Resolve who resolved it", func(t *testing.T, e *env) {
	is, ap, c := e.flow(action(t, "k", `{"n":2}`))
	st := e.client(4)
	if err := st.Finish(e.withEntry("exchange"), *c, store.OutcomeUnknown, at(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Reported again, it changes nothing and writes nothing.
	if err := st.Finish(e.withEntry("exchange"), *c, store.OutcomeUnknown, at(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx := storedriver.WithEntry(e.ctx(), store.Entry{By: "staff:alice", Instance: instance})
	if err := e.reconciler().Resolve(ctx, signedIn, is.Operation.ID, store.OutcomePerformed, at(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	got := e.entries(is.Operation.ID, at(0), at(time.Hour))
	wantEntries(t, got, storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryUnknown, storekit.EntryResolved)
	checkEntry(t, got[2], signedIn, is.Operation, ap, at(3*time.Second), sid, "exchange")
	checkEntry(t, got[3], signedIn, is.Operation, ap, at(5*time.Second), "", "")
	if got[3].By != "staff:alice" {
		t.Errorf("resolved by %q, want staff:alice", got[3].By)
	}
	// Resolved as not performed, a second flow.
	is2, _, c2 := e.flow(action(t, "k2", `{"n":3}`))
	_ = c2
	if err := e.reconciler().Resolve(ctx, signedIn, is2.Operation.ID, store.OutcomeNotPerformed, at(6*time.Second)); err != nil {
		t.Fatal(err)
	}
	wantEntries(t, e.entries(is2.Operation.ID, at(0), at(time.Hour)), storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryResolvedNotDo)
})

var _ = add("W144 a released claim writes released", func(t *testing.T, e *env) {
	a := action(t, "k", `{"n":4}`)
	is, _, c := e.flow(a)
	e.release(signedIn, c.Token, at(3*time.Second), true)
	e.release(signedIn, c.Token, at(4*time.Second), false) // nothing undone: nothing written
	wantEntries(t, e.entries(is.Operation.ID, at(0), at(time.Hour)), storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryReleased)
})

var _ = add("§6 steps that commit nothing write no entry", func(t *testing.T, e *env) {
	a := action(t, "k", `{"n":5}`)
	ctx := e.withEntry("k")
	is := e.issue(signedIn, a, at(0))
	st := e.client(2)
	try := func(what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, storedriver.ErrClaimLost) && !errors.Is(err, store.ErrNotPerforming) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := st.Take(ctx, signedIn, a, at(time.Second)) // the 403
	try("Take", err)
	_, _, err = st.Lookup(ctx, signedIn, is.Ref, at(time.Second))
	try("Lookup", err)
	ap := approvalOf(is.Operation)
	for _, bad := range []struct {
		o   store.Owner
		ref string
		ap  store.Approval
	}{
		{otherAccount, is.Ref, ap}, // check 1
		{signedIn, is.Ref, store.Approval{OperationID: is.Operation.ID, Revision: "r-none", Approver: "user"}}, // check 3
	} {
		rep, err := st.Record(ctx, bad.o, bad.ref, bad.ap, at(time.Second), storedriver.RecordOptions{Decline: "no"})
		try("Record", err)
		if rep.Result == storedriver.Recorded {
			t.Fatalf("Record of a failing approval: %v", rep.Result)
		}
	}
	once := storekit.OnceKey(signedIn.Agent, signedIn.User, "jti-1")
	if _, err := st.UseOnce(ctx, once, at(time.Hour), at(time.Second)); err != nil {
		t.Fatal(err)
	}
	rep, err := st.Record(ctx, signedIn, is.Ref, ap, at(time.Second), storedriver.RecordOptions{Once: once, OnceUntil: at(time.Hour)})
	try("Record", err)
	if rep.Result != storedriver.Replayed {
		t.Fatalf("replayed Record: %v", rep.Result)
	}
	try("Resolve", st.Resolve(ctx, signedIn, is.Operation.ID, store.OutcomePerformed, at(time.Second)))
	_, err = st.Release(ctx, signedIn, storekit.NewToken(), at(time.Second))
	try("Release", err)
	wantEntries(t, e.entries("", at(0), at(time.Hour)))

	// Recorded once; the same approval again (already recorded) writes
	// nothing more; a finish of a lost claim nothing.
	e.approve(signedIn, is, at(2*time.Second))
	e.wantRecord(signedIn, is.Ref, ap, at(3*time.Second), storedriver.AlreadyRecorded)
	c := e.claim(signedIn, a, at(4*time.Second))
	e.finish(c, store.OutcomePerformed, at(5*time.Second))
	try("Finish", st.Finish(ctx, *c, store.OutcomePerformed, at(6*time.Second)))
	try("Finish", st.Finish(ctx, *c, store.OutcomeUnknown, at(6*time.Second)))
	wantEntries(t, e.entries("", at(0), at(time.Hour)), storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryPerformed)
})

var _ = add("webkit/RULES.md Bounded work: an operation keeps at most 64 entries; declines and claims past 44 are refused", func(t *testing.T, e *env) {
	a := action(t, "k", `{"n":6}`)
	is := e.issue(signedIn, a, at(0))
	e.approve(signedIn, is, at(time.Second))
	now := 2 * time.Second
	claims := 0
	for ; claims < 100; claims++ {
		token := storekit.NewToken()
		res, err := e.client(claims).Take(e.ctx(), signedIn, tokenAction(a, token), at(now))
		if errors.Is(err, storedriver.ErrRateLimited) {
			break
		}
		if err != nil || res.Claim == nil {
			t.Fatalf("Take %d: %+v %v", claims, res, err)
		}
		e.release(signedIn, token, at(now), true)
		now += time.Second
	}
	if claims != (storekit.EntriesBeforeRefusal+1)/2 {
		t.Errorf("%d claims before the refusal, want %d", claims, (storekit.EntriesBeforeRefusal+1)/2)
	}
	rep, err := e.client(2).Record(e.ctx(), signedIn, is.Ref, approvalOf(is.Operation), at(now), storedriver.RecordOptions{Decline: "no"})
	if err != nil {
		t.Fatal(err)
	}
	// The approval is recorded already: the decline's checks answer that
	// first. A new revision's decline meets the bound.
	_ = rep
	is2 := e.issue(signedIn, action(t, "k", `{"n":7}`), at(now))
	if is2.Operation.ID != is.Operation.ID {
		t.Fatalf("new terms got operation %s, want %s (W20)", is2.Operation.ID, is.Operation.ID)
	}
	rep, err = e.client(2).Record(e.ctx(), signedIn, is2.Ref, approvalOf(is2.Operation), at(now), storedriver.RecordOptions{Decline: "no"})
	if err != nil || rep.Result != storedriver.RateLimited {
		t.Errorf("a decline past the bound: %v %v, want rate limited", rep.Result, err)
	}
	// An approval still records, and its claim's outcome is kept.
	e.approve(signedIn, is2, at(now))
	n := len(e.entries(is.Operation.ID, at(0), at(time.Hour)))
	if n != 2*claims+2 || n > storekit.MaxEntriesPerOperation {
		t.Errorf("%d entries, want %d", n, 2*claims+2)
	}
})

var _ = add("§8.1 entries are kept 24 hours after the latest, and while the operation is remembered", func(t *testing.T, e *env) {
	is, _, c := e.flow(action(t, "k", `{"n":8}`))
	e.finish(c, store.OutcomePerformed, at(3*time.Second))
	day := 24 * time.Hour
	if e.h.Advance != nil {
		e.h.Advance(day - time.Minute)
	}
	wantEntries(t, e.entries(is.Operation.ID, at(0), at(day)), storekit.EntryRecorded, storekit.EntryClaimed, storekit.EntryPerformed)
	if e.h.Advance != nil {
		e.h.Advance(30 * day)
	}
	wantEntries(t, e.entries(is.Operation.ID, at(0), at(31*day)))
	if e.h.Size != nil {
		// Nothing of the flow is left once the clock has moved on.
		e.issue(signedIn, action(t, "sweep", `{}`), at(31*day))
		if n, err := e.h.Size(e.ctx()); err == nil && n > 4 {
			t.Errorf("%d records left a month later", n)
		}
	}
})
