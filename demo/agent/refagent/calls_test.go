package refagent

import (
	"context"
	"testing"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/store"
)

// approveAll is a user who approves every question.
var approveAll = DeciderFunc(func(context.Context, Question) (Decision, error) {
	return Decision{Approve: true, Approver: store.ApproverUser, InputType: "typed"}, nil
})

// The reference agent performs an exchange through the demo shop's JSON
// API and through its MCP server, each exactly once (P03, M03), without a
// browser, and the same action approved through one is refused through
// the other (P62, M62).
func TestCallThroughDemoShop(t *testing.T) {
	s, base := benchShop(t)
	a, err := New(t.Context(), Config{Shop: base, User: "usr_calls"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if d := a.Discovery(); d.APIBase != base+"/api" || d.MCP != base+"/mcp" {
		t.Fatalf("poppy.json lists api %q and mcp %q", d.APIBase, d.MCP)
	}
	db := func() string {
		o, _ := s.Sandbox(a.ClientID(), "usr_calls").Order(shopdb.DemoAccount, "ord_7Hk2")
		for _, it := range o.Items {
			if it.ID == "itm_4Qa" {
				return it.SKU
			}
		}
		return ""
	}
	apiCall := func(sku string) Call {
		return Call{Method: "POST", Path: "/api/orders/ord_7Hk2/items/itm_4Qa/exchanges", Body: map[string]string{"replacement_sku": sku}}
	}
	mcpCall := func(sku string) Call {
		return Call{Tool: "exchange_item", Args: map[string]string{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": sku}}
	}
	t.Run("P03 P49 via api: approval required, approved, performed once", func(t *testing.T) {
		out, err := a.CallThrough(t.Context(), ViaAPI, apiCall("stormline-insulated-m"), false, approveAll)
		if err != nil || out.Result != Performed || len(out.Asked) != 1 {
			t.Fatalf("%+v %v", out, err)
		}
		if got := db(); got != "stormline-insulated-m" {
			t.Fatalf("the item is %s", got)
		}
	})
	t.Run("M03 M50 via mcp: an error result with the operation, approved in _meta, performed once", func(t *testing.T) {
		out, err := a.CallThrough(t.Context(), ViaMCP, mcpCall("stormline-m"), false, approveAll)
		if err != nil || out.Result != Performed || len(out.Asked) != 1 {
			t.Fatalf("%+v %v", out, err)
		}
		if got := db(); got != "stormline-m" {
			t.Fatalf("the item is %s", got)
		}
	})
	t.Run("M62 P62 the API's approval sent to the MCP server is refused", func(t *testing.T) {
		var apiOp *store.Operation
		grab := DeciderFunc(func(_ context.Context, q Question) (Decision, error) {
			op := q.Operation
			apiOp = &op
			return Decision{}, nil // not approved: nothing sent
		})
		if _, err := a.CallThrough(t.Context(), ViaAPI, apiCall("stormline-insulated-m"), false, grab); err != nil || apiOp == nil {
			t.Fatalf("%v", err)
		}
		sess, err := a.NewSession(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		ans, err := a.sendMCP(t.Context(), sess, mcpCall("stormline-insulated-m"), &store.Approval{OperationID: apiOp.ID, Revision: apiOp.Revision, Approver: store.ApproverUser})
		if err != nil || ans.ok || ans.operation == nil || ans.operation.ID != apiOp.ID || ans.operation.Revision == apiOp.Revision {
			t.Fatalf("%+v %v", ans, err)
		}
		if got := db(); got != "stormline-m" {
			t.Fatalf("performed: the item is %s", got)
		}
	})
}
