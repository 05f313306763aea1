package webkit

import (
	"github.com/opsgate/opsgate/store"
)

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

// Session is the verified Poppy Session a request is handled as (§4): what
// the Session header (or the browser's join) proved.
type Session struct {
	ID      string // sid
	Agent   string // the Personal Agent's client_id
	User    string // pairwise User ID
	Account string // signed-in account; "" when signed out
	// Extensions are the extensions the Session declares, by name, each
	// with its version ("" for none), as in Poppy-Extensions (RULES.md
	// choice 4): at the join (W10) or in the header. Operations v3 counts
	// with major version 3: "3" and "3.1", not "2", "4" or "" (§2 W13).
	Extensions map[string]string
}

// Owner is whose operations this Session can approve (§3): same Personal
// Agent, same User, same account (or signed out).
func (s Session) Owner() store.Owner {
	return store.Owner{Agent: s.Agent, User: s.User, Account: s.Account}
}
