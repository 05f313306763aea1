package mcpgate_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
)

// TestToolOperationsAndRevisions: an operation_id names one action, and
// each set of terms its own revision (§3).
func TestToolOperationsAndRevisions(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	t.Run("M19 two different actions never share an operation_id", func(t *testing.T) {
		ids := map[string]string{}
		for _, order := range []string{"ord_1", "ord_2", "ord_3", "ord_4"} {
			for _, item := range []string{"itm_4Qa", "itm_9Zp"} {
				r := call("exchange_item", exchangeArgs{OrderID: order, ItemID: item, ReplacementSKU: "m"})
				op := s.ask(t, se, r)
				key := order + ":" + item
				if other, ok := ids[op.ID]; ok {
					t.Fatalf("%s and %s share %s", other, key, op.ID)
				}
				ids[op.ID] = key
			}
		}
	})
	t.Run("M28 M34 each argument that changes the outcome changes terms and revision", func(t *testing.T) {
		revisions := map[string]string{}
		terms := map[string]string{}
		for _, args := range []exchangeArgs{
			{"ord_5", "itm_4Qa", "m"}, {"ord_5", "itm_4Qa", "l"}, {"ord_5", "itm_4Qa", "xl"},
			{"ord_5", "itm_9Zp", "m"}, {"ord_6", "itm_4Qa", "m"}, {"ord_6", "itm_9Zp", "xl"},
		} {
			op := s.ask(t, se, call("exchange_item", args))
			var got map[string]any
			if err := json.Unmarshal(op.Terms, &got); err != nil {
				t.Fatal(err)
			}
			if got["order_id"] != args.OrderID || got["item_id"] != args.ItemID || got["replacement_sku"] != args.ReplacementSKU {
				t.Fatalf("M28 %v: terms %s", args, op.Terms)
			}
			name, _ := json.Marshal(args)
			if other, ok := revisions[op.Revision]; ok {
				t.Fatalf("M34 %s and %s share the revision %s", other, name, op.Revision)
			}
			if other, ok := terms[string(op.Terms)]; ok {
				t.Fatalf("M28 %s and %s share terms %s", other, name, op.Terms)
			}
			revisions[op.Revision], terms[string(op.Terms)] = string(name), string(name)
		}
	})
}

// TestToolApprovalWithoutOptionalMembers: an approval with only its
// required members is performed (§6, M58).
func TestToolApprovalWithoutOptionalMembers(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	op := s.ask(t, se, exchangeCall("ord_1", "m"))
	t.Run("M58 only operation_id, revision and approver: performed", func(t *testing.T) {
		res := se.Call(callWithMeta(map[string]any{"personalagentprotocol.org/approval": map[string]any{
			"operation_id": op.ID, "revision": op.Revision, "approver": "user"}}), nil)
		if tr := resultOf(t, res); tr.IsError || s.performed.Load() != 1 {
			t.Fatalf("performed %d: %s", s.performed.Load(), res.Body)
		}
	})
}

