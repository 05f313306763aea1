// Package storedriver is what only an implementation of the kit's store
// needs: the steps every store makes atomically (Store: Take, Finish,
// Lookup, Record, Release, UseOnce, and the admin's Performing, Resolve
// and Entries), their requests and answers, and the context a step's
// audit entry is written with. A website and its admin use package store:
// its Store gives the kit this one (Store.Driver). The rules every
// implementation keeps are in package store's documentation; the
// conformance suite internal/storetest pins them down against the memory
// store (internal/memstore) and the Redis store (store/redisstore).
//
// The rules every store keeps: the memory store for one process, and the
// Redis store for every web server that shares a Redis, a Redis Cluster,
// or miniredis.
//
// Every state change that at-most-once depends on is one atomic step (one Lua
// script on Redis, one critical section in memory):
//
//   - [Store.Take]: find the first-recorded approval that matches the
//     browser's request and claim its operation; when none matches, issue (or
//     reuse) the operation for the request instead. One step, so the Gate's
//     403 path and its performing path each start with a single round trip.
//   - [Store.Lookup]: read an operation by its ref, with its state.
//   - [Store.Record]: make checks 1–3 of §6 and record an approval.
//   - [Store.Finish]: end a claim as performed, not performed, or unknown.
//   - [Store.UseOnce]: a single-use marker (a JWT's jti) with an expiry.
//   - [Store.Release]: undo a claim whose action never started (W144).
//
// A job or an admin page settles outcomes nobody reported with
// [Store.Performing] and [Store.Resolve]. Each of these steps that commits
// writes its audit [Entry] in the same atomic step; [Store.Entries] reads
// them (§6, §8.1).
//
// Claims are never stranded (W144): the caller chooses the claim's token
// (TakeRequest.ClaimToken) before Take, so that even when Take's reply is lost
// (a timeout, a dropped connection, a store that ran the step after the
// caller gave up) the caller can Release what Take may have claimed, and
// a Take that arrives after its Release claims nothing. A Take repeated
// with the same token returns the same claim, so a client that retries a
// lost reply never claims twice. A store may also undo, by itself, a claim
// whose Take never returned it (the Redis store: one never marked started,
// when the next request for the action or Performing comes), so that a
// Take that ran after its caller gave up strands nothing even when that
// caller is gone for good. It never undoes a claim Take returned: only its
// holder (Finish, or Release when it did not run the handler) or Resolve
// ends that one.
//
// Time always comes from the caller (an injectable clock), never from the
// server, so that every web server judges expiry the same way and tests can
// move time. Backend TTLs only collect garbage; they are always at least as
// long as the records must be kept.
//
// Rules every implementation shares (the conformance suite,
// internal/storetest, pins each of them down):
//
//   - expires_at is kept in whole seconds (UTC), as it goes out in RFC 3339,
//     and is inclusive: an approval at exactly expires_at is accepted (W18).
//   - An operation is remembered until a "remember until" instant: its
//     latest revision's expires_at while it waits, the expires_at of every
//     approved revision, now+Retention while performing (renewed when the
//     outcome is unknown), and max(approved revision's expires_at,
//     now+Retention) once performed (§7 W137, W138). Past it, the operation
//     is not found, whether or not the backend has deleted it yet.
//   - A revision that was ever approved is never reused for a new request,
//     so an operation whose approval was used up without performing gets a
//     new revision to approve (W98).
//   - An approval whose revision was used up (taken by a request that then
//     did not perform) fails check 3: Record answers RevisionMismatch with a
//     revision that can still be approved, never AlreadyRecorded, which would
//     be a 204 that records nothing usable (W90, W91, W122). Finish(NotDone)
//     therefore makes the operation's current revision a fresh one with the
//     same terms, summary and expires_at, so Lookup offers it and the next
//     request with those terms reuses it.
//   - A revision that a later one replaced (other terms) still passes check
//     3 while it has not expired: §6 lets a Company fail it (W120), and the
//     kit doesn't, so an agent can approve the terms it showed the User; the
//     approval applies only to requests with those terms (W37).
//   - A ref is "<operation_id>.<revision>". A ref whose revision
//     the operation does not keep (never returned for it, or dropped beyond
//     the cap below) is not found, like a made-up one (§4 "Any other
//     reference", W74).
//   - An operation keeps at most 32 revisions,
//     approved ones included; beyond that the oldest never-approved one is
//     dropped (there always is one: at most 16 are
//     approved). An approval beyond the 16th gets
//     RateLimited.
//   - An owner (agent and User) has at most MaxOpenPerOwner open operations
//     (waiting: not being performed, not performed, not forgotten), and an
//     agent MaxOpenPerAgent, so one agent can't grow the store without
//     bound; and every agent together at most an overall cap (MaxOpen),
//     since made-up agents cost nothing, as are the single-use markers
//     UseOnce and RecordOptions.Once keep (MaxReplayMarkers): past it,
//     UseOnce gets ErrRateLimited and Record RateLimited. The kit's stores count an operation when they store it: a
//     waiting operation is computed into its ref and stored by its first
//     approval, which gets RateLimited past a cap (429 with Retry-After
//     from the endpoint); one stored when its ref is returned (terms too
//     long for a ref, a lifetime beyond the retention) makes the request
//     that would open it get ErrRateLimited (429 with Retry-After).
//   - Take reads only the approvals that can apply to its request: those of
//     the action's operation (at most 16), so a step
//     costs the same however many approvals an owner has elsewhere
//     (webkit/RULES.md "Bounded work").
//   - While an action's operation is being performed (or its outcome is not
//     known yet), Take answers Busy to any request for the action, whatever
//     its terms: no new operation is offered for approval while the first
//     may be taking effect (W145, §7).
//   - An answer to an approval never names the approval's revision (W122):
//     in the one case where the current revision is the named one (an
//     approval that names another operation), Record issues a fresh revision
//     with the same terms, even with CheckOnly.
//
// States of an operation: waiting → approved → performing → performed, and
// performing → waiting when the action was not performed. "approved" is not
// stored: an operation is approved while it has a recorded approval that is
// neither used up nor expired.
package storedriver

