package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

// The checker's API and MCP modes (Config.Via): the P and M rows it can
// observe, with one action the site offers at its JSON API (Action:
// "METHOD /path {json}") or as a tool of its MCP server (Action: "tool
// {json arguments}"), each request carrying its own Session
// (webkit/RULES.md choices 7 and 8), the approval on the same request
// made again (§6 "APIs", "MCP").

// idPattern is the kit's reading of spec 8.2's IDs.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

// callCase is the one call the API or MCP mode checks.
type callCase struct {
	c   *checker
	via string
	// api: method, path, body; mcp: tool, args.
	method, path string
	body         []byte
	tool         string
	args         json.RawMessage
	// mcp: the server's URL, from poppy.json (mcp.url).
	mcpURL string
	// idemKey, when set, is the API request's Idempotency-Key (P59).
	idemKey string
}

// callAnswer is the site's answer to one call: the HTTP status, and the
// API's JSON body or the tool result's structuredContent.
type callAnswer struct {
	status  int
	header  http.Header
	raw     []byte
	isError bool // mcp: the tool result's isError
	text    string
	content map[string]json.RawMessage // api: the body; mcp: structuredContent
	result  bool                       // mcp: a JSON-RPC result came back
	err     error
}

func (a callAnswer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	s := fmt.Sprintf("%d", a.status)
	if a.isError {
		s += " isError"
	}
	if e := a.str("error"); e != "" {
		s += " " + e
	}
	return s
}

func (a callAnswer) str(member string) string {
	var s string
	_ = json.Unmarshal(a.content[member], &s)
	return s
}

func (a callAnswer) operation() (store.Operation, bool) {
	raw, ok := a.content["operation"]
	if !ok {
		return store.Operation{}, false
	}
	var op store.Operation
	return op, json.Unmarshal(raw, &op) == nil && op.ID != ""
}

// performed: the action's own answer (2xx at the API, a result that is
// no error at the MCP server).
func (a callAnswer) performed() bool {
	if a.err != nil {
		return false
	}
	if a.mcp() {
		return a.status == http.StatusOK && a.result && !a.isError
	}
	return a.status >= 200 && a.status < 300
}

func (a callAnswer) mcp() bool { return a.result || a.text != "" }

