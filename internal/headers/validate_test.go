package headers

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/store"
)

func TestOperationValidate(t *testing.T) {
	good := store.Operation{ID: "op_1", Revision: "1791487200-abc", Terms: []byte(`{"x":1}`),
		ExpiresAt: time.Unix(1791487200, 0)}
	tests := []struct {
		name   string
		edit   func(*store.Operation)
		member string
		is     error
	}{
		{"valid", func(*store.Operation) {}, "", nil},
		{"W15 operation_id missing", func(o *store.Operation) { o.ID = "" }, "operation_id", ErrMissingMember},
		{"W22 operation_id with a dot", func(o *store.Operation) { o.ID = "op.1" }, "operation_id", ErrBadValue},
		{"W22 operation_id of 256 characters", func(o *store.Operation) { o.ID = strings.Repeat("a", 256) }, "operation_id", ErrBadValue},
		{"W15 revision missing", func(o *store.Operation) { o.Revision = "" }, "revision", ErrMissingMember},
		{"W23 revision with a space", func(o *store.Operation) { o.Revision = "r 1" }, "revision", ErrBadValue},
		{"W15 terms missing", func(o *store.Operation) { o.Terms = nil }, "terms", ErrMissingMember},
		{"W16 terms an array", func(o *store.Operation) { o.Terms = []byte(`[1]`) }, "terms", ErrBadValue},
		{"W16 terms a string", func(o *store.Operation) { o.Terms = []byte(`"x"`) }, "terms", ErrBadValue},
		{"W16 terms not JSON", func(o *store.Operation) { o.Terms = []byte(`{x}`) }, "terms", ErrBadValue},
		{"W16 terms an empty object", func(o *store.Operation) { o.Terms = []byte(`{}`) }, "", nil},
		{"W15 expires_at missing", func(o *store.Operation) { o.ExpiresAt = time.Time{} }, "expires_at", ErrMissingMember},
		{"summary optional", func(o *store.Operation) { o.Summary = "" }, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := good
			tt.edit(&op)
			err := ValidateOperation(op)
			if tt.is == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, tt.is) {
				t.Fatalf("error %v, want %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), `"`+tt.member+`"`) {
				t.Fatalf("error %q does not name %s", err, tt.member)
			}
		})
	}
}

func TestApprovalValidate(t *testing.T) {
	good := store.Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v", Approver: ApproverUser,
		ApprovedAt: time.Unix(1791487260, 0), InputType: "tap", Reference: "apr_01JD8ZK3Q9"}
	tests := []struct {
		name   string
		edit   func(*store.Approval)
		member string
		is     error
	}{
		{"valid", func(*store.Approval) {}, "", nil},
		{"W78 operation_id missing", func(a *store.Approval) { a.OperationID = "" }, "operation_id", ErrMissingMember},
		{"W78 operation_id bad", func(a *store.Approval) { a.OperationID = "é" }, "operation_id", ErrBadValue},
		{"W78 revision missing", func(a *store.Approval) { a.Revision = "" }, "revision", ErrMissingMember},
		{"W78 revision bad", func(a *store.Approval) { a.Revision = "a.b" }, "revision", ErrBadValue},
		{"W78 approver missing", func(a *store.Approval) { a.Approver = "" }, "approver", ErrMissingMember},
		{"W78 approver other", func(a *store.Approval) { a.Approver = "User" }, "approver", ErrBadValue},
		{"W82 optional members missing", func(a *store.Approval) { a.ApprovedAt, a.InputType, a.Reference = time.Time{}, "", "" }, "", nil},
		{"W83 unknown input_type", func(a *store.Approval) { a.InputType = "blink" }, "", nil},
		{"input_type not printable", func(a *store.Approval) { a.InputType = "ta\np" }, "input_type", ErrBadValue},
		{"W80 input_type with agent ignored", func(a *store.Approval) { a.Approver, a.InputType = ApproverAgent, "ta\np" }, "", nil},
		{"reference bad", func(a *store.Approval) { a.Reference = "apr 1" }, "reference", ErrBadValue},
		{"approved_at before 1970", func(a *store.Approval) { a.ApprovedAt = time.Unix(-1, 0) }, "approved_at", ErrBadValue},
		{"W79 approved_at long ago", func(a *store.Approval) { a.ApprovedAt = time.Unix(0, 0) }, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			err := ValidateApproval(a)
			if tt.is == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), `"`+tt.member+`"`) {
				t.Fatalf("error %v, want %v naming %s", err, tt.is, tt.member)
			}
			// FormatApproval refuses it the same way, as an Error.
			_, herr := FormatApproval(a)
			var he *Error
			if !errors.As(herr, &he) || he.Member != tt.member || !errors.Is(herr, tt.is) {
				t.Fatalf("FormatApproval error %v, want member %s", herr, tt.member)
			}
		})
	}
}
