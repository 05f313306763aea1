// Package mcpgate gates the tools of an MCP server built with the official
// Go SDK (github.com/modelcontextprotocol/go-sdk) as operations-v3 §4 and
// §6 "MCP" and §7 say, with the website's Kit, store and describe: a
// gated tool called without an approval returns an error result with the
// operation in structuredContent (M44–M49), the same call with the
// approval in params._meta under personalagentprotocol.org/approval is
// checked (checks 1–3, in order) and performed at most once (M63–M76,
// M89), a retry gets the first result (M90) or HTTP 503 with Retry-After
// while the first is performing (M96), and a decline is an error result
// with its members (M77–M88).
//
// The MCP server is served over Streamable HTTP by Handler, behind the
// website's endpoint.Mount.Handler: each HTTP request of an MCP session
// carries its own Poppy-Session (and, signed in, its access token), and
// is verified on its own (RULES.md choice 8). The MCP session is not a
// Poppy Session and authorizes nothing.
//
//	server := mcp.NewServer(&mcp.Implementation{Name: "shop"}, nil)
//	mcp.AddTool(server, &mcp.Tool{Name: "exchange_item"}, mcpgate.Tool(kit, describe, exchange))
//	mux.Handle("/mcp", mcpgate.Handler(server, nil))
//	http.ListenAndServe(addr, mount.Handler(mux))
//
// This package is its own module, so that a website without an MCP server
// doesn't depend on the SDK; the kit's core never imports it.
package mcpgate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opsgate/opsgate/internal/apigate"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// callKey is where Handler leaves, in the header map of an HTTP request
// it verified, the key of that request's call state: the SDK hands a
// tool the same map (mcp.RequestExtra.Header). A field name with a space
// never arrives over HTTP, so no client can set it.
const callKey = "opsgate call"

// call is one verified HTTP request of an MCP session: its Session, and
// the HTTP answer a gated tool asks for instead of its result (503 while
// its operation is performing, M96; the sign-in challenge, M42).
type call struct {
	caller   apigate.Caller
	verifier apigate.Verifier

	mu     sync.Mutex
	answer *recorder
}

var calls sync.Map // key → *call

// Handler serves server over Streamable HTTP for agents (RULES.md choice
// 8): a request that carries Poppy-Session has its Session verified on
// its own, by the verifier endpoint.Mount.Handler puts in front (a
// request that fails gets its error and never an operation, M64), and
// its tool calls are that Session's. A request without Poppy-Session is
// served too, and a gated tool refuses it with an ordinary tool error.
//
// opts are the SDK's; JSONResponse is always set, so that a gated tool
// can answer the HTTP request itself (503 with Retry-After, M96).
func Handler(server *mcp.Server, opts *mcp.StreamableHTTPOptions) http.Handler {
	o := mcp.StreamableHTTPOptions{}
	if opts != nil {
		o = *opts
	}
	o.JSONResponse = true
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &o)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delete(r.Header, callKey)
		if !apigate.IsCall(r) {
			sdk.ServeHTTP(w, r)
			return
		}
		v := apigate.VerifierOf(r.Context())
		if v == nil {
			// Fail closed: the Session can't be verified here.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintln(w, `{"error":"server_error","error_description":"this MCP server can't verify the Poppy-Session header: serve it behind endpoint.Mount.Handler; nothing was done"}`)
			return
		}
		c, ok := v.Verify(w, r)
		if !ok {
			return // M64: its error, never an operation
		}
		c.Via = storekit.ViaMCP
		st := &call{caller: c, verifier: v}
		key := rand.Text()
		calls.Store(key, st)
		defer calls.Delete(key)
		r.Header[callKey] = []string{key}
		if r.Method != http.MethodPost {
			sdk.ServeHTTP(w, r)
			return
		}
		held := newRecorder()
		sdk.ServeHTTP(held, r)
		st.mu.Lock()
		answer := st.answer
		st.mu.Unlock()
		if answer == nil {
			answer = held
		}
		answer.writeTo(w)
	})
}

