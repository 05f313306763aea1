package memstore

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// approvalShapes are the approvals whose cost in stored bytes is compared:
// the spec's example (input_type "tap", a 14-character reference), a
// hostile one (an input_type of 7 KB, under the 8 KiB header limit, and
// a 255-character reference), and the largest the store keeps whole.
var approvalShapes = []struct {
	name                 string
	inputType, reference func(i int) string
}{
	{"ordinary", func(int) string { return "tap" }, func(i int) string { return fmt.Sprintf("apr_%010d", i) }},
	{"hostile_7KB_input_type", func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("x", 7000) }, func(i int) string { return fmt.Sprintf("apr_%010d", i) }},
	{"hostile_7KB_input_type_255_reference", func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("x", 7000) },
		func(i int) string { return fmt.Sprintf("%010d", i) + strings.Repeat("r", 245) }},
	{"largest_kept", func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("t", storekit.MaxInputType-7) },
		func(i int) string { return fmt.Sprintf("%010d", i) + strings.Repeat("r", storekit.MaxKeptReference-10) }},
}

// approveN records n approvals, each of its own operation, and performs
// them when perform is set.
func approveN(tb testing.TB, st *Store, n int, inputType, reference func(int) string, perform bool) {
	ctx := context.Background()
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	for i := range n {
		owner := store.Owner{Agent: "https://agent.example/client", User: fmt.Sprint("usr_", i%64), Account: "acct_demo"}
		a := storedriver.TakeRequest{Key: fmt.Sprint("exchange:ord_", i), Terms: []byte(`{"order_id":"ord_7Hk2","size":"M"}`), Summary: "Exchange the jacket for size M.", Lifetime: 10 * time.Minute}
		is, err := st.Take(ctx, owner, a, now)
		if err != nil || is.Ref == "" {
			tb.Fatalf("Take: %+v %v", is, err)
		}
		// Each approval's strings are its own, as a parsed header's are.
		ap := store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: store.ApproverUser, ApprovedAt: now,
			InputType: strings.Clone(inputType(i)), Reference: strings.Clone(reference(i))}
		if rep, err := st.Record(ctx, owner, is.Ref, ap, now, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			tb.Fatalf("Record: %v %v", rep.Result, err)
		}
		if !perform {
			continue
		}
		res, err := st.Take(ctx, owner, a, now)
		if err != nil || res.Claim == nil {
			tb.Fatalf("Take: %+v %v", res, err)
		}
		if err := st.Finish(ctx, *res.Claim, store.OutcomePerformed, now); err != nil {
			tb.Fatal(err)
		}
	}
}

// go test -run '^$' -bench ApprovalBytes ./store/
//
// What one agent's approval costs the memory store in retained heap:
// recorded (its operation, the approval and its audit entry, kept until
// expires_at), and performed (the performed operation and its audit log,
// approval recorded, claimed and performed, kept a day). A hostile approval costs no more than an ordinary
// one, since an input_type or reference beyond its bound is kept as
// absent (storekit.KeptMembers; webkit/RULES.md "Bounded work").
func BenchmarkApprovalBytes(b *testing.B) {
	const n = 2000
	for _, stage := range []string{"recorded", "performed"} {
		for _, shape := range approvalShapes {
			b.Run(stage+"/"+shape.name, func(b *testing.B) {
				var per float64
				for range b.N {
					before := liveHeap()
					m := New(Config{})
					approveN(b, m, n, shape.inputType, shape.reference, stage == "performed")
					per = (float64(liveHeap()) - float64(before)) / n
					runtime.KeepAlive(m)
				}
				b.ReportMetric(per, "bytes/approval")
			})
		}
	}
}
