package mcpgate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/endpoint/mcpgate"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// shop offers its exchange as an MCP tool (exchange_item), on its JSON
// API (POST /api/orders/{order}/exchanges) and on its pages, with one
// Kit, one store and one action key (§3: one operation per action).
// Each performance is counted at the handler.
type shop struct {
	site *webkittest.Site
	kit  *webkit.Kit

	performed atomic.Int64
	entered   atomic.Int64
	block     atomic.Pointer[chan struct{}]
	fail      atomic.Int64 // 1: the tool's own error result; 2: a Go error
	decline   func(endpoint.DeclineRequest) *webkit.Decline
}

type exchangeArgs struct {
	OrderID        string `json:"order_id"`
	ItemID         string `json:"item_id"`
	ReplacementSKU string `json:"replacement_sku"`
}

func action(order, item, sku string) webkit.Action {
	return webkit.Action{
		Key:     "exchange:" + order + ":" + item,
		Terms:   map[string]any{"order_id": order, "item_id": item, "replacement_sku": sku, "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}},
		Summary: "Exchange item " + item + " on order " + order + " for " + sku + ", for $70.00 more.",
		Kind:    "exchange",
	}
}

func newShop(t *testing.T, st store.Store, decline func(endpoint.DeclineRequest) *webkit.Decline) *shop {
	t.Helper()
	return newShopAt(t, st, decline, nil)
}

// newShopAt is newShop with clock the time of its Kit and its agents
// (nil: the real time).
func newShopAt(t *testing.T, st store.Store, decline func(endpoint.DeclineRequest) *webkit.Decline, clock func() time.Time) *shop {
	t.Helper()
	s := &shop{site: webkittest.New("https://shop.example"), decline: decline}
	s.site.Clock = clock
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Clock = clock
	if st != nil {
		kit.Store = st
	}
	s.kit = kit

	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	describe := func(ctx context.Context, _ *mcp.CallToolRequest, in exchangeArgs) (webkit.Action, error) {
		if _, ok := webkit.SessionOf(ctx); !ok {
			return webkit.Action{}, errors.New("no verified Session")
		}
		if in.OrderID == "" || in.ItemID == "" || in.ReplacementSKU == "" {
			return webkit.Action{}, errors.New("order_id, item_id and replacement_sku are required")
		}
		return action(in.OrderID, in.ItemID, in.ReplacementSKU), nil
	}
	exchange := func(_ context.Context, _ *mcp.CallToolRequest, in exchangeArgs) (*mcp.CallToolResult, any, error) {
		s.entered.Add(1)
		if c := s.block.Load(); c != nil {
			<-*c
		}
		switch s.fail.Load() {
		case 1:
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "that size is sold out"}}}, nil, nil
		case 2:
			return nil, nil, errors.New("the warehouse timed out")
		}
		n := s.performed.Add(1)
		return nil, map[string]string{"exchange_id": fmt.Sprint("exc_", n), "order_id": in.OrderID}, nil
	}
	mcp.AddTool(server, &mcp.Tool{Name: "exchange_item", Description: "Exchange an item of an order"}, mcpgate.Tool(kit, describe, exchange))
	mcp.AddTool(server, &mcp.Tool{Name: "order_status"}, mcpgate.Tool(kit,
		func(context.Context, *mcp.CallToolRequest, struct{}) (webkit.Action, error) {
			return webkit.Action{}, webkit.ErrNotGated
		},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "shipped"}}}, nil, nil
		}))

	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpgate.Handler(server, &mcp.StreamableHTTPOptions{Stateless: true}))
	mux.Handle("POST /api/orders/{order}/exchanges", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		var in exchangeArgs
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			return webkit.Action{}, err
		}
		return action(r.PathValue("order"), in.ItemID, in.ReplacementSKU), nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.performed.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"exchange_id":"exc_%d"}`, n)
	})))
	// The website's form for the same action.
	mux.Handle("POST /orders/{order}/items/{item}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return action(r.PathValue("order"), r.PathValue("item"), r.FormValue("replacement_sku")), nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.performed.Add(1)
		w.WriteHeader(http.StatusCreated)
	})))
	cfg := endpoint.Config{Origin: s.site.Origin, Kit: kit, Resolver: s.site.Resolver(), AccessTokens: s.site.AccessTokens()}
	if decline != nil {
		cfg.Decline = func(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline { return decline(d) }
	}
	m, err := endpoint.NewMount(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.site.Handler = m.Handler(mux)
	return s
}

var rpcID atomic.Int64

// call is the tools/call of tool with args, as an HTTP request of an MCP
// session over Streamable HTTP.
func call(tool string, args any) *http.Request {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": "tools/call",
		"params": map[string]any{"name": tool, "arguments": args}})
	r, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(string(b)))
	return r
}

func exchangeCall(order, sku string) *http.Request {
	return call("exchange_item", exchangeArgs{OrderID: order, ItemID: "itm_4Qa", ReplacementSKU: sku})
}

// toolResult is the JSON-RPC answer's tool result.
type toolResult struct {
	IsError bool `json:"isError"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]json.RawMessage `json:"structuredContent"`
}