// Tool gates h, a tool of an MCP server served by Handler, with the Kit's
// store. describe says which action a call asks for, as webkit.Describe
// does for a request: its Key, the Terms it would perform (every argument
// that changes the outcome, M28) and a Summary; webkit.ErrNotGated runs
// the tool without operations (M05, M06), another error is an ordinary
// tool error. It keeps the same record as the website and the API, so that one
// action (one Key) is performed at most once whichever interface asks
// (§7), and an approval of another interface's operation is refused
// (M61, M62). The tool declares no outputSchema (Out is any), so that its
// error results may carry the operation (M48).
func Tool[In any](kit *webkit.Kit, describe func(ctx context.Context, req *mcp.CallToolRequest, in In) (webkit.Action, error), h mcp.ToolHandlerFor[In, any]) mcp.ToolHandlerFor[In, any] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		var st *call
		if req.Extra != nil {
			if keys := req.Extra.Header[callKey]; len(keys) == 1 {
				if v, ok := calls.Load(keys[0]); ok {
					st = v.(*call)
				}
			}
		}
		if st == nil {
			if _, err := describe(ctx, req, in); errors.Is(err, webkit.ErrNotGated) {
				return h(ctx, req, in)
			}
			return toolError("This tool needs approval through the Poppy operations extension: call it with a Poppy Session (Poppy-Session on each HTTP request) that declares \"operations\";v=\"3\". Nothing was done."), nil, nil
		}
		if !headers.DeclaresOperations(st.caller.Extensions) {
			if _, err := describe(ctx, req, in); errors.Is(err, webkit.ErrNotGated) {
				return h(ctx, req, in) // M05
			}
			// M08, M09: an ordinary tool error, no operation, no
			// extension_required.
			return toolError(`This tool needs the Poppy "operations" extension, version 3: declare Poppy-Extensions: "operations";v="3" on each HTTP request. Nothing was done.`), nil, nil
		}
		r, err := toolRequest(ctx, req, st)
		if err != nil {
			return toolError("Nothing was done: " + err.Error()), nil, nil
		}
		// A tool describe doesn't gate (M05) answers as it would without
		// the extension, its Go error the SDK's error result; it still
		// runs through the Gate, for webkit.SessionOf.
		_, derr := describe(ctx, req, in)
		ungated := errors.Is(derr, webkit.ErrNotGated)
		var ungatedErr error
		perform := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, out, err := h(r.Context(), req, in)
			switch {
			case err != nil && ungated:
				ungatedErr = err
				w.WriteHeader(http.StatusOK)
				return
			case err != nil:
				// Its outcome is not known: never a failure (M95); the Gate
				// answers 503 and a retry is refused while it stays unknown.
				w.WriteHeader(http.StatusInternalServerError)
				return
			case res == nil:
				res = &mcp.CallToolResult{}
			}
			if res.StructuredContent == nil && out != nil {
				res.StructuredContent = out
			}
			if res.Content == nil {
				res.Content = []mcp.Content{}
			}
			b, err := json.Marshal(res)
			if err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			if res.IsError {
				// The tool's own error result: it took no effect, and a
				// retry is checked again (M90).
				w.WriteHeader(http.StatusUnprocessableEntity)
			} else {
				w.WriteHeader(http.StatusOK)
			}
			w.Write(b)
		})
		rec := newRecorder()
		// describe and h get the Gate's context, with the call's Session
		// (webkit.SessionOf).
		kit.Gate(func(r *http.Request) (webkit.Action, error) { return describe(r.Context(), req, in) })(perform).ServeHTTP(rec, r)
		if ungatedErr != nil {
			return nil, nil, ungatedErr
		}
		return result(rec, st)
	}
}

