// Package apigate is what the Gate on an API (package webkit) and the
// MCP adapter (endpoint/mcpgate) share: how a request that carries its
// Session on itself is verified, and the decision the kit makes for it
// (operations-v3 §4 and §6 "APIs" and "MCP", §7; RULES.md choices 7
// and 8).
//
// An API request is one that carries Poppy-Session (and, signed in, its
// access token) on itself; so is each HTTP request of an MCP session
// over Streamable HTTP. Its Session, account and declared extensions come
// from its own headers alone. The website's endpoint.Mount verifies them:
// Mount.Handler puts a Verifier in the request's context (WithVerifier),
// which the Gate and the MCP adapter ask (VerifierOf). A request that
// reaches either without one is refused, never handled as an ordinary
// request (fail closed).
//
// Once verified, Decide makes checks 1–3 of §6 on the approval the request
// itself carries, through the store, and says what to answer: the
// operation (approval required), a claim to perform once, the first
// answer again, busy, a decline, a challenge. An operation is the
// action's, whichever interface returned it, and each revision the
// interface's that returned it (storedriver.TakeRequest.Via): an approval
// of another interface's revision fails check 3 (P61, P62, M61, M62).
package apigate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// Caller is the Session a request carries on itself, as its verifier
// found it (RULES.md choices 7 and 8).
type Caller struct {
	SID, Agent, User string
	// Account is the account its access token names; "" signed out.
	Account string
	// Extensions are what its own Poppy-Extensions declares (§2), by name
	// and version.
	Extensions map[string]string
	// Via is the interface the request came through: "" an API
	// (storekit.ViaAPI), storekit.ViaMCP a tool call of an MCP server
	// (endpoint/mcpgate), whose revisions are its own (§6; M61, M62).
	Via string
}

// Owner is whose operations the Caller can approve (§3).
func (c Caller) Owner() store.Owner {
	return store.Owner{Agent: c.Agent, User: c.User, Account: c.Account}
}

// Decline is the website's decline of an approval (§6 "Declining an
// approval"): Reason for the audit entry, Body the members the answer
// carries (a *webkit.Decline).
type Decline struct {
	Reason string
	Body   any
}

// Verifier verifies the Session a request carries on itself, as
// endpoint.Mount builds it: the Session JWT (RULES.md choice 1), the
// access token (choice 2) and Poppy-Version, each request on its own, its
// JWT used once.
type Verifier interface {
	// Verify returns r's Caller. When r can't be verified it answers r
	// itself (401 invalid_session or invalid_token, 400 for its
	// Poppy-Version, 503 with Retry-After when the agent's keys can't be
	// fetched now) and returns false: a request that fails these checks
	// gets their error, and never an operation (P64, M64).
	Verify(w http.ResponseWriter, r *http.Request) (Caller, bool)
	// Decline asks the website's decline hook (endpoint.Config.Decline)
	// about an approval whose checks passed; nil accepts it (P77, M77).
	Decline(ctx context.Context, op store.Operation, a store.Approval, c Caller) *Decline
	// Explain reports whether refusals say why (Kit.ExplainRefusals).
	Explain() bool
}

type verifierKey struct{}

// WithVerifier returns ctx carrying v, for the Gate and the MCP adapter
// behind endpoint.Mount.Handler.
func WithVerifier(ctx context.Context, v Verifier) context.Context {
	return context.WithValue(ctx, verifierKey{}, v)
}

// VerifierOf returns the Verifier ctx carries; nil when the request did
// not come through endpoint.Mount.Handler.
func VerifierOf(ctx context.Context) Verifier {
	v, _ := ctx.Value(verifierKey{}).(Verifier)
	return v
}

// Do is what Decide says to do.
type Do int

const (
	// Ask: refuse, perform nothing, and return Result.Operation: 403
	// approval_required at an API (P43–P46), an error result at an MCP
	// server (M44–M49).
	Ask Do = iota + 1
	// Perform: run the action once for Result.Claim and finish it
	// (P74, M74), keeping the answer (storedriver.WithAnswer).
	Perform
	// Performed: check 2 failed, the operation has been performed: the
	// first answer again, Result.Answer, or one that says the same when
	// none was kept (§7 P90, M90).
	Performed
	// Busy: check 2 failed, the operation is being performed or its
	// outcome is not known: 503 with Retry-After, never as if it failed
	// (§7 P95, P96, M95, M96).
	Busy
	// SignIn: check 1 failed for a signed-out Session that met an
	// account's operation: the sign-in challenge (§3 P41, M42).
	SignIn
	// Declined: the checks passed and the website declined the approval:
	// Result.Decline, nothing recorded (P77–P88, M77–M88).
	Declined
	// RateLimited: a cap of the store: 429 with Retry-After, nothing done.
	RateLimited
	// Unavailable: the store failed (Result.Err): 503 with Retry-After,
	// nothing performed (fail closed).
	Unavailable
)

