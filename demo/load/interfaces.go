package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/endpoint/mcpgate"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// The load's API and MCP phases: every web server also offers the
// exchange on its JSON API and as an MCP tool (endpoint/mcpgate), behind
// its Mount, with the same describe key as the page's. Agents (webkittest's,
// whose keys every server's Resolver reaches in process) send each
// action through both interfaces, approve both operations, and repeat
// both approved requests many times at once across all servers: each
// action is performed at most once, whichever interface asks (§7).
type interfaces struct {
	site *webkittest.Site
	// performed counts performances by action key, and total all of them.
	performed sync.Map // key → *atomic.Int32
	total     atomic.Int32
	// handle, when set, is what the API's handler and the tool do for an
	// approved request instead of counting it here (the fault suite
	// counts at its rig, by operation ID).
	handle func(ctx context.Context, operationID string)
}

func newInterfaces() *interfaces {
	return &interfaces{site: webkittest.New("https://shop.example")}
}

// apiDescribe is the page's describe for the JSON API's request: the
// same action key (exchange:<order>) and terms.
func apiDescribe(r *http.Request) (webkit.Action, error) {
	var body struct {
		SKU string `json:"sku"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return webkit.Action{}, fmt.Errorf(`the body is not {"sku": …}: %w`, err)
	}
	return exchangeAction(r.PathValue("order"), body.SKU), nil
}

func exchangeAction(order, sku string) webkit.Action {
	return webkit.Action{
		Key:     "exchange:" + order,
		Terms:   map[string]any{"order_id": order, "replacement_sku": sku, "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}},
		Summary: "Exchange the jacket on order " + order + " for $70.00 more.",
	}
}

type toolArgs struct {
	OrderID string `json:"order_id"`
	SKU     string `json:"sku"`
}

// serve returns one web server's handler: mux with the JSON API and the
// MCP server beside it, behind the server's Mount.
func (f *interfaces) serve(kit *webkit.Kit, mux *http.ServeMux) (http.Handler, error) {
	count := func(ctx context.Context) {
		if claim, ok := webkit.ClaimOf((&http.Request{}).WithContext(ctx)); ok {
			if f.handle != nil {
				f.handle(ctx, claim.Operation.ID)
				return
			}
			n, _ := f.performed.LoadOrStore(claim.Operation.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			f.total.Add(1)
		}
	}
	mux.Handle("POST /api/orders/{order}/exchanges", kit.Gate(apiDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		count(r.Context())
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"exchanged"}`+"\n")
	})))
	server := mcp.NewServer(&mcp.Implementation{Name: "load", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "exchange_item"}, mcpgate.Tool(kit,
		func(_ context.Context, _ *mcp.CallToolRequest, in toolArgs) (webkit.Action, error) {
			return exchangeAction(in.OrderID, in.SKU), nil
		},
		func(ctx context.Context, _ *mcp.CallToolRequest, in toolArgs) (*mcp.CallToolResult, any, error) {
			count(ctx)
			return nil, map[string]string{"status": "exchanged"}, nil
		}))
	mux.Handle("/mcp", mcpgate.Handler(server, &mcp.StreamableHTTPOptions{Stateless: true}))
	m, err := endpoint.NewMount(endpoint.Config{Origin: f.site.Origin, Kit: kit, Resolver: f.site.Resolver()})
	if err != nil {
		return nil, err
	}
	return m.Handler(mux), nil
}

func apiRequest(order string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "/api/orders/"+order+"/exchanges", strings.NewReader(`{"sku":"stormline-insulated-m"}`))
	r.Header.Set("Content-Type", "application/json")
	return r
}

func toolRequest(order string) *http.Request {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rand.IntN(1 << 30), "method": "tools/call",
		"params": map[string]any{"name": "exchange_item", "arguments": toolArgs{OrderID: order, SKU: "stormline-insulated-m"}}})
	r, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(string(b)))
	return r
}

// run sends c.browsers actions through both interfaces, across the
// servers at urls.
func (f *interfaces) run(ctx context.Context, c config, urls []string) error {
	// The harness's agents talk to the site in process: here the site is
	// a proxy to a random server of the run, over loopback HTTP.
	targets := make([]*url.URL, len(urls))
	for i, u := range urls {
		targets[i], _ = url.Parse(u)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: c.workers, MaxConnsPerHost: c.workers}
	f.site.Handler = &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[rand.IntN(len(targets))])
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	agent := f.site.NewAgent()
	n := c.browsers
	sessions := make([]*webkittest.Session, n)
	for i := range sessions {
		sessions[i] = agent.Session(fmt.Sprintf("usr_%d", i))
	}
	order := func(i int) string { return fmt.Sprintf("ord_ifc_%d", i) }
	apiOps, mcpOps := make([]*store.Operation, n), make([]*store.Operation, n)
	status := func(res *webkittest.Response) (int, error) {
		if res.Err != nil {
			return 0, res.Err
		}
		return res.StatusCode, nil
	}
	res := phase(ctx, c.workers, n, func(i int) (int, error) {
		r := sessions[i].Call(apiRequest(order(i)), nil)
		apiOps[i] = r.Operation
		return status(r)
	})
	res.print("api: 403 + operation")
	res = phase(ctx, c.workers, n, func(i int) (int, error) {
		r := sessions[i].Call(toolRequest(order(i)), nil)
		mcpOps[i] = r.Operation
		return status(r)
	})
	res.print("mcp: error result + op")
	for i := range n {
		if apiOps[i] == nil || mcpOps[i] == nil || apiOps[i].ID != mcpOps[i].ID {
			return fmt.Errorf("action %d: an operation through each interface, the same operation_id: api %v, mcp %v", i, apiOps[i], mcpOps[i])
		}
	}
	approval := func(op *store.Operation) *store.Approval {
		return &store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverUser}
	}
	// Both approved requests of every action, repeated at once across all
	// servers: one of them performs (§7), whichever interface it is.
	res = phase(ctx, c.workers, 2*n*c.repeats, func(i int) (int, error) {
		b := (i / 2) % n
		if i%2 == 0 {
			return status(sessions[b].Call(apiRequest(order(b)), approval(apiOps[b])))
		}
		return status(sessions[b].Call(toolRequest(order(b)), approval(mcpOps[b])))
	})
	res.print("api+mcp: approved repeats")
	twice := 0
	f.performed.Range(func(_, v any) bool {
		if v.(*atomic.Int32).Load() > 1 {
			twice++
		}
		return true
	})
	fmt.Printf("\napi and mcp: performed %d of %d actions, each approved through both; %d performed more than once\n", f.total.Load(), n, twice)
	if twice > 0 || int(f.total.Load()) != n {
		return errors.New("at most once across interfaces, exactly once per action: FAILED")
	}
	fmt.Println("at most once across the API and the MCP server: ok")
	return nil
}