import (
	"context"
	"errors"
	"iter"
	"time"

	"github.com/opsgate/opsgate/store"
)

// TakeRequest is what a request asks for, as the website describes it.
type TakeRequest struct {
	// Key says which action this is: the same key (for the same owner) is the
	// same action and keeps its operation_id (§3 W19, W35).
	Key string
	// Terms is the terms object in canonical JSON (sorted keys, no
	// insignificant space). Requests that mean the same have equal Terms
	// (§6 check 3, W118).
	Terms []byte
	// Summary is the plain-language summary; "" for none.
	Summary string
	// Lifetime is how long a new revision may be approved. A waiting
	// revision with the same terms is reused while it has at least half of
	// its lifetime left (W39).
	Lifetime time.Duration
	// ExpiresAt, when not zero, fixes the revision's expires_at instead of
	// Lifetime; a different ExpiresAt is a new revision (W25).
	ExpiresAt time.Time
	// ClaimToken is the token a claim Take makes will carry
	// (Claim.Token), chosen by the caller so that it can Release the claim
	// even when Take's reply is lost (W144). "" lets Take choose one (and
	// the claim can then only be released through its Claim). Use a
	// random one, at least 128 bits (the Gate makes one per request).
	ClaimToken string
	// Via is the interface the request came through (§4, §6): "" a
	// browser joined to a Session, storekit.ViaAPI or storekit.ViaMCP. The
	// action's operation is the same whichever interface asks (§3: its
	// operation_id is the action's, so that at most once holds across
	// them all, §7), but each revision is the interface's that returned
	// it, named so (storekit.ViaRevision), and only a request through that
	// interface claims an approval of it (§6 "Websites": no approval of a
	// website's operation at an API or MCP server, nor the reverse; P61,
	// M61). A revision Take issues through an API or MCP server is
	// stored, never computed (its ref goes to no one: the approval names
	// it), and it never replaces a website's current revision, which
	// Lookup and Record answer for a website's refs.
	Via string
	// Approved, with Via set, is the revision the approval that the
	// request itself carries names (§6 "APIs", "MCP": the repeat carries
	// the approval), recorded by Record first: Take claims that revision's
	// recorded approval and no other, when its terms are the request's
	// (check 3); "" claims nothing, so that a request without an approval
	// only ever gets the operation.
	Approved string
}