func resultOf(t *testing.T, res *webkittest.Response) toolResult {
	t.Helper()
	var v struct {
		Result *toolResult     `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if res.Err != nil || res.StatusCode != http.StatusOK || json.Unmarshal(res.Body, &v) != nil || v.Result == nil {
		t.Fatalf("not a tool result: %d %v %s", res.StatusCode, res.Err, res.Body)
	}
	return *v.Result
}

func approvalOf(op *store.Operation) *store.Approval {
	return &store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverUser, ApprovedAt: time.Now().Add(-time.Minute), InputType: "tap"}
}

// ask calls the exchange without an approval and requires the operation.
func (s *shop) ask(t *testing.T, se *webkittest.Session, r *http.Request) *store.Operation {
	t.Helper()
	before := s.entered.Load()
	res := se.Call(r, nil)
	if res.Operation == nil {
		t.Fatalf("no operation: %d %s", res.StatusCode, res.Body)
	}
	if s.entered.Load() != before {
		t.Fatal("M31: the tool's handler ran before an approval came")
	}
	return res.Operation
}

func TestToolExchange(t *testing.T) {
	s := newShop(t, nil, nil)
	agent := s.site.NewAgent()
	se := agent.Session("usr_1")
	var op *store.Operation
	t.Run("M44 M45 M46 M47 M49 M13 the call is refused with an error result carrying the operation", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "m"), nil)
		r := resultOf(t, res)
		if !r.IsError || len(r.Content) == 0 || r.Content[0].Type != "text" || !strings.Contains(r.Content[0].Text, "needs approval") {
			t.Fatalf("%s", res.Body)
		}
		if res.Header.Get("WWW-Authenticate") != "" {
			t.Error("M49: WWW-Authenticate on the approval request")
		}
		if res.Operation == nil || res.Operation.ID == "" || res.Operation.Revision == "" || res.Operation.ExpiresAt.IsZero() || len(res.Operation.Terms) == 0 {
			t.Fatalf("M13: %s", res.Body)
		}
		if s.entered.Load() != 0 {
			t.Fatal("M31: performed before an approval")
		}
		op = res.Operation
	})
	var first []byte
	t.Run("M03 M04 M50 M74 the same call with the approval in _meta is performed, with the tool's result", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "m"), approvalOf(op))
		r := resultOf(t, res)
		if r.IsError || s.performed.Load() != 1 || !strings.Contains(string(r.StructuredContent["exchange_id"]), "exc_1") {
			t.Fatalf("%s", res.Body)
		}
		first = r.StructuredContent["exchange_id"]
	})
	t.Run("M60 M89 M90 retries with other JSON-RPC ids get the first result, and perform nothing", func(t *testing.T) {
		for range 3 {
			res := se.Call(exchangeCall("ord_1", "m"), approvalOf(op))
			r := resultOf(t, res)
			if r.IsError || string(r.StructuredContent["exchange_id"]) != string(first) {
				t.Fatalf("%s", res.Body)
			}
		}
		if n := s.performed.Load(); n != 1 {
			t.Fatalf("performed %d times", n)
		}
	})
	t.Run("M97 once performed, the call without an approval gets a new operation", func(t *testing.T) {
		again := s.ask(t, se, exchangeCall("ord_1", "m"))
		if again.ID == op.ID {
			t.Fatalf("the performed operation_id again: %s", again.ID)
		}
	})
	t.Run("M38 M51 another Session of the same agent and User approves it", func(t *testing.T) {
		op := s.ask(t, se, exchangeCall("ord_2", "m"))
		other := agent.Session("usr_1")
		if r := resultOf(t, other.Call(exchangeCall("ord_2", "m"), approvalOf(op))); r.IsError || s.performed.Load() != 2 {
			t.Fatalf("%v", r)
		}
	})
	t.Run("M05 an ungated tool answers as usual", func(t *testing.T) {
		r := resultOf(t, se.Call(call("order_status", map[string]any{}), nil))
		if r.IsError || len(r.Content) == 0 || r.Content[0].Text != "shipped" {
			t.Fatalf("%v", r)
		}
	})
}

func TestToolRetryWhilePerforming(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	op := s.ask(t, se, exchangeCall("ord_1", "m"))
	release := make(chan struct{})
	s.block.Store(&release)
	done := make(chan *webkittest.Response, 1)
	go func() { done <- se.Call(exchangeCall("ord_1", "m"), approvalOf(op)) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.entered.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first call never reached the tool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Run("M67 M92 M96 a retry while performing gets HTTP 503 with Retry-After and no tool result", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "m"), approvalOf(op))
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || strings.Contains(string(res.Body), `"result"`) {
			t.Fatalf("%d %v %s", res.StatusCode, res.Header, res.Body)
		}
	})
	s.block.Store(nil)
	close(release)
	if r := resultOf(t, <-done); r.IsError {
		t.Fatalf("the first: %v", r)
	}
	if n := s.performed.Load(); n != 1 {
		t.Fatalf("performed %d times", n)
	}
}

func TestToolOutcomes(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	t.Run("M90 the tool's own error result took no effect: a retry is checked again", func(t *testing.T) {
		op := s.ask(t, se, exchangeCall("ord_1", "m"))
		s.fail.Store(1)
		if r := resultOf(t, se.Call(exchangeCall("ord_1", "m"), approvalOf(op))); !r.IsError || !strings.Contains(r.Content[0].Text, "sold out") {
			t.Fatalf("%v", r)
		}
		s.fail.Store(0)
		res := se.Call(exchangeCall("ord_1", "m"), approvalOf(op))
		if res.Operation == nil || res.Operation.Revision == op.Revision {
			t.Fatalf("M76: %s", res.Body)
		}
	})
	t.Run("M95 M96 an error of unknown outcome is HTTP 503, never a failure; the retry too", func(t *testing.T) {
		op := s.ask(t, se, exchangeCall("ord_2", "m"))
		s.fail.Store(2)
		res := se.Call(exchangeCall("ord_2", "m"), approvalOf(op))
		s.fail.Store(0)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || strings.Contains(string(res.Body), "warehouse") {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		if again := se.Call(exchangeCall("ord_2", "m"), approvalOf(op)); again.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("the retry: %d %s", again.StatusCode, again.Body)
		}
	})
}

func TestToolDeclarationAndSession(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	op := s.ask(t, se, exchangeCall("ord_1", "m"))
	for _, tc := range []struct{ name, ext string }{{"M08 M09 M12 undeclared", ""}, {"M11 another major version", `"operations";v="2"`}} {
		t.Run(tc.name, func(t *testing.T) {
			r := exchangeCall("ord_1", "m")
			r.Header = http.Header{}
			if tc.ext == "" {
				r.Header["Poppy-Extensions"] = nil
			} else {
				r.Header.Set("Poppy-Extensions", tc.ext)
			}
			res := se.Call(r, approvalOf(op))
			tr := resultOf(t, res)
			if !tr.IsError || tr.StructuredContent["operation"] != nil || strings.Contains(string(res.Body), "extension_required") || s.entered.Load() != 0 {
				t.Fatalf("M09, M10: %s", res.Body)
			}
		})
	}
	t.Run("M64 an invalid Session on the HTTP request: 401 invalid_session, no operation", func(t *testing.T) {
		r := exchangeCall("ord_1", "m")
		r.Header = http.Header{}
		r.Header.Set("Poppy-Session", "not.a.jwt")
		res := se.Call(r, approvalOf(op))
		if res.StatusCode != http.StatusUnauthorized || res.Error != "invalid_session" || res.Operation != nil || s.entered.Load() != 0 {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("M53 a value that is not an approval: the call without one", func(t *testing.T) {
		for _, meta := range []any{"exc_5Rt2", map[string]any{"operation_id": op.ID, "revision": op.Revision}, map[string]any{"operation_id": op.ID, "revision": op.Revision, "approver": "user", "approved_at": "1791487260"}} {
			b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": map[string]any{"name": "exchange_item",
				"arguments": exchangeArgs{OrderID: "ord_1", ItemID: "itm_4Qa", ReplacementSKU: "m"}, "_meta": map[string]any{"personalagentprotocol.org/approval": meta}}})
			r, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(string(b)))
			res := se.Call(r, nil)
			if res.Operation == nil || s.entered.Load() != 0 {
				t.Fatalf("%v: %s", meta, res.Body)
			}
		}
	})
	t.Run("M54 M71 an unknown member, arguments in another order, other _meta members: performed", func(t *testing.T) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"_meta":{"progressToken":"p1","personalagentprotocol.org/approval":{"sig":"AAAA","revision":%q,"operation_id":%q,"approver":"agent","input_type":"tap"}},"arguments":{"replacement_sku":"m","item_id":"itm_4Qa","order_id":"ord_1"},"name":"exchange_item"}}`, op.Revision, op.ID)
		r, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		if tr := resultOf(t, se.Call(r, nil)); tr.IsError || s.performed.Load() != 1 {
			t.Fatalf("%v", tr)
		}
	})
}

