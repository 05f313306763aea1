package shop

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/store"
)

// toolCall is the tools/call of the shop's MCP tool with args, as an HTTP
// request of an MCP session over Streamable HTTP.
func toolCall(id int, tool string, args any) *http.Request {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args}})
	r, _ := http.NewRequest(http.MethodPost, PathMCP, strings.NewReader(string(b)))
	return r
}

// TestMCPToolsTermsAndSummaries: every outcome the shop's MCP tools offer
// today (each exchange of the seeded item, each open delivery date) has
// its own terms and revision (M28, M34), and its summary says every
// amount and date of its terms (M29). Asked through the MCP server with
// an agent's Session, as an agent asks.
func TestMCPToolsTermsAndSummaries(t *testing.T) {
	t.Parallel()
	_, site, _ := newHarnessShop(t)
	se := site.NewAgent().Session("usr_1")
	db := shopdb.New(t0)
	order, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2")
	item := order.Items[0]
	delivery, _ := db.Delivery(shopdb.DemoAccount, "del_2Wn8")
	var calls []*http.Request
	for _, to := range db.ExchangeOptions(item.SKU) {
		calls = append(calls, toolCall(len(calls)+1, "exchange_item", ExchangeArgs{OrderID: order.ID, ItemID: item.ID, ReplacementSKU: to.ID}))
	}
	exchanges := len(calls)
	for ahead := shopdb.EarliestDays; ahead <= shopdb.LatestDays; ahead++ {
		day := shopdb.Day(t0).AddDate(0, 0, ahead)
		if day.Equal(shopdb.Day(delivery.Date)) {
			continue // the day it is already on: nothing to change
		}
		calls = append(calls, toolCall(len(calls)+1, "reschedule_delivery", RescheduleArgs{DeliveryID: delivery.ID, Date: day.Format(dateLayout)}))
	}
	if exchanges < 2 || len(calls)-exchanges < 20 {
		t.Fatalf("only %d exchanges and %d dates enumerated", exchanges, len(calls)-exchanges)
	}
	ops := make([]*store.Operation, len(calls))
	for i, r := range calls {
		res := se.Call(r, nil)
		if res.Operation == nil {
			t.Fatalf("call %d: no operation: %d %s", i, res.StatusCode, res.Body)
		}
		ops[i] = res.Operation
	}
	t.Run("M29 every amount and date of the terms is in the summary", func(t *testing.T) {
		for _, op := range ops {
			if op.Summary == "" {
				t.Errorf("no summary for %s", op.Terms)
			}
			if m := missingFromSummary(op.Terms, op.Summary); len(m) > 0 {
				t.Errorf("the summary %q doesn't say %v", op.Summary, m)
			}
		}
	})
	t.Run("M28 M34 each outcome has its own terms and revision", func(t *testing.T) {
		terms, revisions := map[string]bool{}, map[string]bool{}
		for _, op := range ops {
			if terms[string(op.Terms)] || revisions[op.Revision] {
				t.Errorf("shared terms or revision: %s %s", op.Revision, op.Terms)
			}
			terms[string(op.Terms)], revisions[op.Revision] = true, true
		}
	})
	t.Run("M29 the check itself catches a summary without a date", func(t *testing.T) {
		op := ops[len(ops)-1]
		if m := missingFromSummary(op.Terms, "Move the delivery."); len(m) == 0 {
			t.Errorf("%s: nothing missing from a summary without its date", op.Terms)
		}
	})
}
