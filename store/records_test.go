package store_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

// The records' JSON: Operation and Approval are the wire forms of §3 and §6.

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
		var op store.Operation
		if err := json.Unmarshal([]byte(specOperation), &op); err != nil {
			t.Fatal(err)
		}
		if err := headers.ValidateOperation(op); err != nil {
			t.Fatal(err)
		}
		want := time.Date(2026, 10, 8, 19, 20, 0, 0, time.UTC)
		if op.ID != "exc_5Rt2" || op.Revision != "1791487200-k3Jd9Qx2mW8v" || !op.ExpiresAt.Equal(want) {
			t.Fatalf("decoded %+v", op)
		}
		if !strings.HasPrefix(op.Summary, "Exchange the Stormline Jacket") {
			t.Fatalf("summary %q", op.Summary)
		}
	})
	t.Run("W15 encodes the spec's members and no others", func(t *testing.T) {
		op := store.Operation{ID: "exc_5Rt2", Revision: "r1", Terms: json.RawMessage(`{"a":1}`),
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
		var op store.Operation
		if err := json.Unmarshal([]byte(`{"expires_at":"8 Oct 2026"}`), &op); err == nil {
			t.Fatal("a non-RFC 3339 expires_at decoded")
		}
	})
}
