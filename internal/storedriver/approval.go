package storedriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// approvalJSON is Approval on the wire: approved_at is an integer of Unix
// seconds (§6), omitted when not sent.
type approvalJSON struct {
	OperationID string         `json:"operation_id"`
	Revision    string         `json:"revision"`
	Approver    store.Approver `json:"approver"`
	ApprovedAt  *int64         `json:"approved_at,omitempty"`
	InputType   string         `json:"input_type,omitempty"`
	Reference   string         `json:"reference,omitempty"`
}

// MarshalApproval writes the approval's statements as JSON, the MCP and
// conversation form (§6): approved_at as Unix seconds, omitted when not
// sent; RecordedAt and UsedAt are not part of it.
func MarshalApproval(a store.Approval) ([]byte, error) {
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

// UnmarshalApproval reads an approval's JSON (§6): approved_at as Unix
// seconds; a member of the wrong JSON type, such as an approved_at that is
// not an integer, is an error naming it that wraps storekit.ErrWrongType.
func UnmarshalApproval(data []byte, a *store.Approval) error {
	var w approvalJSON
	if err := json.Unmarshal(data, &w); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return fmt.Errorf("approval: member %q: wrong JSON type: %w", typeErr.Field, storekit.ErrWrongType)
		}
		return fmt.Errorf("approval: %w", err)
	}
	*a = store.Approval{
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
