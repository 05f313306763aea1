// Package vocab converts between the protocol's records as a website sees
// them (package webkit: Operation, Approval) and as the store keeps them
// (package store), for the kit's own code outside package webkit: the
// endpoint, webkittest and the reference agent. The header codecs
// (internal/headers) read and write the store's form.
//
// The two sets of types are twins; when they become one set (issue 23,
// point 1), this package goes.
package vocab

import (
	"bytes"
	"encoding/json"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// Operation is a stored revision as the Personal Agent receives it (§3,
// §4). Its terms are a copy: the caller may reuse the store's bytes.
func Operation(op store.Operation) webkit.Operation {
	var terms json.RawMessage
	if op.Terms != nil {
		terms = bytes.Clone(op.Terms)
	}
	return webkit.Operation{
		OperationID: op.ID,
		Revision:    op.Revision,
		Summary:     op.Summary,
		Terms:       terms,
		ExpiresAt:   op.ExpiresAt,
	}
}

// StoreOperation is o in the store's form, for headers.ValidateOperation.
func StoreOperation(o webkit.Operation) store.Operation {
	return store.Operation{ID: o.OperationID, Revision: o.Revision, Summary: o.Summary, Terms: o.Terms, ExpiresAt: o.ExpiresAt}
}

// Statement is the approval as the store records it (§6 W81). RecordedAt
// is left zero for the store to set. input_type is dropped with agent,
// because the Company ignores it there (W80).
func Statement(a webkit.Approval) store.Approval {
	s := store.Approval{
		OperationID: a.OperationID,
		Revision:    a.Revision,
		Approver:    string(a.Approver),
		ApprovedAt:  a.ApprovedAt,
		Reference:   a.Reference,
	}
	if a.Approver == webkit.ApproverUser {
		s.InputType = a.InputType
	}
	return s
}

// Approval is a statement as the website's decline hook sees it.
func Approval(s store.Approval) webkit.Approval {
	return webkit.Approval{
		OperationID: s.OperationID,
		Revision:    s.Revision,
		Approver:    webkit.Approver(s.Approver),
		ApprovedAt:  s.ApprovedAt,
		InputType:   s.InputType,
		Reference:   s.Reference,
	}
}