// Found is an operation as Lookup finds it.
//
// Once an operation is Performed, a store may keep only what its status
// answer and §7 need (its owner, operation_id, the names of its revisions):
// Current then may carry only ID and Revision, and Approvals may be empty.
// The approval a handler performs is in its Claim (webkit.ClaimOf); keep it
// there if the site needs an audit record. Both stores of this module do
// so, which is what bounds a retained operation's size.
type Found struct {
	Owner   store.Owner     // who it belongs to
	Current store.Operation // its current (latest issued) revision
	Status  Status
	// Expired is true when the current revision has expired and the
	// operation is neither approved, performing nor performed: its ref then
	// gets invalid_request (W75).
	Expired bool
	// Approvals are the approvals recorded for it, first recorded first,
	// including used-up ones (W81).
	Approvals []store.Approval
}

// RecordResult is what Record found, in the order of §6 "What the Company
// checks": the first failing check decides (W111).
type RecordResult string

const (
	// Recorded: checks 1–3 passed and the approval is now recorded (or, with
	// RecordOptions.CheckOnly, would be).
	Recorded RecordResult = "recorded"
	// AlreadyRecorded: this revision's approval was recorded before and is
	// still waiting for the browser's request (neither used up nor
	// expired); nothing new is recorded (§7 "one that says the same").
	AlreadyRecorded RecordResult = "already recorded"
	// NotFound: no such operation for this agent and User, or it belongs to
	// another account, or a signed-in Session met a signed-out operation
	// (check 1, W77): invalid_request.
	NotFound RecordResult = "not found"
	// SignInRequired: a signed-out Session met an account's operation (W44).
	SignInRequired RecordResult = "sign-in required"
	// BeingPerformed: check 2 failed; the operation is being performed.
	BeingPerformed RecordResult = "performing"
	// AlreadyPerformed: check 2 failed; the operation has been performed.
	AlreadyPerformed RecordResult = "performed"
	// RevisionMismatch: check 3 failed (a revision never returned for this
	// operation, an expired one, one whose approval was used up, or another
	// operation's); the answer is the operation's current revision, which
	// never equals the approval's (W122).
	RevisionMismatch RecordResult = "revision mismatch"
	// OperationExpired: check 3 failed and the operation has expired: the
	// answer is invalid_request (W101).
	OperationExpired RecordResult = "operation expired"
	// RateLimited: checks 1–3 passed but the operation already has
	// 16 approvals, or storing it would pass the owner's or the agent's
	// cap of open operations: nothing is recorded, and the
	// answer is 429 {"error":"rate_limited"} with Retry-After.
	RateLimited RecordResult = "rate limited"
	// Replayed: RecordOptions.Once was used before: the request is a
	// replay, refused before anything else (401 invalid_session), and
	// nothing is recorded.
	Replayed RecordResult = "replayed"
)

// RecordOptions change how Record works.
type RecordOptions struct {
	// Once, when not "", is a single-use key (the Session JWT's jti, made
	// with OnceKey for the same owner) that Record uses up first, in the
	// same atomic step, until OnceUntil: a key used before (by UseOnce or
	// Record) answers Replayed and records nothing. The approval request
	// then costs one round trip instead of two.
	Once      string
	OnceUntil time.Time

	// CheckOnly makes the checks and records no approval, so that the
	// website's decline hook can run after the checks pass (§6
	// "Declining"). It may still issue a fresh revision (see W122 above).
	CheckOnly bool

	// Decline, when not "", is the reason the website declines the
	// approval (§6 "Declining"): Record makes the checks as CheckOnly
	// does, records no approval, and, when they pass (Recorded), records
	// the decline as an store.Entry with this Reason. A decline beyond an
	// operation's bound of entries gets RateLimited and records nothing.
	Decline string
}