// send sends the call in Session s: extensions is its Poppy-Extensions
// ("" none), approval the approval it carries, jwt a Session JWT to send
// instead of a good one.
func (cc *callCase) send(ctx context.Context, s *session, extensions string, approval map[string]any, jwt string) callAnswer {
	c := cc.c
	h := http.Header{}
	token := ""
	if s.signedIn {
		t, err := c.accessToken(ctx, s.agent)
		if err != nil {
			return callAnswer{err: err}
		}
		token = t
		h.Set("Authorization", "Bearer "+token)
	}
	if jwt == "" {
		var err error
		if jwt, err = c.jwt(s, token, nil); err != nil {
			return callAnswer{err: err}
		}
	}
	h.Set(headers.Session, jwt)
	h.Set(headers.Version, "1.0")
	if extensions != "" {
		h.Set(headers.Extensions, extensions)
	}
	if cc.via == "api" {
		if approval != nil {
			h.Set(headers.Approval, approvalHeader(approval))
		}
		if cc.idemKey != "" {
			h.Set("Idempotency-Key", cc.idemKey)
		}
		return cc.post(ctx, cc.method, c.origin+cc.path, h, cc.body)
	}
	params := map[string]any{"name": cc.tool, "arguments": cc.args}
	if approval != nil {
		params["_meta"] = map[string]any{"personalagentprotocol.org/approval": approval}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": time.Now().UnixNano(), "method": "tools/call", "params": params})
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	// A new MCP session for the call: initialize first (each HTTP request
	// with its own Session JWT); a stateless server needs none.
	if sid, ok := cc.initialize(ctx, s, token, h); ok && sid != "" {
		h.Set("Mcp-Session-Id", sid)
	}
	return cc.post(ctx, http.MethodPost, cc.mcpURL, h, body)
}

// initialize opens an MCP session and returns its Mcp-Session-Id.
func (cc *callCase) initialize(ctx context.Context, s *session, token string, base http.Header) (string, bool) {
	jwt, err := cc.c.jwt(s, token, nil)
	if err != nil {
		return "", false
	}
	h := base.Clone()
	h.Set(headers.Session, jwt)
	body := []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"opsgate-conformance","version":"1"}}}`)
	a := cc.post(ctx, http.MethodPost, cc.mcpURL, h, body)
	if a.err != nil || a.status != http.StatusOK {
		return "", false
	}
	sid := a.header.Get("Mcp-Session-Id")
	if sid != "" {
		if jwt, err = cc.c.jwt(s, token, nil); err == nil {
			h.Set(headers.Session, jwt)
			h.Set("Mcp-Session-Id", sid)
			cc.post(ctx, http.MethodPost, cc.mcpURL, h, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		}
	}
	return sid, true
}

func (cc *callCase) post(ctx context.Context, method, u string, h http.Header, body []byte) callAnswer {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return callAnswer{err: err}
	}
	req.Header = h
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := cc.c.client().Do(req)
	if err != nil {
		return callAnswer{err: err}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	a := callAnswer{status: res.StatusCode, header: res.Header, raw: raw}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		raw = lastEvent(raw)
	}
	var rpc struct {
		Result *struct {
			IsError           bool                       `json:"isError"`
			Content           []struct{ Text string }    `json:"content"`
			StructuredContent map[string]json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	if cc.via == "mcp" && json.Unmarshal(raw, &rpc) == nil && rpc.Result != nil {
		a.result, a.isError, a.content = true, rpc.Result.IsError, rpc.Result.StructuredContent
		for _, t := range rpc.Result.Content {
			a.text += t.Text
		}
		return a
	}
	_ = json.Unmarshal(raw, &a.content)
	return a
}

// lastEvent is the data of the last event of a text/event-stream body.
func lastEvent(b []byte) []byte {
	var last []byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
			last = []byte(strings.TrimSpace(d))
		}
	}
	return last
}

func approvalHeader(a map[string]any) string {
	var parts []string
	for _, k := range []string{"operation_id", "revision", "approver", "input_type", "reference"} {
		if v, ok := a[k].(string); ok {
			parts = append(parts, fmt.Sprintf("%s=%q", k, v))
		}
	}
	if v, ok := a["approved_at"].(int64); ok {
		parts = append(parts, fmt.Sprintf("approved_at=%d", v))
	}
	return strings.Join(parts, ", ")
}

func userApproval(op store.Operation) map[string]any {
	return map[string]any{"operation_id": op.ID, "revision": op.Revision, "approver": "user", "approved_at": time.Now().Add(-time.Hour).Unix(), "input_type": "tap"}
}

const declares = `"operations";v="3"`

// row names a case's rule IDs for the interface: P for the API, M for
// the MCP server.
func (cc *callCase) rows(api, mcp string) []string {
	if cc.via == "api" {
		return strings.Fields(api)
	}
	return strings.Fields(mcp)
}

// runCalls is the API or MCP mode.
func (c *checker) runCalls(ctx context.Context) {
	cc, ok := c.callDiscovery(ctx)
	if !ok {
		return
	}
	a := c.a.session(false)
	count := func() (int, bool) {
		if c.cfg.Performed == nil {
			return 0, false
		}
		return c.cfg.Performed(), true
	}
	before, counting := count()
	noneYet := func(k *kase, what string) {
		if n, ok := count(); ok {
			k.check(n == before, "%s: the site performed the action (%d time(s))", what, n-before)
		}
	}

	// The Session checks come first (P64, M64).
	k := c.begin("an invalid Session gets invalid_session, never an operation", cc.rows("P63 P64", "M63 M64")...)
	ans := cc.send(ctx, a, declares, nil, "bad.session.jwt")
	_, hasOp := ans.operation()
	k.check(ans.status == http.StatusUnauthorized && !hasOp, "invalid Poppy-Session: %s, want 401 invalid_session and no operation", ans)
	noneYet(k, "invalid Session")
	k.end()

	// Undeclared (P08, P09; M08, M09, M10).
	k = c.begin("a call that doesn't declare operations v3 gets no operation", cc.rows("P08 P09 P10", "M08 M09 M10 M11")...)
	for _, ext := range []string{"", `"operations";v="2"`} {
		ans = cc.send(ctx, a, ext, nil, "")
		_, hasOp = ans.operation()
		k.check(ans.err == nil && !hasOp && !ans.performed(), "Poppy-Extensions %q: %s, want no operation and not performed", ext, ans)
		if cc.via == "mcp" {
			k.check(!strings.Contains(string(ans.raw), "extension_required"), "M10: a tool answered extension_required (%q)", ext)
		}
	}
	noneYet(k, "undeclared")
	k.end()

	// §4: the operation.
	k = c.begin("the call is refused with the operation", cc.rows("P12 P13 P14 P19 P20 P30 P43 P44 P45 P46", "M13 M14 M15 M20 M21 M31 M44 M45 M46 M47 M49")...)
	firstKey := "conformance-" + randomID(12) // P59: sent again with the approval
	cc.idemKey = firstKey
	first := cc.send(ctx, a, declares, nil, "")
	cc.idemKey = ""
	op, hasOp := first.operation()
	if cc.via == "api" {
		k.check(first.status == http.StatusForbidden && first.str("error") == "approval_required", "P44: %s, want 403 approval_required", first)
	} else {
		k.check(first.status == http.StatusOK && first.result && first.isError, "M45: %s, want HTTP 200 with a tool result whose isError is true", first)
		k.check(strings.Contains(strings.ToLower(first.text), "approv"), "M47: the result's text doesn't say the action needs approval: %q", first.text)
	}
	k.check(first.header.Get("WWW-Authenticate") == "", "P46 M49: WWW-Authenticate on the approval request")
	if !k.check(hasOp, "P45 M46: no operation in the answer: %s", first) {
		k.end()
		c.no5xx()
		return
	}
	k.check(idPattern.MatchString(op.ID) && idPattern.MatchString(op.Revision), "P19 P20: operation_id %q or revision %q is not an ID of spec 8.2", op.ID, op.Revision)
	k.check(!op.ExpiresAt.IsZero() && len(op.Terms) > 0 && op.Terms[0] == '{', "P12 P13 P14: expires_at or terms missing, or terms not an object")
	noneYet(k, "the first call")
	k.end()

	k = c.begin("the same call again: the same operation_id and revision", cc.rows("P16 P23", "M17 M24")...)
	again := cc.send(ctx, a, declares, nil, "")
	op2, _ := again.operation()
	k.check(op2.ID == op.ID && op2.Revision == op.Revision, "operation %s/%s, then %s/%s", op.ID, op.Revision, op2.ID, op2.Revision)
	k.end()

	// Approvals that aren't (P51, P52; M53), and check 3 (P68, P76).
	k = c.begin("an approval that isn't one, or names a made-up revision, performs nothing", cc.rows("P51 P52 P68 P76", "M53 M68 M76")...)
	for name, bad := range map[string]map[string]any{
		// Not an approval: the call without one, its operation as it is.
		"no approver":    {"operation_id": op.ID, "revision": op.Revision},
		"approver robot": {"operation_id": op.ID, "revision": op.Revision, "approver": "robot"},
	} {
		ans := cc.send(ctx, a, declares, bad, "")
		_, has := ans.operation()
		k.check(has && !ans.performed(), "%s: %s, want the operation, not performed", name, ans)
	}
	for name, bad := range map[string]map[string]any{
		// Check 1 or 3 fails: never answered with the revision it names.
		"a made-up revision":  {"operation_id": op.ID, "revision": "1791487200-madeUpRevision0", "approver": "user"},
		"a made-up operation": {"operation_id": "op_madeUp0000000000000", "revision": op.Revision, "approver": "user"},
	} {
		ans := cc.send(ctx, a, declares, bad, "")
		got, has := ans.operation()
		k.check(has && !ans.performed() && got.Revision != bad["revision"], "%s: %s, want the operation with another revision than the approval's, not performed", name, ans)
	}
	noneYet(k, "bad approvals")
	k.end()

	k = c.begin("another agent's Session with the approval: as a call without one", cc.rows("P42 P66", "M43 M66")...)
	ans = cc.send(ctx, c.b.session(false), declares, userApproval(op), "")
	got, has := ans.operation()
	k.check(has && !ans.performed() && got.Revision != op.Revision, "%s, want its own operation, not performed", ans)
	noneYet(k, "another agent")
	k.end()

	if c.cfg.TokenURL != "" {
		c.callSignedIn(ctx, cc, first, count, before)
	}

	// Approved: performed once, and retries get the first answer.
	k = c.begin("the same call with the approval, under another Session of the agent, is performed once", cc.rows("P03 P04 P37 P49 P50 P53 P54 P59 P74", "M03 M04 M38 M50 M51 M54 M55 M74")...)
	appr := userApproval(op)
	appr["sig"] = "AAAA" // P53, M54: a member it doesn't know is ignored
	var perf callAnswer
	cc.idemKey = firstKey // P59: the first request's key doesn't carry over its 403
	for range 20 {
		perf = cc.send(ctx, c.a.session(false), declares, appr, "")
		if perf.status != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(time.Second)
	}
	cc.idemKey = ""
	k.check(perf.performed(), "%s, want the action's own answer", perf)
	if n, ok := count(); ok {
		k.check(n == before+1, "performed %d time(s)", n-before)
	}
	k.end()

	k = c.begin("the same approval again, in a row and at once: never performed twice", cc.rows("P60 P67 P89 P90 P96", "M60 M67 M89 M90 M96")...)
	var wg sync.WaitGroup
	answers := make([]callAnswer, c.cfg.Concurrency)
	for i := range answers {
		wg.Go(func() { answers[i] = cc.send(ctx, c.a.session(false), declares, userApproval(op), "") })
	}
	wg.Wait()
	answers = append(answers, cc.send(ctx, a, declares, userApproval(op), ""))
	for _, r := range answers {
		busy := r.status == http.StatusServiceUnavailable && r.header.Get("Retry-After") != ""
		k.check(r.performed() || busy, "a retry: %s, want the first answer, or 503 with Retry-After", r)
		if cc.via == "api" && r.performed() && perf.performed() {
			k.check(r.status == perf.status, "P90: a retry got %d, the first %d", r.status, perf.status)
		}
	}
	if n, ok := count(); ok {
		k.check(n == before+1, "performed %d time(s) in all", n-before)
	} else if !counting {
		k.note("Config.Performed is not set: the count of performances is judged from the answers")
	}
	k.end()

	k = c.begin("once performed, the call without an approval is a new action", cc.rows("P97", "M97")...)
	ans = cc.send(ctx, a, declares, nil, "")
	if got, has := ans.operation(); has {
		k.check(got.ID != op.ID, "P97: the performed operation_id %s again", got.ID)
	} else {
		k.note("the site answered %s: the action can't be done again", ans)
	}
	k.end()
	c.no5xx()
}

// callDiscovery reads poppy.json for the API or MCP mode, and the call.
func (c *checker) callDiscovery(ctx context.Context) (*callCase, bool) {
	via := c.cfg.Via
	k := c.begin("discovery: poppy.json lists operations v3 and the "+map[string]string{"api": "API (api.base_url)", "mcp": "MCP server (mcp.url)"}[via], map[string][]string{"api": {"P01"}, "mcp": {"M01"}}[via]...)
	defer k.end()
	b := c.newBrowser()
	p := b.get(ctx, c.origin+"/.well-known/poppy.json")
	if !k.check(p.err == nil && p.status == http.StatusOK, "GET /.well-known/poppy.json: %s", p) {
		return nil, false
	}
	var doc struct {
		Extensions struct {
			Operations []struct {
				Version string `json:"version"`
			} `json:"operations"`
		} `json:"extensions"`
		API struct {
			BaseURL string `json:"base_url"`
		} `json:"api"`
		MCP struct {
			URL string `json:"url"`
		} `json:"mcp"`
	}
	if !k.check(json.Unmarshal(p.body, &doc) == nil, "poppy.json is not a JSON object") {
		return nil, false
	}
	v3 := false
	for _, e := range doc.Extensions.Operations {
		if major, _, _ := strings.Cut(e.Version, "."); major == "3" {
			v3 = true
		}
	}
	k.check(v3, "extensions.operations has no entry with version \"3\"")
	cc := &callCase{c: c, via: via}
	if via == "api" {
		k.check(doc.API.BaseURL != "", "poppy.json lists no api.base_url (the kit's member, webkit/RULES.md choice 9)")
		act, err := parseAction(c.cfg.Action)
		if err != nil || act.json == nil {
			k.fail("Action: the API mode needs `METHOD /path {json}`")
			return nil, false
		}
		cc.method, cc.path, cc.body = act.method, act.url, act.json
	} else {
		if !k.check(doc.MCP.URL != "", "poppy.json lists no mcp.url (the kit's member, webkit/RULES.md choice 9)") {
			return nil, false
		}
		cc.mcpURL = doc.MCP.URL
		tool, args, _ := strings.Cut(strings.TrimSpace(c.cfg.Action), " ")
		if tool == "" || !json.Valid([]byte(strings.TrimSpace(args))) {
			k.fail("Action: the MCP mode needs `tool {json arguments}`")
			return nil, false
		}
		cc.tool, cc.args = tool, json.RawMessage(strings.TrimSpace(args))
	}
	return cc, v3 && len(k.fails) == 0
}

// callSignedIn: an account's operation, returned to a signed-in Session,
// and its approval sent signed out (P39–P41, P47; M40–M42, M49).
func (c *checker) callSignedIn(ctx context.Context, cc *callCase, signedOut callAnswer, count func() (int, bool), before int) {
	k := c.begin("an account's operation: the same answer signed in, the sign-in challenge signed out", cc.rows("P39 P40 P41 P47", "M40 M41 M42 M49")...)
	defer k.end()
	in := c.a.session(true)
	ans := cc.send(ctx, in, declares, nil, "")
	op, has := ans.operation()
	if ans.err != nil && strings.Contains(ans.err.Error(), "token") {
		k.skip("no access token: %v", ans.err)
		return
	}
	if !k.check(has && ans.status == signedOut.status, "P47 M49: signed in: %s, signed out: %s; want the same answer with an operation", ans, signedOut) {
		return
	}
	out := cc.send(ctx, c.a.session(false), declares, userApproval(op), "")
	k.check(out.status == http.StatusUnauthorized && strings.Contains(out.header.Get("WWW-Authenticate"), "sign_in_required"), "P41 M42: the account's approval sent signed out: %s, want 401 with the sign-in challenge", out)
	if n, ok := count(); ok {
		k.check(n == before, "performed %d time(s)", n-before)
	}
}
