package refagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// The interfaces the agent acts through (§4, §6): its browser on the
// website, the Company's JSON API, or its MCP server.
const (
	ViaWeb = "web"
	ViaAPI = "api"
	ViaMCP = "mcp"
)

// NotGated is CallThrough's result for an action the Company performed
// without asking for approval (P05, M05).
const NotGated = "not_gated"

// Call is an action the agent asks for directly, without a browser: at
// the Company's API, Method on Path (relative to api.base_url's origin)
// with Body as JSON; at its MCP server, Tool with Args.
type Call struct {
	Method, Path string
	Body         any
	Tool         string
	Args         any
}

// approvalMetaKey is where a tool call carries the approval (§6 "MCP").
const approvalMetaKey = "personalagentprotocol.org/approval"

// CallThrough performs c through via (ViaAPI or ViaMCP) in a new Session
// (signed in when signedIn): the request as usual; when the answer is an
// operation (§4), the question to d; with an approval, the same request
// again with it (§6: Poppy-Approval, or params._meta), the Session header
// new on every request. While the Company answers 503 with Retry-After
// (§7: being performed, or its outcome unknown) it sends the same
// approval again, never a new one (A49). A decline ends it (A44).
func (a *Agent) CallThrough(ctx context.Context, via string, c Call, signedIn bool, d Decider) (Outcome, error) {
	var out Outcome
	s, err := a.NewSession(ctx, signedIn)
	if err != nil {
		return out, err
	}
	send := func(approval *store.Approval) (callAnswer, error) {
		switch via {
		case ViaAPI:
			return a.sendAPI(ctx, s, c, approval)
		case ViaMCP:
			return a.sendMCP(ctx, s, c, approval)
		}
		return callAnswer{}, fmt.Errorf("refagent: no interface %q: choose api or mcp", via)
	}
	ans, err := send(nil)
	if err != nil {
		return out, err
	}
	var approval *store.Approval
	for range 20 {
		switch {
		case ans.busy > 0 && approval != nil:
			a.step("the Company answered 503: the operation is being performed or its outcome is not known yet (§7); the same approval again in %s", ans.busy)
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(ans.busy):
			}
		case ans.decline != nil:
			a.step("the Company declined the approval: nothing was performed (A44)")
			out.Result, out.Decline = Declined, ans.decline
			return out, nil
		case ans.operation != nil:
			op := *ans.operation
			if approval != nil && approval.Revision == op.Revision {
				return out, errors.New("refagent: the Company answered the approval with the revision it names (§6 forbids it)")
			}
			out.OperationID, out.Revision = op.ID, op.Revision
			a.step("the %s answered with operation %s, revision %s: %s", via, op.ID, op.Revision, op.Summary)
			q := Question{Company: a.disc.Name, Operation: op, Summary: op.Summary, Action: c.describe(via), AgentMayApprove: true}
			out.Asked = append(out.Asked, q)
			dec, err := d.Decide(ctx, q)
			if err != nil {
				return out, err
			}
			if !dec.Approve {
				out.Result = NotApproved
				return out, nil
			}
			at := dec.At
			if at.IsZero() {
				at = a.now()
			}
			approval = &store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: dec.Approver, ApprovedAt: at.Truncate(time.Second)}
			if dec.Approver == store.ApproverUser {
				approval.InputType = dec.InputType
			}
			out.Approver = dec.Approver
		case ans.ok:
			if approval == nil {
				out.Result = NotGated
			} else {
				out.Result = Performed
			}
			a.step("the %s performed it: %s", via, ans.text)
			return out, nil
		default:
			return out, fmt.Errorf("refagent: the %s answered %s", via, ans.text)
		}
		if ans, err = send(approval); err != nil {
			return out, err
		}
	}
	return out, errors.New("refagent: no end after 20 requests")
}

func (c Call) describe(via string) string {
	if via == ViaMCP {
		args, _ := json.Marshal(c.Args)
		return "tools/call " + c.Tool + " " + string(args)
	}
	return c.Method + " " + c.Path
}

// callAnswer is what an API request or a tool call came back with.
type callAnswer struct {
	ok        bool // performed (or not gated): the action's own answer
	operation *store.Operation
	decline   *webkit.Decline
	busy      time.Duration // 503 with Retry-After
	text      string
}

// sessionHeaders are the headers of each request of Session s at the API
// or MCP server (webkit/RULES.md choices 7 and 8): a new Session JWT, the
// access token signed in, Poppy-Version and the declaration (A02).
func (a *Agent) sessionHeaders(ctx context.Context, h http.Header, s *Session) error {
	token := ""
	if s.SignedIn {
		var err error
		if token, err = a.accessToken(ctx); err != nil {
			return err
		}
		h.Set("Authorization", "Bearer "+token)
	}
	jwt, err := a.sessionHeader(s, token)
	if err != nil {
		return err
	}
	h.Set(headers.Session, jwt)
	h.Set(headers.Version, "1.0")
	h.Set(headers.Extensions, `"operations";v="3"`)
	return nil
}

