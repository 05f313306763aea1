package redisstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
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
		ctx := storedriver.WithEntry(t.Context(), store.Entry{Session: fmt.Sprintf("ses_%022d", i), Kind: "exchange", Instance: "web-1.shop.example"})
		terms, _ := storekit.CanonicalTerms(fmt.Appendf(nil, `{"item_id":"itm_4Qa","order_id":"ord_%d","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`, i))
		a := storedriver.TakeRequest{Key: fmt.Sprint("exchange:ord_", i), Terms: terms, Lifetime: 10 * time.Minute,
			Summary: "Exchange the Stormline Jacket (M) for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order."}
		now := at(time.Duration(i) * time.Second)
		is, err := storedriver.Steps(st).Take(ctx, o, a, now)
		if err != nil || is.Ref == "" {
			t.Fatalf("Take: %+v %v", is, err)
		}
		ap := store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: store.ApproverUser, ApprovedAt: now.Truncate(time.Second), InputType: "button", Reference: "conv_8Hk2/msg_4Qa"}
		if rep, err := storedriver.Steps(st).Record(ctx, o, is.Ref, ap, now, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			t.Fatalf("Record: %+v %v", rep, err)
		}
		a.ClaimToken = storekit.NewToken()
		res, err := storedriver.Steps(st).Take(ctx, o, a, now)
		if err != nil || res.Claim == nil {
			t.Fatalf("Take: %+v %v", res, err)
		}
		if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, now); err != nil {
			t.Fatal(err)
		}
		keys, err := c.Keys(t.Context(), "mem:{*}:lg:"+is.Operation.ID).Result()
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
	// What the entries share is kept once (audit.go): about 620 bytes,
	// where one list element per entry took about 2,750.
	if per > 800 {
		t.Errorf("%.0f bytes per operation's audit log, want ≤ 800", per)
	}
}

// entryWhats is what the entries of operationID say, in order.
func entryWhats(t *testing.T, st store.Store, operationID string, now time.Time) []string {
	t.Helper()
	var w []string
	for e, err := range st.Entries(t.Context(), operationID, base.Add(-time.Hour), now.Add(time.Second)) {
		if err != nil {
			t.Fatal(err)
		}
		w = append(w, e.What)
	}
	return w
}

// §8.1, W144: a claim never marked started, undone by the next request or
// by Performing (take.lua, tidy.lua), writes its "released" entry in the
// same step: its "claimed" entry is never left without an end.
func TestUnstartedClaimUndoneIsReleased(t *testing.T) {
	t.Parallel()
	for name, open := range startModes(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			for _, by := range []string{"the next request", "Performing"} {
				h := &stepHook{lost: map[string]bool{"take": true}}
				st, other := open(t, h)
				a := action("lost-"+by, `{"v":1}`, time.Hour)
				is := takeIssued(t, other, a, at(0))
				recordOK(t, other, is, at(0))
				if _, err := storedriver.Steps(st).Take(ctx, owner, a, at(time.Second)); err == nil {
					t.Fatal("Take with its reply lost: no error")
				}
				want := []string{"approval recorded", "claimed", "released"}
				if by == "the next request" {
					if r, err := storedriver.Steps(other).Take(ctx, owner, a, at(12*time.Second)); err != nil || r.Claim == nil {
						t.Fatalf("the next request: %+v, %v", r, err)
					}
					want = append(want, "claimed")
				} else {
					performing(t, other, at(time.Hour), at(time.Hour))
				}
				if got := entryWhats(t, other, is.Operation.ID, at(time.Hour)); !slices.Equal(got, want) {
					t.Errorf("undone by %s: entries %q, want %q", by, got, want)
				}
			}
		})
	}
}
