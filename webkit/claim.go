package webkit

import "github.com/opsgate/opsgate/store"

// Claim is the approved operation a handler is performing, in the same
// words as the rest of the API: the approved revision as an [Operation]
// (OperationID, Revision, Terms, Summary, ExpiresAt), the [Approval] the
// browser's request used up (§6 W96), and whom the operation belongs to.
// The handler performs exactly what Operation.Terms say (§3).
type Claim struct {
	Operation Operation
	Approval  Approval
	// Agent, User and Account are the operation's owner (§3 "Who can
	// approve it"): the Personal Agent's client_id, the pairwise User ID,
	// and the signed-in account ("" when signed out).
	Agent, User, Account string
}

// claimFrom converts the store's claim into the handler's.
func claimFrom(c store.Claim) Claim {
	a := c.Approval
	return Claim{
		Operation: operationFrom(c.Operation),
		Approval: Approval{
			OperationID: a.OperationID,
			Revision:    a.Revision,
			Approver:    Approver(a.Approver),
			ApprovedAt:  a.ApprovedAt,
			InputType:   a.InputType,
			Reference:   a.Reference,
		},
		Agent:   c.Owner.Agent,
		User:    c.Owner.User,
		Account: c.Owner.Account,
	}
}
