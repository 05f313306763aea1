package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// What the audit log of one performed operation costs Redis (webkit/AUDIT.md):
// its three entries (approval recorded, claimed, performed), of the
// spec's example's size, as MEMORY USAGE counts its key.
func TestAuditBytesPerOperation(t *testing.T) {
	t.Parallel()
	c := redistest.Server(t)
	st := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone, Prefix: "mem:"})
	const n = 200
	var total int64
	for i := range n {
		o := store.Owner{Agent: "https://agent.example/clients/7", User: fmt.Sprintf("pw_%040d", i), Account: fmt.Sprint("acct-", i)}
		ctx := store.WithEntry(t.Context(), store.Entry{Session: fmt.Sprintf("ses_%022d", i), Kind: "exchange", Instance: "web-1.shop.example"})
		terms, _ := storekit.CanonicalTerms(fmt.Appendf(nil, `{"item_id":"itm_4Qa","order_id":"ord_%d","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`, i))
		a := store.TakeRequest{Key: fmt.Sprint("exchange:ord_", i), Terms: terms, Lifetime: 10 * time.Minute,
			Summary: "Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order."}
		now := at(time.Duration(i) * time.Second)
		is, err := st.Take(ctx, o, a, now)
		if err != nil || is.Ref == "" {
			t.Fatalf("Take: %+v %v", is, err)
		}
		ap := store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: store.ApproverUser, ApprovedAt: now.Truncate(time.Second), InputType: "button", Reference: "conv_8Hk2/msg_4Qa"}
		if rep, err := st.Record(ctx, o, is.Ref, ap, now, store.RecordOptions{}); err != nil || rep.Result != store.Recorded {
			t.Fatalf("Record: %+v %v", rep, err)
		}
		a.ClaimToken = storekit.NewToken()
		res, err := st.Take(ctx, o, a, now)
		if err != nil || res.Claim == nil {
			t.Fatalf("Take: %+v %v", res, err)
		}
		if err := st.Finish(ctx, *res.Claim, store.Done, now); err != nil {
			t.Fatal(err)
		}
		keys, err := c.Keys(t.Context(), "mem:{*}:log:"+is.Operation.ID).Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("log keys %v %v", keys, err)
		}
		b, err := c.MemoryUsage(t.Context(), keys[0], 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		total += b
	}
	per := float64(total) / n
	t.Logf("the audit log of a performed operation (3 entries): %.0f bytes of Redis memory", per)
	if per > 3000 {
		t.Errorf("%.0f bytes per operation's audit log, want ≤ 3,000", per)
	}
}