// toolRequest is the tool call as the Gate takes an API call: its
// Session already verified by Handler, its approval from params._meta.
func toolRequest(ctx context.Context, req *mcp.CallToolRequest, st *call) (*http.Request, error) {
	ctx = apigate.WithVerifier(ctx, verified{st})
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/.mcp/tools/"+req.Params.Name, http.NoBody)
	if err != nil {
		return nil, err
	}
	r.Header[headers.Session] = []string{""} // an API call's, verified
	var meta map[string]any
	if req.Params != nil {
		meta = req.Params.Meta
	}
	// M53: a value that is not an approval is ignored, and the call is
	// handled as one without an approval.
	if a, _ := apigate.ApprovalOfMeta(meta); a != nil {
		h, err := headers.FormatApproval(*a)
		if err != nil {
			// M59: an input_type or reference that a header can't carry
			// (not printable ASCII) doesn't make the approval another
			// one: kept as absent, as the store keeps one too long.
			a.InputType, a.Reference = "", ""
			h, err = headers.FormatApproval(*a)
		}
		if err != nil {
			return nil, fmt.Errorf("the approval in _meta can't be used: %w", err)
		}
		r.Header.Set(headers.Approval, h)
	}
	return r, nil
}

// verified is Handler's verification of the HTTP request that carried a
// tool call: the Gate asks it, and the Session JWT is not used twice.
type verified struct{ st *call }

func (v verified) Verify(http.ResponseWriter, *http.Request) (apigate.Caller, bool) {
	return v.st.caller, true
}

func (v verified) Decline(ctx context.Context, op store.Operation, a store.Approval, c apigate.Caller) *apigate.Decline {
	return v.st.verifier.Decline(ctx, op, a, c)
}

func (v verified) Explain() bool { return v.st.verifier.Explain() }

// result is the Gate's answer to a tool call, as the tool's result: an
// error result with the operation (M44–M47) or the decline (M81–M83),
// the tool's own result (M74) or the first one again (M90); or an HTTP
// answer for the whole request: 503 with Retry-After (M96), the sign-in
// challenge (M42), 429.
func result(rec *recorder, st *call) (*mcp.CallToolResult, any, error) {
	var body struct {
		Error       string          `json:"error"`
		Description string          `json:"error_description"`
		Detail      string          `json:"detail"` // respond.BadRequest's
		Operation   json.RawMessage `json:"operation"`
		Reason      string          `json:"reason"`
		OperationID string          `json:"operation_id"`
		Status      string          `json:"status"`
	}
	_ = json.Unmarshal(rec.body.Bytes(), &body)
	switch {
	case rec.status == http.StatusForbidden && body.Error == "approval_required" && len(body.Operation) > 0:
		var op struct {
			Summary string `json:"summary"`
		}
		_ = json.Unmarshal(body.Operation, &op)
		text := "Not done yet. This needs approval"
		if op.Summary != "" {
			text += ": " + op.Summary
		} else {
			text += "."
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
			StructuredContent: map[string]json.RawMessage{"operation": body.Operation}}, nil, nil
	case rec.status == http.StatusForbidden && body.Error == "approval_declined":
		text := "Not done: the approval was declined."
		if body.Reason != "" {
			text = "Not done: " + body.Reason
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}},
			StructuredContent: json.RawMessage(bytes.TrimSpace(rec.body.Bytes()))}, nil, nil
	case rec.status == http.StatusOK || rec.status == http.StatusUnprocessableEntity:
		if body.Status == "performed" && body.OperationID != "" {
			// A first result too long to keep: one that says the same (§7).
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "Done: operation " + body.OperationID + " was performed."}},
				StructuredContent: map[string]string{"operation_id": body.OperationID, "status": "performed"}}, nil, nil
		}
		var res mcp.CallToolResult
		if err := json.Unmarshal(rec.body.Bytes(), &res); err != nil {
			return nil, nil, fmt.Errorf("mcpgate: the tool's kept result: %w", err)
		}
		return &res, nil, nil
	case rec.status == http.StatusBadRequest:
		why := body.Description
		if why == "" {
			why = body.Detail
		}
		if why == "" {
			why = "the call can't be described as an action"
		}
		return toolError("Nothing was done: " + why), nil, nil
	}
	// The whole HTTP request's answer (503, 401, 429, 500): no tool result.
	st.mu.Lock()
	st.answer = rec
	st.mu.Unlock()
	return toolError("Not done yet: try again later."), nil, nil
}

func toolError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// recorder keeps an HTTP answer to write later.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *recorder) Flush() {}

func (r *recorder) writeTo(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range r.header {
		if !strings.EqualFold(k, callKey) {
			h[k] = v
		}
	}
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	w.Write(r.body.Bytes())
}