func (a *Agent) sendAPI(ctx context.Context, s *Session, c Call, approval *store.Approval) (callAnswer, error) {
	body, err := json.Marshal(c.Body)
	if err != nil {
		return callAnswer{}, err
	}
	base := a.disc.APIBase
	if base == "" {
		return callAnswer{}, errors.New("refagent: the Company's poppy.json lists no api.base_url")
	}
	req, err := http.NewRequestWithContext(ctx, c.Method, originOf(base)+c.Path, bytes.NewReader(body))
	if err != nil {
		return callAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := a.sessionHeaders(ctx, req.Header, s); err != nil {
		return callAnswer{}, err
	}
	if approval != nil {
		h, err := headers.FormatApproval(*approval)
		if err != nil {
			return callAnswer{}, err
		}
		req.Header.Set(headers.Approval, h)
	}
	res, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return callAnswer{}, err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	ans := callAnswer{text: res.Status + " " + strings.TrimSpace(string(raw))}
	var v struct {
		Error     string           `json:"error"`
		Operation *store.Operation `json:"operation"`
	}
	_ = json.Unmarshal(raw, &v)
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		ans.ok = true
	case res.StatusCode == http.StatusServiceUnavailable:
		ans.busy = retryAfter(res.Header.Get("Retry-After"))
	case res.StatusCode == http.StatusForbidden && v.Error == "approval_required" && v.Operation != nil:
		ans.operation = v.Operation
	case res.StatusCode == http.StatusForbidden && v.Error == "approval_declined":
		var d webkit.Decline
		_ = json.Unmarshal(raw, &d)
		ans.decline = &d
	}
	return ans, nil
}

func (a *Agent) sendMCP(ctx context.Context, s *Session, c Call, approval *store.Approval) (callAnswer, error) {
	if a.disc.MCP == "" {
		return callAnswer{}, errors.New("refagent: the Company's poppy.json lists no mcp.url")
	}
	// A new MCP session for each call: the Poppy Session is what each
	// HTTP request carries, and the MCP session authorizes nothing
	// (webkit/RULES.md choice 8).
	status := &lastStatus{}
	hc := &http.Client{Timeout: a.cfg.HTTPClient.Timeout, Transport: &poppyTransport{a: a, s: s, ctx: ctx, status: status, next: a.cfg.HTTPClient.Transport}}
	client := mcp.NewClient(&mcp.Implementation{Name: "opsgate-reference-agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.disc.MCP, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return callAnswer{}, fmt.Errorf("refagent: MCP: %w", err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: c.Tool, Arguments: c.Args}
	if approval != nil {
		m := map[string]any{"operation_id": approval.OperationID, "revision": approval.Revision, "approver": string(approval.Approver)}
		if !approval.ApprovedAt.IsZero() {
			m["approved_at"] = approval.ApprovedAt.Unix()
		}
		if approval.InputType != "" {
			m["input_type"] = approval.InputType
		}
		params.Meta = mcp.Meta{approvalMetaKey: m}
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		if code, after := status.get(); code == http.StatusServiceUnavailable {
			return callAnswer{busy: retryAfter(after), text: "HTTP 503"}, nil
		}
		return callAnswer{}, fmt.Errorf("refagent: MCP tools/call %s: %w", c.Tool, err)
	}
	ans := callAnswer{}
	for _, ct := range res.Content {
		if t, ok := ct.(*mcp.TextContent); ok {
			ans.text += t.Text
		}
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var v struct {
		Error     string           `json:"error"`
		Operation *store.Operation `json:"operation"`
	}
	_ = json.Unmarshal(raw, &v)
	switch {
	case !res.IsError:
		ans.ok = true
	case v.Operation != nil:
		ans.operation = v.Operation
	case v.Error == "approval_declined":
		var d webkit.Decline
		_ = json.Unmarshal(raw, &d)
		ans.decline = &d
	}
	return ans, nil
}

// poppyTransport adds Session s's headers to each HTTP request of an MCP
// session, and notes the last answer's status.
type poppyTransport struct {
	a      *Agent
	s      *Session
	ctx    context.Context
	status *lastStatus
	next   http.RoundTripper
}

func (t *poppyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if err := t.a.sessionHeaders(t.ctx, r.Header, t.s); err != nil {
		return nil, err
	}
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	res, err := next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		t.status.set(res.StatusCode, res.Header.Get("Retry-After"))
	}
	return res, err
}

type lastStatus struct {
	code  int
	after string
}

func (l *lastStatus) set(code int, after string) { l.code, l.after = code, after }
func (l *lastStatus) get() (int, string)         { return l.code, l.after }

// retryAfter reads a Retry-After in seconds: at least 1 s, at most 30 s.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		n = 1
	}
	return time.Duration(min(n, 30)) * time.Second
}
