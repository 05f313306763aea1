package webkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opsgate/opsgate/internal/storekit"
	"strings"
	"time"

	"github.com/opsgate/opsgate/store"
)

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

// Validate reports the first member that breaks §3: operation_id and
// revision use the spec 8.2 ID characters (W22, W23), terms is a JSON object
// (W16), and expires_at is set (W15).
func (o Operation) Validate() error {
	if err := checkIDMember(o.OperationID, true); err != nil {
		return objectMemberError("operation", "operation_id", err)
	}
	if err := checkIDMember(o.Revision, true); err != nil {
		return objectMemberError("operation", "revision", err)
	}
	if len(bytes.TrimSpace(o.Terms)) == 0 {
		return objectMemberError("operation", "terms", errMemberMissing)
	}
	if _, err := storekit.CanonicalTerms(o.Terms); err != nil {
		return objectMemberError("operation", "terms", memberReason{ErrBadValue, "must be a JSON object"})
	}
	if o.ExpiresAt.IsZero() {
		return objectMemberError("operation", "expires_at", errMemberMissing)
	}
	return nil
}

// OperationFrom converts a stored revision into the protocol's Operation.
func OperationFrom(op store.Operation) Operation {
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
			return objectMemberError("approval", typeErr.Field, memberReason{ErrWrongType, "wrong JSON type"})
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

// Validate reports the first member that breaks §6: operation_id and
// revision are IDs, approver is user or agent (W78), approved_at fits an
// Integer of Unix seconds, input_type fits a String, and reference, when
// present, is an ID. Missing optional members are never an error (W82), nor
// is an input_type the kit doesn't know (W83); an input_type with agent is
// ignored (W80), never an error.
func (a Approval) Validate() error {
	if member, err := a.check(); err != nil {
		return objectMemberError("approval", member, err)
	}
	return nil
}

// check is Validate's work, shared with Header so that both name the same
// member.
func (a Approval) check() (member string, err error) {
	if err := checkIDMember(a.OperationID, true); err != nil {
		return "operation_id", err
	}
	if err := checkIDMember(a.Revision, true); err != nil {
		return "revision", err
	}
	switch a.Approver {
	case ApproverUser, ApproverAgent:
	case "":
		return "approver", errMemberMissing
	default:
		return "approver", errApproverValue
	}
	if !a.ApprovedAt.IsZero() {
		if sec := a.ApprovedAt.Unix(); sec < 0 || sec > sfMaxInteger {
			return "approved_at", errApprovedAtValue
		}
	}
	if a.Approver == ApproverUser && !sfPrintable(a.InputType) {
		return "input_type", memberReason{ErrBadValue, "must be printable ASCII"}
	}
	if err := checkIDMember(a.Reference, false); err != nil {
		return "reference", err
	}
	return "", nil
}

// Statement converts the approval into the record the store keeps (§6 W81).
// RecordedAt is left zero for the store to set. input_type is dropped with
// agent, because the Company ignores it there (W80).
func (a Approval) Statement() store.Approval {
	s := store.Approval{
		OperationID: a.OperationID,
		Revision:    a.Revision,
		Approver:    string(a.Approver),
		ApprovedAt:  a.ApprovedAt,
		Reference:   a.Reference,
	}
	if a.Approver == ApproverUser {
		s.InputType = a.InputType
	}
	return s
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
func (e Extensions) Operations() bool {
	return majorVersionIs3(e[operationsExtension])
}

func majorVersionIs3(v string) bool {
	major, _, _ := strings.Cut(v, ".")
	return major == "3"
}

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

// sfMaxInteger is the largest RFC 9651 Integer (15 digits).
const sfMaxInteger = 999_999_999_999_999

var (
	errMemberMissing   = memberReason{ErrMissingMember, "missing"}
	errApproverValue   = memberReason{ErrBadValue, `must be "user" or "agent"`}
	errApprovedAtValue = memberReason{ErrBadValue, "must be Unix seconds from 0 to 999999999999999"}
	errIDValue         = memberReason{ErrBadValue, "must be 1 to 255 characters of A-Z a-z 0-9 - _"}
	errRefValue        = memberReason{ErrBadValue, "must be 1 to 2048 characters of A-Z a-z 0-9 - _ ."}
	errSIDValue        = memberReason{ErrBadValue, "must be 1 to 255 characters of visible ASCII"}
)

// ValidSID reports whether s can be a Session's sid in Poppy-Operation: 1 to
// 255 characters of visible ASCII (the kit's choice, matching what
// webkit/identity accepts in a Session JWT, so that every Session it
// verifies can be named in an RFC 9651 String).
func ValidSID(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkIDMember checks an ID of spec 8.2 (RULES.md choice 6); "" is missing when
// required and absent otherwise.
func checkIDMember(s string, required bool) error {
	switch {
	case s == "" && required:
		return errMemberMissing
	case s == "":
		return nil
	case !storekit.ValidID(s):
		return errIDValue
	}
	return nil
}

// sfPrintable reports whether s fits an RFC 9651 String.
func sfPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// memberReason is a reason a member is wrong, worded for people, that still
// matches its sentinel with errors.Is.
type memberReason struct {
	kind error
	text string
}

func (r memberReason) Error() string { return r.text }
func (r memberReason) Unwrap() error { return r.kind }

// objectMemberError names the object and member a reason is about, outside a
// header (JSON, or a value about to be written).
func objectMemberError(object, member string, err error) error {
	return fmt.Errorf("%s: member %q: %w", object, member, err)
}
