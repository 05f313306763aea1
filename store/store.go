// Package store holds the records of a website's operations (§3, §6):
// Operation, Approval, the Claim a handler performs, each step's audit
// Entry, and Store, which keeps them so that each operation is performed
// at most once across every web server that shares it (§7).
//
// A Kit keeps them in memory by default, right for one process; every
// instance of a website behind a load balancer shares the Redis store of
// package store/redisstore instead. A website and its admin use three of
// Store's methods: Performing and Resolve settle outcomes nobody reported,
// and Entries reads the audit entries (package store/audit pushes them to
// a database of the website's own). The steps the kit itself makes (take
// or issue, record, look up, finish, release) are the kit's: no website
// calls them.
//
// What every store promises: each state change that at-most-once depends
// on is one atomic step (one Lua script on Redis, one critical section in
// memory), which writes its audit entry in the same step; time comes from
// the caller's clock, never the server's, so every web server judges
// expiry the same way; a claim whose handler never ran is undone, never
// stranded (W144); a performed operation is remembered at least until its
// approved revision's expires_at and 24 hours (§7 W137); approvals,
// revisions and open operations are capped, so that no agent grows a store
// without bound.
//
// States of an operation: waiting → approved → performing → performed, and
// performing → waiting when the action was not performed. "approved" is not
// stored: an operation is approved while it has a recorded approval that is
// neither used up nor expired.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"time"
)

// Owner is who an operation belongs to (§3 "Who can approve it"): the
// Personal Agent, the pairwise User ID, and the account the Session was
// signed in to ("" when signed out). A Session can approve an operation when
// all three match.
type Owner struct {
	Agent   string // the Personal Agent's client_id
	User    string // the pairwise User ID
	Account string // the signed-in account; "" when signed out
}

// Operation is one revision of an operation (§3): what the endpoint
// returns to the Personal Agent, what a Claim performs, and what the store
// keeps. Its JSON is exactly the spec's table (§3, §4), with expires_at in
// RFC 3339 (W17).
type Operation struct {
	ID       string `json:"operation_id"`
	Revision string `json:"revision"`
	// Summary is the terms in plain language; "" for none (W28).
	Summary string `json:"summary,omitempty"`
	// Terms is the terms object in canonical JSON (sorted keys, no
	// insignificant space, W118).
	Terms json.RawMessage `json:"terms"`
	// ExpiresAt is the last instant an approval is accepted, in whole
	// seconds (W18).
	ExpiresAt time.Time `json:"expires_at"`
}

// Approver says how an approval was given (§5, §6).
type Approver string

// The two approvers of §6. A later version may add a third (§5).
const (
	ApproverUser  Approver = "user"  // the User approved
	ApproverAgent Approver = "agent" // the Personal Agent approved on the User's instruction
)

// Approval is the Personal Agent's statement that a revision is approved
// (§6, §8.1), as the Poppy-Approval header carries it, and, once the store
// has recorded it, when it was recorded and used up. Its JSON is the MCP
// and conversation form: approved_at in Unix seconds, omitted when not
// sent; RecordedAt and UsedAt are not part of it.
type Approval struct {
	OperationID string
	Revision    string
	Approver    Approver
	// ApprovedAt is when it was approved; zero when not sent (W82).
	ApprovedAt time.Time
	// InputType is how the User answered; only with ApproverUser (W80).
	InputType string
	// Reference is the Personal Agent's own record of the approval.
	Reference string
	// RecordedAt is when the store recorded it; zero before.
	RecordedAt time.Time
	// UsedAt is when a browser request used it up; zero while it waits.
	UsedAt time.Time
}

// Claim is an operation taken for performing: the browser's request used up
// an approval and the operation is now performing. Finish ends it. A
// handler gets it from webkit.ClaimOf and performs exactly what
// Operation.Terms say (§3).
type Claim struct {
	// Owner is whom the operation belongs to (§3 "Who can approve it"):
	// Agent, User and Account.
	Owner
	Operation Operation // the approved revision
	Approval  Approval  // the approval the browser's request used up (W96)
	// Token identifies this claim, so that only its holder finishes it.
	Token string
}