// TestToolCheckOrder: each of checks 1–3 blocks performing on its own
// (M63), and when several fail the answer is the first failing check's,
// in the order 1, 2, 3 (M65). Counted at the tool's handler.
func TestToolCheckOrder(t *testing.T) {
	s := newShop(t, nil, nil)
	agent := s.site.NewAgent()
	se := agent.Session("usr_1")
	stranger := s.site.NewAgent().Session("usr_1") // another agent: check 1 fails
	pending := s.ask(t, se, exchangeCall("ord_1", "m"))
	t.Run("M63 check 1 alone: as without an approval, not performed", func(t *testing.T) {
		res := stranger.Call(exchangeCall("ord_1", "m"), approvalOf(pending))
		if res.Operation == nil || res.Operation.ID == pending.ID || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M63 check 3 alone: a revision for what the call asks, not performed", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "l"), approvalOf(pending))
		if res.Operation == nil || res.Operation.ID != pending.ID || res.Operation.Revision == pending.Revision || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M65 checks 1 and 3: the check-1 answer", func(t *testing.T) {
		res := stranger.Call(exchangeCall("ord_1", "l"), approvalOf(pending))
		if res.Operation == nil || res.Operation.ID == pending.ID || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	// Performed: check 2 fails for its approval from now on.
	first := resultOf(t, se.Call(exchangeCall("ord_1", "m"), approvalOf(pending)))
	if first.IsError || s.performed.Load() != 1 {
		t.Fatalf("%v", first)
	}
	entered := s.entered.Load()
	t.Run("M63 check 2 alone: the first result, not performed again", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "m"), approvalOf(pending))
		if tr := resultOf(t, res); tr.IsError || string(tr.StructuredContent["exchange_id"]) != string(first.StructuredContent["exchange_id"]) || s.entered.Load() != entered {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M65 checks 1 and 2: the check-1 answer, never the first result", func(t *testing.T) {
		res := stranger.Call(exchangeCall("ord_1", "m"), approvalOf(pending))
		if res.Operation == nil || res.Operation.ID == pending.ID || strings.Contains(string(res.Body), "exc_") || s.entered.Load() != entered {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M65 checks 2 and 3: the check-2 answer", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "l"), approvalOf(pending))
		if tr := resultOf(t, res); tr.IsError || string(tr.StructuredContent["exchange_id"]) != string(first.StructuredContent["exchange_id"]) || s.entered.Load() != entered {
			t.Fatalf("%s", res.Body)
		}
	})
}

// TestToolDeclineReason: a decline's reason is the site's own, and the
// kit adds nothing to the members the spec lists (§6 M86).
func TestToolDeclineReason(t *testing.T) {
	const reason = "Only you can approve this exchange."
	var asked []endpoint.DeclineRequest
	s := newShop(t, nil, func(d endpoint.DeclineRequest) *webkit.Decline {
		asked = append(asked, d)
		return &webkit.Decline{Reason: reason}
	})
	se := s.site.NewAgent().Session("usr_1")
	op := s.ask(t, se, exchangeCall("ord_1", "m"))
	t.Run("M86 the reason is exactly the site's; nothing but the spec's members", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "m"), approvalOf(op))
		tr := resultOf(t, res)
		if !tr.IsError || len(asked) != 1 || s.entered.Load() != 0 {
			t.Fatalf("%d asked: %s", len(asked), res.Body)
		}
		if got := slices.Sorted(maps.Keys(tr.StructuredContent)); !slices.Equal(got, []string{"error", "operation_id", "reason", "revision"}) {
			t.Fatalf("members %v: %s", got, res.Body)
		}
		var got string
		if err := json.Unmarshal(tr.StructuredContent["reason"], &got); err != nil || got != reason {
			t.Fatalf("reason %q, the site gave %q", got, reason)
		}
		if len(tr.Content) != 1 || !strings.HasSuffix(tr.Content[0].Text, reason) || strings.Count(tr.Content[0].Text, ".") != 1 {
			t.Fatalf("the text adds to the reason: %q", tr.Content[0].Text)
		}
	})
}

// TestToolRememberedUntilExpiry: a retry with the approval just before the
// approved revision's expires_at gets the first result and the tool
// doesn't run again (§7 M91), with a store whose retention is shorter
// than the revision's lifetime.
func TestToolRememberedUntilExpiry(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var st store.Store = memstore.New(memstore.Config{Retention: 30 * time.Second})
			if backend == "redis" {
				st = redisstore.New(redistest.Server(t), redisstore.Options{Retention: 30 * time.Second})
			}
			clock := testclock.Real()
			s := newShopAt(t, st, nil, clock.Now)
			se := s.site.NewAgent().Session("usr_1")
			op := s.ask(t, se, exchangeCall("ord_1", "m"))
			first := resultOf(t, se.Call(exchangeCall("ord_1", "m"), approvalOf(op)))
			if first.IsError || s.entered.Load() != 1 {
				t.Fatalf("%v", first)
			}
			t.Run("M91 remembered until expires_at", func(t *testing.T) {
				clock.Add(time.Until(op.ExpiresAt) - 2*time.Second)
				res := se.Call(exchangeCall("ord_1", "m"), approvalOf(op))
				tr := resultOf(t, res)
				if tr.IsError || string(tr.StructuredContent["exchange_id"]) != string(first.StructuredContent["exchange_id"]) || s.entered.Load() != 1 {
					t.Fatalf("ran %d times: %s", s.entered.Load(), res.Body)
				}
			})
		})
	}
}