// Request is what Decide decides about.
type Request struct {
	// Owner is the Caller's.
	Owner store.Owner
	// Action is what the request asks for, as the store takes it: its
	// Via set (storekit.ViaAPI, ViaMCP) and its ClaimToken chosen (W144).
	Action storedriver.TakeRequest
	// Approval is the approval the request carries, as read (nil for none,
	// or one that is not an approval: P51, P52, M53).
	Approval *store.Approval
	// Decline is the website's decline hook; nil declines nothing.
	Decline func(ctx context.Context, op store.Operation, a store.Approval) *Decline
	Now     time.Time
}

// Result is Decide's answer.
type Result struct {
	Do Do
	// Operation: Ask's operation, whose revision never equals the
	// approval's (P76, M76).
	Operation store.Operation
	// Claim: Perform's.
	Claim *store.Claim
	// Answer: Performed's first answer, when it was kept; OperationID the
	// operation Performed and Busy are about ("" when not known).
	Answer      []byte
	OperationID string
	// Decline: Declined's.
	Decline *Decline
	// Err: Unavailable's and RateLimited's.
	Err error
	// Release: a Take may have claimed with the request's ClaimToken and
	// nothing is to be performed: release it (W144).
	Release bool
	// Check is the check of §6 that failed ("check1", "check2",
	// "check3") when the request carried an approval that did not pass,
	// for the Observer.
	Check string
}

// errOwnRevision is a store that answered an approval with its own
// revision (P76, M76): never answered so.
var errOwnRevision = errors.New("apigate: the store answered an approval with the revision it names")

// Decide makes checks 1–3 of §6 on the approval q carries, in that order
// (P63, P65, M63, M65), through the store, and says what to do. Without an
// approval, or with one that fails check 1 or 3, the request is handled
// as one without an approval: the operation, with a revision for what the
// request asks (P66, P75, M66, M75).
func Decide(ctx context.Context, st storedriver.Store, q Request) Result {
	res, check := Result{}, ""
	if a := q.Approval; a != nil {
		res, check = decideApproved(ctx, st, q, *a)
		if res.Do != 0 {
			return res
		}
	}
	take := q.Action
	take.Approved = ""
	t, err := st.Take(ctx, q.Owner, take, q.Now)
	switch {
	case errors.Is(err, storedriver.ErrRateLimited):
		return Result{Do: RateLimited, Err: err}
	case err != nil:
		return Result{Do: Unavailable, Err: err, Release: true}
	case t.Busy:
		// §7: the action's operation is being performed (by any
		// interface): no new operation is offered meanwhile (W145).
		return Result{Do: Busy, Check: check}
	case t.Claim != nil:
		// Never: Take claims nothing without Approved.
		return Result{Do: Unavailable, Err: errors.New("apigate: Take claimed for a request without an approval"), Release: true}
	case t.Ref == "":
		return Result{Do: Unavailable, Err: errors.New("apigate: Take returned neither claim, operation nor busy"), Release: true}
	case q.Approval != nil && t.Operation.Revision == q.Approval.Revision:
		// The approval named this revision with another operation_id:
		// never answered with the revision it names (P76, M76), so the
		// same terms get a new revision (a different expires_at, P22).
		take.ExpiresAt = t.Operation.ExpiresAt.Add(time.Second)
		t, err = st.Take(ctx, q.Owner, take, q.Now)
		if err != nil || t.Ref == "" || t.Operation.Revision == q.Approval.Revision {
			return Result{Do: Unavailable, Err: errors.Join(errOwnRevision, err), Release: err != nil}
		}
	}
	return Result{Do: Ask, Operation: t.Operation, Check: check}
}

