package vocab

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

func TestOperation(t *testing.T) {
	stored := store.Operation{ID: "op_1", Revision: "r1", Summary: "S", Terms: []byte(`{"a":1}`),
		ExpiresAt: time.Unix(1791487200, 0)}
	op := Operation(stored)
	if op.OperationID != "op_1" || op.Revision != "r1" || op.Summary != "S" || string(op.Terms) != `{"a":1}` || !op.ExpiresAt.Equal(stored.ExpiresAt) {
		t.Fatalf("converted %+v", op)
	}
	stored.Terms[1] = 'X'
	if string(op.Terms) != `{"a":1}` {
		t.Fatal("Operation shares the store's terms bytes")
	}
	if err := headers.ValidateOperation(StoreOperation(op)); err != nil {
		t.Fatal(err)
	}
}

func TestStatement(t *testing.T) {
	at := time.Unix(1791487260, 0)
	t.Run("W81 keeps the statements", func(t *testing.T) {
		a := webkit.Approval{OperationID: "o", Revision: "r", Approver: webkit.ApproverUser, ApprovedAt: at, InputType: "voice", Reference: "apr_1"}
		got := Statement(a)
		want := store.Approval{OperationID: "o", Revision: "r", Approver: "user", ApprovedAt: at, InputType: "voice", Reference: "apr_1"}
		if got != want {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
		if back := Approval(got); back != a {
			t.Fatalf("back %+v\nwant %+v", back, a)
		}
	})
	t.Run("W80 input_type dropped with agent", func(t *testing.T) {
		a := webkit.Approval{OperationID: "o", Revision: "r", Approver: webkit.ApproverAgent, InputType: "tap"}
		if got := Statement(a); got.InputType != "" || got.Approver != "agent" {
			t.Fatalf("got %+v", got)
		}
	})
}