func TestToolChecks(t *testing.T) {
	s := newShop(t, nil, nil)
	agent := s.site.NewAgent()
	se := agent.SignedInSession("usr_1", "acct_1")
	op := s.ask(t, se, exchangeCall("ord_1", "m"))
	t.Run("M66 M43 another agent's Session: as without an approval", func(t *testing.T) {
		res := s.site.NewAgent().SignedInSession("usr_1", "acct_1").Call(exchangeCall("ord_1", "m"), approvalOf(op))
		if res.Operation == nil || res.Operation.ID == op.ID || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M40 M42 a signed-out Session meets the account's operation: the challenge on the HTTP request", func(t *testing.T) {
		res := agent.Session("usr_1").Call(exchangeCall("ord_1", "m"), approvalOf(op))
		if res.StatusCode != http.StatusUnauthorized || !strings.Contains(res.Header.Get("WWW-Authenticate"), "sign_in_required") || s.entered.Load() != 0 {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("M30 M70 M75 M76 the approval on a call for other terms: their operation", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "l"), approvalOf(op))
		if res.Operation == nil || res.Operation.ID != op.ID || res.Operation.Revision == op.Revision || !strings.Contains(string(res.Operation.Terms), `"l"`) || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M68 M76 a made-up revision", func(t *testing.T) {
		a := approvalOf(op)
		a.Revision = "1791487200-madeUpRevision0"
		res := se.Call(exchangeCall("ord_1", "m"), a)
		if res.Operation == nil || res.Operation.Revision == a.Revision || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
}

func TestToolDecline(t *testing.T) {
	s := newShop(t, nil, func(d endpoint.DeclineRequest) *webkit.Decline {
		if d.Approval.Approver == store.ApproverAgent {
			return &webkit.Decline{Reason: "Only you can approve this exchange."}
		}
		return nil
	})
	se := s.site.NewAgent().Session("usr_1")
	op := s.ask(t, se, exchangeCall("ord_1", "m"))
	agentApproval := &store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverAgent}
	t.Run("M77 M79 M80 M81 M82 M83 M87 an agent approval declined: an error result with the members", func(t *testing.T) {
		res := se.Call(exchangeCall("ord_1", "m"), agentApproval)
		tr := resultOf(t, res)
		if !tr.IsError || res.Error != "approval_declined" || res.Decline == nil || res.Decline.OperationID != op.ID || res.Decline.Revision != op.Revision {
			t.Fatalf("%s", res.Body)
		}
		if tr.StructuredContent["operation"] != nil || !strings.Contains(tr.Content[0].Text, "Only you") || s.entered.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("M88 a declined approval is not recorded; a user approval still performs", func(t *testing.T) {
		if res := se.Call(exchangeCall("ord_1", "m"), nil); res.Operation == nil {
			t.Fatalf("%s", res.Body)
		}
		if tr := resultOf(t, se.Call(exchangeCall("ord_1", "m"), approvalOf(op))); tr.IsError || s.performed.Load() != 1 {
			t.Fatalf("%v", tr)
		}
	})
}

// TestOneRecordAcrossAPIAndMCP: an approval of the API's operation is
// refused at the MCP server and the reverse (§6; M61, M62, P62), and
// what one performed is not performed again through the other (§7).
func TestOneRecordAcrossAPIAndMCP(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var st store.Store
			if backend == "redis" {
				st = redisstore.New(redistest.Server(t), redisstore.Options{})
			}
			s := newShop(t, st, nil)
			se := s.site.NewAgent().Session("usr_1")
			apiReq := func(order string) *http.Request {
				r, _ := http.NewRequest(http.MethodPost, "/api/orders/"+order+"/exchanges", strings.NewReader(`{"item_id":"itm_4Qa","replacement_sku":"m"}`))
				return r
			}
			t.Run("M62 P62 the API's approval at the MCP server, and the MCP server's at the API", func(t *testing.T) {
				apiOp := se.Call(apiReq("ord_1"), nil).Operation
				mcpOp := s.ask(t, se, exchangeCall("ord_1", "m"))
				if apiOp == nil || apiOp.ID != mcpOp.ID || apiOp.Revision == mcpOp.Revision {
					t.Fatalf("one action, one operation, a revision per interface: %v %v", apiOp, mcpOp)
				}
				if res := se.Call(exchangeCall("ord_1", "m"), approvalOf(apiOp)); res.Operation == nil || res.Operation.Revision == apiOp.Revision || s.performed.Load() != 0 {
					t.Fatalf("the API's approval at the MCP server: %s", res.Body)
				}
				if res := se.Call(apiReq("ord_1"), approvalOf(mcpOp)); res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.Revision == mcpOp.Revision || s.performed.Load() != 0 {
					t.Fatalf("the MCP server's approval at the API: %d %s", res.StatusCode, res.Body)
				}
				// Each through its own interface: performed once.
				if tr := resultOf(t, se.Call(exchangeCall("ord_1", "m"), approvalOf(mcpOp))); tr.IsError || s.performed.Load() != 1 {
					t.Fatalf("%v", tr)
				}
				if res := se.Call(apiReq("ord_1"), approvalOf(apiOp)); res.StatusCode == http.StatusCreated || s.performed.Load() != 1 {
					t.Fatalf("M35 P34 the API performed it again: %d %s", res.StatusCode, res.Body)
				}
			})
			t.Run("M89 the same approval in 10 calls at once performs once", func(t *testing.T) {
				before := s.performed.Load()
				op := s.ask(t, se, exchangeCall("ord_2", "m"))
				var wg sync.WaitGroup
				for range 10 {
					wg.Go(func() {
						res := se.Call(exchangeCall("ord_2", "m"), approvalOf(op))
						if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusServiceUnavailable {
							t.Errorf("status %d %s", res.StatusCode, res.Body)
						}
					})
				}
				wg.Wait()
				if n := s.performed.Load() - before; n != 1 {
					t.Fatalf("performed %d times", n)
				}
			})
		})
	}
}