// Outcome is how a claimed operation ended (§7).
type Outcome int

const (
	// OutcomePerformed: the action took effect; the operation is
	// performed.
	OutcomePerformed Outcome = iota + 1
	// OutcomeNotPerformed: the action did not take effect; the operation
	// goes back to waiting and its approval stays used up (W98). When the
	// used-up revision was the current one, a fresh revision with the same
	// terms and expires_at becomes current, so there is one to approve
	// (W90).
	OutcomeNotPerformed
	// OutcomeUnknown: the website does not know whether it took effect;
	// the operation stays performing and is never reported as failed
	// (W142).
	OutcomeUnknown
)

func (o Outcome) String() string {
	switch o {
	case OutcomePerformed:
		return "performed"
	case OutcomeNotPerformed:
		return "not performed"
	case OutcomeUnknown:
		return "unknown"
	}
	return "invalid outcome"
}

// Store keeps a website's operations and approvals, and their audit
// entries, so that each operation is performed at most once across every
// web server that shares it (§7). A Kit uses an in-memory one, right for
// one process, unless the website sets store/redisstore's, which every
// instance of a website behind a load balancer shares.
//
// A website and its admin use three of its methods. Performing and
// Resolve settle outcomes nobody reported (webkit/RULES.md "Claims are
// never stranded"): an operation stays performing when the handler's
// outcome was unknown (§7 W142), the web server died mid-handler, or a
// finish was lost. A reconciliation job or an admin page lists them with
// Performing, finds out (from the website's own records: the order, the
// payment) whether the action took effect, and says so with Resolve.
// Entries reads the audit entries (§6, §8.1); package store/audit pushes
// them to a database of the website's own.
//
// Only the kit's stores implement it: Driver gives the kit the atomic
// steps the Gate and the endpoint make, which no website calls.
type Store interface {
	// Performing yields every operation that has been performing since
	// before claimedBefore, in no particular order, without blocking the
	// store for long (it reads a batch at a time). It may miss or repeat
	// an operation that changes while it runs. A non-nil error ends it.
	Performing(ctx context.Context, claimedBefore, now time.Time) iter.Seq2[Stuck, error]

	// Resolve settles a performing operation, whoever holds its claim:
	// OutcomePerformed makes it performed and keeps that answer as a
	// performed claim does (§7 W137); OutcomeNotPerformed makes it wait
	// again with a fresh revision (W98). by names whoever settles it
	// ("staff:alice"), in its audit entry. It returns ErrNotPerforming
	// when the operation is not performing.
	Resolve(ctx context.Context, owner Owner, operationID string, outcome Outcome, by string, now time.Time) error

	// Entries yields the audit entries of operationID, or of every
	// operation when it is "", whose At is from from up to, not
	// including, to; to is also the caller's now, by which entries past
	// their retention are gone. An operation's entries come in the order
	// they were written, different operations' in no particular order. It
	// reads a batch at a time, without blocking the store for long, and
	// may repeat an entry written while it runs. A non-nil error ends it.
	//
	// An operation keeps at most 64 entries (a decline or a claim past 44
	// is refused), for the store's audit retention after its latest (24
	// hours by default), and never less long than the operation is
	// remembered at that step.
	Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[Entry, error]

	// Driver is the store's atomic steps, for the kit (the Gate and the
	// endpoint take, record, look up and finish through it), as a value
	// of the kit's own internal type; a website never calls it.
	Driver() any
}

// ErrNotPerforming is returned by Resolve for an operation that is not
// performing (unknown, forgotten, or settled already).
var ErrNotPerforming = errors.New("store: operation is not performing")

// Stuck is an operation Performing found: its claim (whose owner, claimed
// revision and used-up approval; Token is empty, as only Resolve settles
// it) and when it was claimed.
type Stuck struct {
	Claim
	ClaimedAt time.Time
	// Unknown is true when the handler finished with an unknown outcome
	// (OutcomeUnknown); false when nothing was reported at all.
	Unknown bool
}
