package webkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/store"
)

// specOperation is the operation of §3, verbatim.
const specOperation = `{
  "operation_id": "exc_5Rt2",
  "revision": "1791487200-k3Jd9Qx2mW8v",
  "summary": "Exchange the Stormline Jacket (M) on order ord_7Hk2 for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order.",
  "terms": {
    "order_id": "ord_7Hk2",
    "item_id": "itm_4Qa",
    "replacement_sku": "stormline-insulated-m",
    "price_difference": { "amount": "70.00", "currency": "USD" }
  },
  "expires_at": "2026-10-08T12:20:00-07:00"
}`

func TestOperationJSON(t *testing.T) {
	t.Run("W15 W17 the spec's operation decodes and validates", func(t *testing.T) {
		var op Operation
		if err := json.Unmarshal([]byte(specOperation), &op); err != nil {
			t.Fatal(err)
		}
		if err := op.Validate(); err != nil {
			t.Fatal(err)
		}
		want := time.Date(2026, 10, 8, 19, 20, 0, 0, time.UTC)
		if op.OperationID != "exc_5Rt2" || op.Revision != "1791487200-k3Jd9Qx2mW8v" || !op.ExpiresAt.Equal(want) {
			t.Fatalf("decoded %+v", op)
		}
		if !strings.HasPrefix(op.Summary, "Exchange the Stormline Jacket") {
			t.Fatalf("summary %q", op.Summary)
		}
	})
	t.Run("W15 encodes the spec's members and no others", func(t *testing.T) {
		op := Operation{OperationID: "exc_5Rt2", Revision: "r1", Terms: json.RawMessage(`{"a":1}`),
			ExpiresAt: time.Date(2026, 10, 8, 19, 20, 0, 0, time.UTC)}
		b, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"operation_id":"exc_5Rt2","revision":"r1","terms":{"a":1},"expires_at":"2026-10-08T19:20:00Z"}`
		if string(b) != want {
			t.Fatalf("got  %s\nwant %s", b, want)
		}
		op.Summary = "Do it."
		b, _ = json.Marshal(op)
		if !bytes.Contains(b, []byte(`"summary":"Do it."`)) {
			t.Fatalf("summary missing: %s", b)
		}
	})
	t.Run("W17 expires_at is RFC 3339", func(t *testing.T) {
		var op Operation
		if err := json.Unmarshal([]byte(`{"expires_at":"8 Oct 2026"}`), &op); err == nil {
			t.Fatal("a non-RFC 3339 expires_at decoded")
		}
	})
}

func TestOperationValidate(t *testing.T) {
	good := Operation{OperationID: "op_1", Revision: "1791487200-abc", Terms: json.RawMessage(`{"x":1}`),
		ExpiresAt: time.Unix(1791487200, 0)}
	tests := []struct {
		name   string
		edit   func(*Operation)
		member string
		is     error
	}{
		{"valid", func(*Operation) {}, "", nil},
		{"W15 operation_id missing", func(o *Operation) { o.OperationID = "" }, "operation_id", ErrMissingMember},
		{"W22 operation_id with a dot", func(o *Operation) { o.OperationID = "op.1" }, "operation_id", ErrBadValue},
		{"W22 operation_id of 256 characters", func(o *Operation) { o.OperationID = strings.Repeat("a", 256) }, "operation_id", ErrBadValue},
		{"W15 revision missing", func(o *Operation) { o.Revision = "" }, "revision", ErrMissingMember},
		{"W23 revision with a space", func(o *Operation) { o.Revision = "r 1" }, "revision", ErrBadValue},
		{"W15 terms missing", func(o *Operation) { o.Terms = nil }, "terms", ErrMissingMember},
		{"W16 terms an array", func(o *Operation) { o.Terms = json.RawMessage(`[1]`) }, "terms", ErrBadValue},
		{"W16 terms a string", func(o *Operation) { o.Terms = json.RawMessage(`"x"`) }, "terms", ErrBadValue},
		{"W16 terms not JSON", func(o *Operation) { o.Terms = json.RawMessage(`{x}`) }, "terms", ErrBadValue},
		{"W16 terms an empty object", func(o *Operation) { o.Terms = json.RawMessage(`{}`) }, "", nil},
		{"W15 expires_at missing", func(o *Operation) { o.ExpiresAt = time.Time{} }, "expires_at", ErrMissingMember},
		{"summary optional", func(o *Operation) { o.Summary = "" }, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := good
			tt.edit(&op)
			err := op.Validate()
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

func TestOperationFrom(t *testing.T) {
	stored := store.Operation{ID: "op_1", Revision: "r1", Summary: "S", Terms: []byte(`{"a":1}`),
		ExpiresAt: time.Unix(1791487200, 0)}
	op := OperationFrom(stored)
	if op.OperationID != "op_1" || op.Revision != "r1" || op.Summary != "S" || string(op.Terms) != `{"a":1}` || !op.ExpiresAt.Equal(stored.ExpiresAt) {
		t.Fatalf("converted %+v", op)
	}
	stored.Terms[1] = 'X'
	if string(op.Terms) != `{"a":1}` {
		t.Fatal("Operation shares the store's terms bytes")
	}
	if err := op.Validate(); err != nil {
		t.Fatal(err)
	}
}

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
		var a Approval
		if err := json.Unmarshal([]byte(spec), &a); err != nil {
			t.Fatal(err)
		}
		want := Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v", Approver: ApproverUser,
			ApprovedAt: time.Unix(1791487260, 0).UTC(), InputType: "tap"}
		if a != want {
			t.Fatalf("got %+v\nwant %+v", a, want)
		}
		if err := a.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("approved_at encodes as Unix seconds", func(t *testing.T) {
		a := Approval{OperationID: "o", Revision: "r", Approver: ApproverUser,
			ApprovedAt: time.Unix(1791487260, 0), InputType: "tap", Reference: "apr_1"}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"operation_id":"o","revision":"r","approver":"user","approved_at":1791487260,"input_type":"tap","reference":"apr_1"}`
		if string(b) != want {
			t.Fatalf("got  %s\nwant %s", b, want)
		}
	})
	t.Run("W82 optional members missing are omitted", func(t *testing.T) {
		a := Approval{OperationID: "o", Revision: "r", Approver: ApproverAgent}
		b, _ := json.Marshal(a)
		if want := `{"operation_id":"o","revision":"r","approver":"agent"}`; string(b) != want {
			t.Fatalf("got  %s\nwant %s", b, want)
		}
		var back Approval
		if err := json.Unmarshal(b, &back); err != nil || back != a {
			t.Fatalf("round trip %+v, %v", back, err)
		}
	})
	t.Run("approved_at not an integer", func(t *testing.T) {
		for _, v := range []string{`"1791487260"`, `1791487260.5`, `true`} {
			var a Approval
			err := json.Unmarshal([]byte(`{"approved_at":`+v+`}`), &a)
			if !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), `"approved_at"`) {
				t.Errorf("approved_at %s: error %v", v, err)
			}
		}
	})
	t.Run("not an object", func(t *testing.T) {
		var a Approval
		if err := json.Unmarshal([]byte(`[1]`), &a); err == nil {
			t.Fatal("an array decoded")
		}
	})
}

