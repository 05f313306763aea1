package webkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

// HeaderOperation is the header of the Gate's 403 that names the
// operation's ref and the Session (§4, W57). The kit writes it, and its
// scripts read it; a website needs the name only to let its own scripts
// read it too (Access-Control-Expose-Headers). The kit reads and writes the
// other Poppy headers (Poppy-Approval, Poppy-Extensions, Poppy-Session,
// Poppy-Version) itself.
const HeaderOperation = headers.Operation

// Owner is who an operation belongs to (§3 "Who can approve it").
type Owner = store.Owner

// Operation is one revision of an operation as the Personal Agent receives
// it from endpoint (§3, §4): its JSON is exactly the spec's table.
type Operation struct {
	OperationID string          `json:"operation_id"`
	Revision    string          `json:"revision"`
	Summary     string          `json:"summary,omitempty"`
	Terms       json.RawMessage `json:"terms"`
	ExpiresAt   time.Time       `json:"expires_at"` // RFC 3339 on the wire (W17)
}

// operationFrom converts a stored revision into the protocol's Operation
// (the Claim's; the endpoint has its own copy in internal/opsendpoint).
func operationFrom(op store.Operation) Operation {
	var terms json.RawMessage
	if op.Terms != nil {
		terms = bytes.Clone(op.Terms) // the caller may reuse the store's bytes
	}
	return Operation{
		OperationID: op.ID,
		Revision:    op.Revision,
		Summary:     op.Summary,
		Terms:       terms,
		ExpiresAt:   op.ExpiresAt,
	}
}

// Approver says how an approval was given (§5, §6).
type Approver string

// The two approvers of §6. A later version may add a third (§5).
const (
	ApproverUser  Approver = "user"  // the User approved
	ApproverAgent Approver = "agent" // the Personal Agent approved on the User's instruction
)

// Approval is the Personal Agent's statement that a revision is approved
// (§6, §8.1). Its JSON is the MCP and conversation form, with approved_at in
// Unix seconds.
type Approval struct {
	OperationID string   `json:"operation_id"`
	Revision    string   `json:"revision"`
	Approver    Approver `json:"approver"`
	// ApprovedAt is when it was approved; zero when not sent (W82).
	ApprovedAt time.Time `json:"-"`
	// InputType is how the User answered; only with ApproverUser (W80).
	InputType string `json:"input_type,omitempty"`
	// Reference is the Personal Agent's own record of the approval.
	Reference string `json:"reference,omitempty"`
}

// approvalJSON is Approval on the wire: approved_at is an integer of Unix
// seconds (§6), omitted when not sent.
type approvalJSON struct {
	OperationID string   `json:"operation_id"`
	Revision    string   `json:"revision"`
	Approver    Approver `json:"approver"`
	ApprovedAt  *int64   `json:"approved_at,omitempty"`
	InputType   string   `json:"input_type,omitempty"`
	Reference   string   `json:"reference,omitempty"`
}

// MarshalJSON writes approved_at as Unix seconds (§6).
func (a Approval) MarshalJSON() ([]byte, error) {
	w := approvalJSON{
		OperationID: a.OperationID,
		Revision:    a.Revision,
		Approver:    a.Approver,
		InputType:   a.InputType,
		Reference:   a.Reference,
	}
	if !a.ApprovedAt.IsZero() {
		sec := a.ApprovedAt.Unix()
		w.ApprovedAt = &sec
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads approved_at as Unix seconds (§6); an approved_at that
// is not an integer is an error naming it.
func (a *Approval) UnmarshalJSON(data []byte) error {
	var w approvalJSON
	if err := json.Unmarshal(data, &w); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("approval: member %q: wrong JSON type: %w", typeErr.Field, headers.ErrWrongType)
		}
		return fmt.Errorf("approval: %w", err)
	}
	*a = Approval{
		OperationID: w.OperationID,
		Revision:    w.Revision,
		Approver:    w.Approver,
		InputType:   w.InputType,
		Reference:   w.Reference,
	}
	if w.ApprovedAt != nil {
		a.ApprovedAt = time.Unix(*w.ApprovedAt, 0).UTC()
	}
	return nil
}

// Decline is the answer to an approval the Company won't act on (§6
// "Declining an approval"): the approval's operation_id and revision (W127),
// and optionally a reason and an alternative. It has no reason code (W131).
type Decline struct {
	OperationID string       `json:"operation_id"`
	Revision    string       `json:"revision"`
	Reason      string       `json:"reason,omitempty"`
	Alternative *Alternative `json:"alternative,omitempty"`
}

// Alternative is another way to do the action, in the spec 9.2 shape (W129).
type Alternative struct {
	Instructions string                 `json:"instructions,omitempty"`
	References   []AlternativeReference `json:"references,omitempty"`
}

// AlternativeReference is one place to do the action instead, such as a
// "web" URL where the User can do it themselves.
type AlternativeReference struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

// Extensions are the extensions a request declares, by name, each with the
// version it declares, as in Poppy-Extensions (RULES.md choice 4). A
// declaration without a version has "".
type Extensions map[string]string

// operationsExtension is this extension's name in Poppy-Extensions and poppy.json.
const operationsExtension = "operations"

// Operations reports whether the declarations count as declaring operations
// v3 (§2): the major version must be 3, so "3" and "3.1" count, and "2", "4"
// and "" don't (W13).
func (e Extensions) Operations() bool { return headers.DeclaresOperations(e) }

// Session is the verified Poppy Session a request is handled as (§4): what
// the Session header (or the browser's join) proved.
type Session struct {
	ID         string     // sid
	Agent      string     // the Personal Agent's client_id
	User       string     // pairwise User ID
	Account    string     // signed-in account; "" when signed out
	Extensions Extensions // declared at the join (W10) or in Poppy-Extensions
}

// Owner is whose operations this Session can approve (§3): same Personal
// Agent, same User, same account (or signed out).
func (s Session) Owner() Owner {
	return Owner{Agent: s.Agent, User: s.User, Account: s.Account}
}

// SignedIn reports whether the Session is signed in to an account (§3).
func (s Session) SignedIn() bool { return s.Account != "" }