// decideApproved is Decide for a request that carries approval a: a
// Result with Do set, or Do 0 and the check that failed when the request
// is to be handled as one without an approval.
func decideApproved(ctx context.Context, st storedriver.Store, q Request, a store.Approval) (Result, string) {
	ref := storekit.MakeRef(a.OperationID, a.Revision)
	// An approval of another interface's revision fails check 3 (P61,
	// P62, M61, M62); checks 1 and 2 still come first (P65), so the store
	// makes them, recording nothing.
	own := storekit.RevisionVia(a.Revision) == q.Action.Via
	reply, err := st.Record(ctx, q.Owner, ref, a, q.Now, storedriver.RecordOptions{CheckOnly: !own || q.Decline != nil})
	if err != nil {
		return Result{Do: Unavailable, Err: err}, ""
	}
	if own && q.Decline != nil && (reply.Result == storedriver.Recorded || reply.Result == storedriver.AlreadyRecorded) {
		// §6 "Declining": only once checks 1–3 pass (P78, M78).
		if d := q.Decline(ctx, reply.Operation, a); d != nil {
			reason := d.Reason
			if reason == "" {
				reason = "(no reason given)"
			}
			// Its audit entry, and nothing recorded (P88, M88).
			if _, err = st.Record(ctx, q.Owner, ref, a, q.Now, storedriver.RecordOptions{Decline: reason}); err != nil {
				return Result{Do: Unavailable, Err: err}, ""
			}
			// Declined, whatever the store says of the approval: one this
			// very approval left recorded before (its terms were another
			// request's, check 3) is never used by a request the site
			// declined (fail closed).
			return Result{Do: Declined, Decline: d}, ""
		} else {
			reply, err = st.Record(ctx, q.Owner, ref, a, q.Now, storedriver.RecordOptions{})
			if err != nil {
				return Result{Do: Unavailable, Err: err}, ""
			}
		}
	}
	switch reply.Result {
	case storedriver.SignInRequired: // check 1 (§3)
		return Result{Do: SignIn, Check: "check1"}, ""
	case storedriver.BeingPerformed: // check 2
		return Result{Do: Busy, OperationID: a.OperationID, Check: "check2"}, ""
	case storedriver.AlreadyPerformed: // check 2, §7
		return Result{Do: Performed, Answer: reply.Answer, OperationID: a.OperationID, Check: "check2"}, ""
	case storedriver.RateLimited:
		return Result{Do: RateLimited, Err: fmt.Errorf("%w: the operation's approvals", storedriver.ErrRateLimited)}, ""
	case storedriver.NotFound: // check 1, or an operation this store never returned
		return Result{}, "check1"
	case storedriver.Recorded, storedriver.AlreadyRecorded:
		if !own {
			return Result{}, "check3"
		}
	default: // RevisionMismatch, OperationExpired: check 3
		return Result{}, "check3"
	}
	// Checks 1–3 passed and the approval is recorded: claim it, and only
	// it, when its terms are this request's (check 3: the same action as
	// the one that returned the operation).
	take := q.Action
	take.Approved = a.Revision
	t, err := st.Take(ctx, q.Owner, take, q.Now)
	switch {
	case errors.Is(err, storedriver.ErrRateLimited):
		return Result{Do: RateLimited, Err: err}, ""
	case err != nil:
		return Result{Do: Unavailable, Err: err, Release: true}, ""
	case t.Claim != nil:
		return Result{Do: Perform, Claim: t.Claim}, ""
	case t.Busy:
		// Another request took it meanwhile (the same approval sent
		// twice at once): §7, it is being performed.
		return Result{Do: Busy, OperationID: a.OperationID, Check: "check2"}, ""
	}
	// Not claimed: the approved revision's terms are not this request's
	// (check 3: P70, M70), or a request with the same approval took and
	// performed it since: a retry then finds it performed. The operation
	// Take issued answers the first case; it never names the approval's
	// revision.
	if t.Ref == "" || t.Operation.Revision == a.Revision {
		return Result{Do: Unavailable, Err: errOwnRevision}, ""
	}
	if t.Operation.ID != a.OperationID {
		// Another operation than the approval's: the approval is another
		// action's (check 3), or its operation was performed meanwhile, by
		// a request with the same approval (§7). The store says which.
		again, err := st.Record(ctx, q.Owner, ref, a, q.Now, storedriver.RecordOptions{CheckOnly: true})
		switch {
		case err != nil:
			return Result{Do: Unavailable, Err: err}, ""
		case again.Result == storedriver.AlreadyPerformed:
			return Result{Do: Performed, Answer: again.Answer, OperationID: a.OperationID, Check: "check2"}, ""
		case again.Result == storedriver.BeingPerformed:
			return Result{Do: Busy, OperationID: a.OperationID, Check: "check2"}, ""
		}
	}
	return Result{Do: Ask, Operation: t.Operation, Check: "check3"}, ""
}