// RecordReply is Record's answer.
type RecordReply struct {
	Result RecordResult
	// Operation is the operation's current revision; set for
	// RevisionMismatch (for the 403 answer), and for Recorded and
	// AlreadyRecorded (the approved revision, for the decline hook).
	Operation store.Operation
	// Answer is, for AlreadyPerformed, what the claim that performed the
	// operation kept with it (WithAnswer): the answer an API or MCP
	// server gave the first time (§7 P90, M90); nil when none was kept.
	Answer []byte
}

// TakeResult is Take's answer: Claim is set, or Ref (with Operation), or
// Busy is true.
type TakeResult struct {
	// Claim is set when a matching approval was taken: run the action once.
	Claim *store.Claim
	// Ref and Operation are set when no approval matched: the operation
	// (reused or new) issued for this action, and the ref to return in
	// Poppy-Operation (§4, W99): at most 2048 characters of A–Z a–z 0–9
	// - _ .
	Ref       string
	Operation store.Operation
	// Busy is true when the only matching approvals belong to an operation
	// that is being performed: answer 503 with Retry-After (W145).
	Busy bool
}

// Store is the at-most-once store. Every method is one atomic step and takes
// the caller's clock reading now. A missing, expired or malformed record is
// reported as a result (not found), never as an error: errors are for the
// store itself failing (unreachable, timed out), and a gated request that
// meets one performs nothing (fail closed).
type Store interface {
	// Take looks, in one atomic step, for the first-recorded approval (W95)
	// of owner's action whose revision's terms equal action.Terms, not
	// expired, whose operation is neither performing nor performed. Found,
	// it uses the approval up (W96) and moves the operation to performing.
	// While the action's operation is being performed (or its outcome is
	// not known) it answers Busy, whatever the terms (W145). Otherwise it
	// issues the operation for the action: the current operation for the
	// action key until it is performed (W19, W20), then a new
	// operation_id (W141); its current revision while the terms are equal
	// and the revision is reusable, else a new revision (W24, W25, W36).
	Take(ctx context.Context, owner store.Owner, action TakeRequest, now time.Time) (TakeResult, error)

	// Finish ends a claim. It returns ErrClaimLost when the claim is no
	// longer the operation's (forgotten, or finished already).
	Finish(ctx context.Context, claim store.Claim, outcome store.Outcome, now time.Time) error

	// Lookup finds the operation of ref for a Session of owner.Agent and
	// owner.User. found is false for an unknown or malformed ref, one whose
	// revision the operation does not keep (W74), or one of another agent or
	// User. The caller compares Found.Owner.Account with
	// the Session's (§3).
	Lookup(ctx context.Context, owner store.Owner, ref string, now time.Time) (rec Found, found bool, err error)

	// Record makes checks 1–3 of §6 for an approval sent with ref by a
	// Session of owner, and records it when they pass, first recorded first.
	Record(ctx context.Context, owner store.Owner, ref string, approval store.Approval, now time.Time, opts RecordOptions) (RecordReply, error)

	// Release undoes the claim held by token for owner, if it was never
	// finished (not even as Unknown): the operation waits again and its
	// approval is no longer used up, so it applies to the next request
	// (W144). released reports whether a claim was undone. It is
	// idempotent, and a Take with a released token that arrives later
	// claims nothing (ErrClaimLost). Call it when the action did not
	// start: Take's reply was lost or too late, durability wasn't
	// confirmed, or the handler was never called.
	Release(ctx context.Context, owner store.Owner, token string, now time.Time) (released bool, err error)

	// UseOnce marks key as used until the given time. It reports whether
	// this was the first use; a key already marked and not expired is not.
	// The endpoint uses it for each JWT's jti (replay window).
	UseOnce(ctx context.Context, key string, until time.Time, now time.Time) (first bool, err error)

	// Performing and Resolve settle outcomes nobody reported
	// (webkit/RULES.md "Claims are never stranded"): an operation stays
	// performing when the handler's outcome was unknown (§7 W142), the web
	// server died mid-handler, or a Finish was lost. A reconciliation job
	// or an admin page lists them with Performing, finds out (from the
	// website's own records: the order, the payment) whether the action
	// took effect, and says so with Resolve.
	//
	// Performing yields every operation that has been performing since
	// before claimedBefore, in no particular order, without blocking the
	// store for long (it reads a batch at a time). It may miss or repeat
	// an operation that changes while it runs. A non-nil error ends it.
	Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error]

	// Resolve settles a performing operation, whoever holds its claim:
	// Done makes it performed and keeps that answer as Finish(Done) does
	// (§7 W137); NotDone makes it wait again with a fresh revision, as
	// Finish(NotDone) does (W98). It returns ErrNotPerforming when the
	// operation is not performing.
	Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, now time.Time) error

	// Entries yields the audit entries (store.Entry) of operationID, or of
	// every operation when it is "", whose At is from from up to, not
	// including, to; to is also the caller's now, by which entries past
	// their retention are gone. An operation's entries come in the order
	// they were written, different operations' in no particular order. It
	// reads a batch at a time, without blocking the store for long, and
	// may repeat an entry written while it runs. A non-nil error ends it.
	//
	// A step writes its store.Entry in its own atomic step (see store.Entry), with
	// what WithEntry put in its context; an operation keeps at most 64
	// entries (a decline or a claim past 44 is refused), for
	// AuditRetention after its latest (24 hours by default), and never
	// less long than the operation is remembered at that step.
	Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[store.Entry, error]
}

