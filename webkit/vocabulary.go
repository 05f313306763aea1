package webkit

import (
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
func (s Session) Owner() store.Owner {
	return store.Owner{Agent: s.Agent, User: s.User, Account: s.Account}
}

// SignedIn reports whether the Session is signed in to an account (§3).
func (s Session) SignedIn() bool { return s.Account != "" }
