package storedriver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

func TestApprovalJSON(t *testing.T) {
	// §6 "MCP" and "Conversations": the approval object, verbatim.
	const spec = `{
        "operation_id": "exc_5Rt2",
        "revision": "1791487200-k3Jd9Qx2mW8v",
        "approver": "user",
        "approved_at": 1791487260,
        "input_type": "tap"
      }`
	t.Run("the spec's approval object decodes", func(t *testing.T) {
		var a store.Approval
		if err := UnmarshalApproval([]byte(spec), &a); err != nil {
			t.Fatal(err)
		}
		want := store.Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v", Approver: store.ApproverUser,
			ApprovedAt: time.Unix(1791487260, 0).UTC(), InputType: "tap"}
		if a != want {
			t.Fatalf("got %+v\nwant %+v", a, want)
		}
		if err := headers.ValidateApproval(a); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("approved_at encodes as Unix seconds", func(t *testing.T) {
		a := store.Approval{OperationID: "o", Revision: "r", Approver: store.ApproverUser,
			ApprovedAt: time.Unix(1791487260, 0), InputType: "tap", Reference: "apr_1"}
		b, err := MarshalApproval(a)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"operation_id":"o","revision":"r","approver":"user","approved_at":1791487260,"input_type":"tap","reference":"apr_1"}`
		if string(b) != want {
			t.Fatalf("got  %s\nwant %s", b, want)
		}
	})
	t.Run("W82 optional members missing are omitted", func(t *testing.T) {
		a := store.Approval{OperationID: "o", Revision: "r", Approver: store.ApproverAgent}
		b, _ := MarshalApproval(a)
		if want := `{"operation_id":"o","revision":"r","approver":"agent"}`; string(b) != want {
			t.Fatalf("got  %s\nwant %s", b, want)
		}
		var back store.Approval
		if err := UnmarshalApproval(b, &back); err != nil || back != a {
			t.Fatalf("round trip %+v, %v", back, err)
		}
	})
	t.Run("approved_at not an integer", func(t *testing.T) {
		for _, v := range []string{`"1791487260"`, `1791487260.5`, `true`} {
			var a store.Approval
			err := UnmarshalApproval([]byte(`{"approved_at":`+v+`}`), &a)
			if !errors.Is(err, headers.ErrWrongType) || !strings.Contains(err.Error(), `"approved_at"`) {
				t.Errorf("approved_at %s: error %v", v, err)
			}
		}
	})
	t.Run("not an object", func(t *testing.T) {
		var a store.Approval
		if err := UnmarshalApproval([]byte(`[1]`), &a); err == nil {
			t.Fatal("an array decoded")
		}
	})
}