func TestApprovalValidate(t *testing.T) {
	good := Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v", Approver: ApproverUser,
		ApprovedAt: time.Unix(1791487260, 0), InputType: "tap", Reference: "apr_01JD8ZK3Q9"}
	tests := []struct {
		name   string
		edit   func(*Approval)
		member string
		is     error
	}{
		{"valid", func(*Approval) {}, "", nil},
		{"W78 operation_id missing", func(a *Approval) { a.OperationID = "" }, "operation_id", ErrMissingMember},
		{"W78 operation_id bad", func(a *Approval) { a.OperationID = "é" }, "operation_id", ErrBadValue},
		{"W78 revision missing", func(a *Approval) { a.Revision = "" }, "revision", ErrMissingMember},
		{"W78 revision bad", func(a *Approval) { a.Revision = "a.b" }, "revision", ErrBadValue},
		{"W78 approver missing", func(a *Approval) { a.Approver = "" }, "approver", ErrMissingMember},
		{"W78 approver other", func(a *Approval) { a.Approver = "User" }, "approver", ErrBadValue},
		{"W82 optional members missing", func(a *Approval) { a.ApprovedAt, a.InputType, a.Reference = time.Time{}, "", "" }, "", nil},
		{"W83 unknown input_type", func(a *Approval) { a.InputType = "blink" }, "", nil},
		{"input_type not printable", func(a *Approval) { a.InputType = "ta\np" }, "input_type", ErrBadValue},
		{"W80 input_type with agent ignored", func(a *Approval) { a.Approver, a.InputType = ApproverAgent, "ta\np" }, "", nil},
		{"reference bad", func(a *Approval) { a.Reference = "apr 1" }, "reference", ErrBadValue},
		{"approved_at before 1970", func(a *Approval) { a.ApprovedAt = time.Unix(-1, 0) }, "approved_at", ErrBadValue},
		{"W79 approved_at long ago", func(a *Approval) { a.ApprovedAt = time.Unix(0, 0) }, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			err := a.Validate()
			if tt.is == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), `"`+tt.member+`"`) {
				t.Fatalf("error %v, want %v naming %s", err, tt.is, tt.member)
			}
			// Header refuses it the same way, as a HeaderError.
			_, herr := a.Header()
			var he *HeaderError
			if !errors.As(herr, &he) || he.Member != tt.member || !errors.Is(herr, tt.is) {
				t.Fatalf("Header error %v, want member %s", herr, tt.member)
			}
		})
	}
}

