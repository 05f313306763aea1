package shop

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opsgate/opsgate/endpoint/mcpgate"
	"github.com/opsgate/opsgate/webkit"
)

// The shop's MCP server (Streamable HTTP at PathMCP): its exchange and its
// delivery date change as tools, gated with the same describe and handler
// as its pages and JSON API (§4, §6 "MCP"): one operation per action,
// whichever interface asks, performed at most once (§7).

// ExchangeArgs are the arguments of the exchange_item tool.
type ExchangeArgs struct {
	OrderID        string `json:"order_id" jsonschema:"the order, such as ord_7Hk2"`
	ItemID         string `json:"item_id" jsonschema:"the item of the order, such as itm_4Qa"`
	ReplacementSKU string `json:"replacement_sku" jsonschema:"the SKU to exchange it for, such as stormline-insulated-m"`
}

// RescheduleArgs are the arguments of the reschedule_delivery tool.
type RescheduleArgs struct {
	DeliveryID string `json:"delivery_id" jsonschema:"the delivery, such as del_2Wn8"`
	Date       string `json:"date" jsonschema:"the new date, YYYY-MM-DD"`
}

func (s *Server) mcpHandler() http.Handler {
	server := mcp.NewServer(&mcp.Implementation{Name: "opsgate-demo-shop", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "exchange_item", Description: "Exchange an item of an order for another size or model. Needs the User's approval of its exact terms (the Poppy operations extension)."},
		mcpgate.Tool(s.kit, func(ctx context.Context, _ *mcp.CallToolRequest, in ExchangeArgs) (webkit.Action, error) {
			return s.describeExchange(exchangeRequest(ctx, in))
		}, func(ctx context.Context, _ *mcp.CallToolRequest, in ExchangeArgs) (*mcp.CallToolResult, any, error) {
			return toolResult(s.apiExchange, exchangeRequest(ctx, in))
		}))
	mcp.AddTool(server, &mcp.Tool{Name: "reschedule_delivery", Description: "Change a delivery's date. Needs the User's approval of its exact terms (the Poppy operations extension)."},
		mcpgate.Tool(s.kit, func(ctx context.Context, _ *mcp.CallToolRequest, in RescheduleArgs) (webkit.Action, error) {
			return s.describeReschedule(rescheduleToolRequest(ctx, in))
		}, func(ctx context.Context, _ *mcp.CallToolRequest, in RescheduleArgs) (*mcp.CallToolResult, any, error) {
			return toolResult(s.reschedule, rescheduleToolRequest(ctx, in))
		}))
	return mcpgate.Handler(server, &mcp.StreamableHTTPOptions{Stateless: true})
}

// exchangeRequest is the tool call as the JSON API's request, in the
// Gate's context (its Session, and the claim while performing).
func exchangeRequest(ctx context.Context, in ExchangeArgs) *http.Request {
	body, _ := json.Marshal(map[string]string{"replacement_sku": in.ReplacementSKU})
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/orders/"+in.OrderID+"/items/"+in.ItemID+"/exchanges", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.SetPathValue("order", in.OrderID)
	r.SetPathValue("item", in.ItemID)
	return r
}

func rescheduleToolRequest(ctx context.Context, in RescheduleArgs) *http.Request {
	body, _ := json.Marshal(map[string]string{"date": in.Date})
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/api/deliveries/"+in.DeliveryID, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.SetPathValue("id", in.DeliveryID)
	return r
}

// toolResult runs the JSON API's handler for the tool call and returns its
// answer as the tool's result: its JSON in structuredContent, an error
// result for a refusal (4xx: nothing was done). A 5xx is an error of
// unknown outcome, never a failure (§7 M95).
func toolResult(h http.HandlerFunc, r *http.Request) (*mcp.CallToolResult, any, error) {
	rec := httptest.NewRecorder()
	h(rec, r)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	text := rec.Body.String()
	switch {
	case rec.Code >= 500:
		return nil, nil, errUnknownOutcome
	case rec.Code >= 400:
		msg, _ := out["message"].(string)
		if msg == "" {
			msg = text
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}, StructuredContent: out}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: out}, nil, nil
}

// errUnknownOutcome: the action's handler answered 5xx.
var errUnknownOutcome = errUnknown("the shop could not tell whether the action took effect")

type errUnknown string

func (e errUnknown) Error() string { return string(e) }
