package mcpgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/endpoint/mcpgate"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// callWithMeta is the exchange's tools/call with params._meta.
func callWithMeta(meta map[string]any) *http.Request {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call",
		"params": map[string]any{"name": "exchange_item", "arguments": exchangeArgs{OrderID: "ord_1", ItemID: "itm_4Qa", ReplacementSKU: "m"}, "_meta": meta}})
	r, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(string(b)))
	return r
}

// An input_type that a Poppy-Approval header couldn't carry (not
// printable ASCII) is no reason to refuse the approval (M59): performed
// once, never answered with the revision the approval names (M76).
func TestApprovalWithAnyInputType(t *testing.T) {
	for _, it := range []string{"tapé", "tap\n", "👍"} {
		t.Run("M59 M76 "+it, func(t *testing.T) {
			s := newShop(t, nil, nil)
			se := s.site.NewAgent().Session("usr_1")
			op := s.ask(t, se, exchangeCall("ord_1", "m"))
			res := se.Call(callWithMeta(map[string]any{"personalagentprotocol.org/approval": map[string]any{
				"operation_id": op.ID, "revision": op.Revision, "approver": "user", "input_type": it}}), nil)
			if s.performed.Load() != 1 {
				t.Errorf("performed %d, want 1: %d %s", s.performed.Load(), res.StatusCode, res.Body)
			}
			if res.Operation != nil && res.Operation.Revision == op.Revision {
				t.Errorf("M76: answered with the revision the approval names")
			}
		})
	}
}

// A tool describe doesn't gate answers as it would without the
// extension (M05): its Go error is the SDK's error result, never an HTTP
// 500 for the whole request.
func TestUngatedToolsError(t *testing.T) {
	site := webkittest.New("https://shop.example")
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "order_status"}, mcpgate.Tool(kit,
		func(context.Context, *mcp.CallToolRequest, struct{}) (webkit.Action, error) {
			return webkit.Action{}, webkit.ErrNotGated
		},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			if _, ok := webkit.SessionOf(ctx); !ok {
				return nil, nil, errors.New("no Session")
			}
			return nil, nil, errors.New("order not found")
		}))
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpgate.Handler(server, &mcp.StreamableHTTPOptions{Stateless: true}))
	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: kit, Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = m.Handler(mux)
	res := site.NewAgent().Session("usr_1").Call(call("order_status", map[string]any{}), nil)
	r := resultOf(t, res)
	if !r.IsError || len(r.Content) == 0 || !strings.Contains(r.Content[0].Text, "order not found") {
		t.Errorf("M05: the ungated tool's error: %d %s", res.StatusCode, res.Body)
	}
}

// What describe refuses a call for reaches the agent in the tool error.
func TestDescribesReasonInTheToolError(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	res := se.Call(call("exchange_item", exchangeArgs{OrderID: "ord_1"}), nil)
	r := resultOf(t, res)
	if !r.IsError || len(r.Content) == 0 || !strings.Contains(r.Content[0].Text, "replacement_sku are required") {
		t.Errorf("describe's reason: %s", res.Body)
	}
	if s.entered.Load() != 0 {
		t.Error("the tool ran")
	}
}