func TestApprovalStatement(t *testing.T) {
	at := time.Unix(1791487260, 0)
	t.Run("W81 keeps the statements", func(t *testing.T) {
		a := Approval{OperationID: "o", Revision: "r", Approver: ApproverUser, ApprovedAt: at, InputType: "voice", Reference: "apr_1"}
		got := a.Statement()
		want := store.Approval{OperationID: "o", Revision: "r", Approver: "user", ApprovedAt: at, InputType: "voice", Reference: "apr_1"}
		if got != want {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
	})
	t.Run("W80 input_type dropped with agent", func(t *testing.T) {
		a := Approval{OperationID: "o", Revision: "r", Approver: ApproverAgent, InputType: "tap"}
		if got := a.Statement(); got.InputType != "" || got.Approver != "agent" {
			t.Fatalf("got %+v", got)
		}
	})
}

func TestDeclineJSON(t *testing.T) {
	// §6 "Declining an approval": the members of the spec's example body.
	const spec = `{
  "operation_id": "cls_2Wq8",
  "revision": "1791487200-p9Lm3Rt6Vx1c",
  "reason": "Only the account holder can close this account.",
  "alternative": {
    "instructions": "The account holder can close the account in the Example app.",
    "references": [{ "type": "web", "url": "https://example.com/account/close" }]
  }
}`
	t.Run("W127 W129 the spec's decline round-trips", func(t *testing.T) {
		var d Decline
		if err := json.Unmarshal([]byte(spec), &d); err != nil {
			t.Fatal(err)
		}
		if d.Alternative == nil || len(d.Alternative.References) != 1 || d.Alternative.References[0].Type != "web" {
			t.Fatalf("decoded %+v", d)
		}
		got, _ := json.Marshal(d)
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(spec)); err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Fatalf("got  %s\nwant %s", got, want.String())
		}
	})
	t.Run("W127 W131 minimal decline has only the approval's IDs", func(t *testing.T) {
		got, _ := json.Marshal(Decline{OperationID: "o", Revision: "r"})
		if want := `{"operation_id":"o","revision":"r"}`; string(got) != want {
			t.Fatalf("got %s", got)
		}
	})
}

func TestExtensionsOperations(t *testing.T) {
	tests := []struct {
		name string
		ext  Extensions
		want bool
	}{
		{"W09 declares 3", Extensions{"operations": "3"}, true},
		{"W13 minor version 3.1 counts", Extensions{"operations": "3.1"}, true},
		{"W13 other major version 2", Extensions{"operations": "2"}, false},
		{"W13 other major version 4", Extensions{"operations": "4"}, false},
		{"W13 other major version 30", Extensions{"operations": "30"}, false},
		{"W13 no version", Extensions{"operations": ""}, false},
		{"W11 not declared", Extensions{"payments": "3"}, false},
		{"W11 nil", nil, false},
		{"name is case-sensitive", Extensions{"Operations": "3"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ext.Operations(); got != tt.want {
				t.Fatalf("Operations() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSession(t *testing.T) {
	signedOut := Session{ID: "ses_1", Agent: "https://agent.example/client", User: "u1"}
	if signedOut.SignedIn() {
		t.Fatal("signed-out Session reports signed in")
	}
	if got := signedOut.Owner(); got != (Owner{Agent: "https://agent.example/client", User: "u1"}) {
		t.Fatalf("Owner() = %+v", got)
	}
	signedIn := signedOut
	signedIn.Account = "acct_9"
	if !signedIn.SignedIn() || signedIn.Owner().Account != "acct_9" {
		t.Fatalf("signed-in Session %+v", signedIn.Owner())
	}
}