// TestOneRecordAcrossWebsiteAndMCP: an approval recorded at the website's
// endpoint is refused at the MCP server, the MCP server's is refused at
// the endpoint (§6; M61, W87, W88), and what one performed is not
// performed again through the other (§7).
func TestOneRecordAcrossWebsiteAndMCP(t *testing.T) {
	s := newShop(t, nil, nil)
	se := s.site.NewAgent().Session("usr_1")
	b, err := se.Join()
	if err != nil {
		t.Fatal(err)
	}
	mcpOp := s.ask(t, se, exchangeCall("ord_1", "m"))
	form := url.Values{"replacement_sku": {"m"}}
	page := b.PostForm("/orders/ord_1/items/itm_4Qa/exchange", form)
	look := se.Lookup(page.Ref)
	if page.StatusCode != http.StatusForbidden || look.Operation == nil {
		t.Fatalf("%d %s / %s", page.StatusCode, page.Body, look.Body)
	}
	if mcpOp.ID != look.Operation.ID || mcpOp.Revision == look.Operation.Revision {
		t.Fatalf("one action: one operation, a revision per interface: %v %v", look.Operation, mcpOp)
	}
	t.Run("M61 the website's approval, recorded at the endpoint, is refused at the MCP server", func(t *testing.T) {
		if res := se.Approve(page.Ref); res.StatusCode != http.StatusNoContent {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		res := se.Call(exchangeCall("ord_1", "m"), approvalOf(look.Operation))
		if res.Operation == nil || res.Operation.Revision == look.Operation.Revision || s.performed.Load() != 0 {
			t.Fatalf("%s", res.Body)
		}
	})
	t.Run("W88 the MCP server's approval is not recorded at the endpoint", func(t *testing.T) {
		if res := se.Send(page.Ref, *approvalOf(mcpOp)); res.StatusCode == http.StatusNoContent {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("M35 W145 performed through the MCP server, the website's approval performs nothing", func(t *testing.T) {
		if tr := resultOf(t, se.Call(exchangeCall("ord_1", "m"), approvalOf(mcpOp))); tr.IsError || s.performed.Load() != 1 {
			t.Fatalf("%v", tr)
		}
		if res := page.Continue(); res.StatusCode == http.StatusCreated || s.performed.Load() != 1 {
			t.Fatalf("the browser's repeat: %d %s", res.StatusCode, res.Body)
		}
	})
}