// ErrClaimLost is returned by Finish for a claim that is no longer the
// operation's, and by Take for a token whose claim has been finished or
// released (the caller gave up on that request: nothing is claimed for
// it).
var ErrClaimLost = errors.New("store: claim is no longer held")

// ErrRateLimited is returned (wrapped) by Take when a new stored
// operation would pass the owner's, the agent's or the overall cap of
// open operations, and by UseOnce past the overall cap of single-use
// markers: the Gate and the endpoint answer 429 with Retry-After and
// perform nothing.
var ErrRateLimited = errors.New("store: too many open operations")

// Of is the driver of s, a store.Store of the kit's own (the memory store
// or store/redisstore's); false for any other, which Kit.Check refuses.
func Of(s store.Store) (Store, bool) {
	if s == nil {
		return nil, false
	}
	d, ok := s.Driver().(Store)
	return d, ok && d != nil
}

// Steps is Of without the check, for the kit's tests: nil for a store
// that isn't the kit's.
func Steps(s store.Store) Store {
	d, _ := Of(s)
	return d
}

// AsStore is d as a store.Store whose Driver is d itself: for the kit's
// tests, whose stores that fail on purpose wrap a driver.
func AsStore(d Store) store.Store { return asStore{d} }

type asStore struct{ d Store }

func (s asStore) Driver() any { return s.d }

func (s asStore) Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[store.Stuck, error] {
	return s.d.Performing(ctx, claimedBefore, now)
}

func (s asStore) Resolve(ctx context.Context, owner store.Owner, operationID string, outcome store.Outcome, by string, now time.Time) error {
	return s.d.Resolve(WithEntry(ctx, store.Entry{By: by}), owner, operationID, outcome, now)
}

func (s asStore) Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[store.Entry, error] {
	return s.d.Entries(ctx, operationID, from, to)
}

// Status is an operation's state as §6 "Looking up an approved operation"
// names it.
type Status string

// The states of an operation.
const (
	StatusWaiting    Status = "waiting"
	StatusApproved   Status = "approved"
	StatusPerforming Status = "performing"
	StatusPerformed  Status = "performed"
)
