// Package webkittest is an httptest-style harness for a website's own tests
// of its gated handlers: it plays the Personal Agent and the agent's
// browser in-process, with no network and no real browser, so that a test
// can issue an operation, look it up, approve it, repeat the request,
// check that the action was performed once, meet a decline, signed in or
// signed out.
//
// The website under test is an ordinary http.Handler with its Gate, the
// browser join (endpoint.Mount) and the operations endpoint
// mounted as in production. The harness talks to it over HTTP, as a real agent and its
// browser do, through an in-memory transport: requests go straight to the
// handler. Its agents are real ones: each has its own signing key, a
// delegation, Session JWTs and browser join assertions, and serves its
// metadata document and key set in-process to the Resolver the harness
// gives the website (Site.Resolver), so the website's real verification
// runs.
//
//	site := webkittest.New("https://shop.example")
//	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: kit, Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
//	site.Handler = m.Handler(mux)
//
//	s := site.NewAgent().Session("usr_1")
//	b, err := s.Join()                   // a browser joined to the Session
//	res := b.PostForm("/orders/7/exchange", url.Values{"size": {"L"}})
//	s.Approve(res.Ref)                   // look up, then approve as the user
//	res.Continue()                       // press the waiting page's Continue: the handler runs once
//
// Response.Continue presses the waiting page's real Continue control, as a
// browser does: it reads the page's form (or link) and submits its method,
// action and fields, after checking that they make the original request
// again, so that a Continue which lost the request's fields (a CSRF
// library or another middleware read the body before the Gate) fails the
// test instead of passing it. Like a browser's own form submission it
// sends the cookies and the form's fields, never Browser.Header: a site
// whose CSRF token is only in a header fails here as it does in a
// browser. A page script's JSON 403 has no page: the script repeats its
// request itself (opsgate.fetch), which Browser.Again does. An htmx
// request is Browser.Header with HX-Request: true: its answer is the
// waiting card, which the page's script (/_opsgate/card.js) repeats with
// the page's headers, as Browser.Again does (Example_htmx).
//
// The Mount verifies with the harness's agents through Resolver:
// site.Resolver() and AccessTokens: site.AccessTokens(). A website that
// builds its own identity.Resolver gives it site.Resolver().HTTPClient,
// which reaches the harness's agents and nothing else.
//
// Every answer is a *Response: the site's to a browser (Ref, Continue)
// or the operations endpoint's to the agent (Error, Operation, Status,
// Decline). Check its Err first.
//
// The harness lives under webkit because it needs only the kit's protocol
// vocabulary and agent identity: it reaches the operations endpoint over
// HTTP, so it never imports package endpoint, and imports stay one-way.
//
// Failures of the harness itself (a key that cannot sign) panic, as
// httptest.NewServer does; everything the website answers is returned for
// the test to check.
package webkittest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/apigate"
	"github.com/opsgate/opsgate/internal/continueform"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Site is the website under test, as the harness's agents and browsers
// reach it.
type Site struct {
	// Origin is the website's origin, the aud of every Session JWT, such as
	// "https://shop.example". Use https: the kit's join cookie is Secure
	// unless the site's CookieSessions is Insecure, and a browser sends a
	// Secure cookie over https only.
	Origin string
	// Handler serves the whole site. Set it before the first request.
	Handler http.Handler
	// Clock is the time of the agents' tokens and of the verifiers the
	// harness makes; nil is time.Now. Set it before calling Resolver,
	// AccessTokens or NewAgent, and give the site's Kit the same clock.
	Clock func() time.Time
	// IssueAccessToken issues the access token of a signed-in Session: by
	// default an RFC 9068 token from the harness's own issuer, which
	// AccessTokens verifies. A site with its own authorization server sets
	// its own.
	IssueAccessToken func(clientID, account string) (string, error)

	issuerKey crypto.Signer
	issuerKID string

	mu       sync.Mutex
	agents   map[string]*Agent // by host of the client_id
	resolver *identity.Resolver
}

// New returns a Site for origin ("https://shop.example"). Set Handler
// before sending anything.
func New(origin string) *Site {
	origin = strings.TrimRight(origin, "/")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("webkittest: issuer key: %v", err))
	}
	s := &Site{
		Origin:    origin,
		issuerKey: key,
		issuerKID: "webkittest",
		agents:    map[string]*Agent{},
	}
	s.IssueAccessToken = s.issueAccessToken
	return s
}

// The paths a Mount serves the browser join and the operations endpoint
// at, on Origin.
func (s *Site) joinURL() string     { return s.Origin + "/poppy/join" }
func (s *Site) endpointURL() string { return s.Origin + "/poppy/operations" }

// issueAccessToken issues the access token of a signed-in Session: an RFC
// 9068 token from the harness's own issuer, which AccessTokens verifies.
func (s *Site) issueAccessToken(clientID, account string) (string, error) {
	return agentside.IssueAccessTokenAt(s.issuerKey, s.issuerKID, s.Origin, clientID, account, s.now(), time.Hour)
}

func (s *Site) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// Resolver is the agent-identity resolver for the site's endpoint and
// join: it fetches the harness's agents' metadata and keys in-process.
// Their client_ids are https URLs on hosts under .webkittest.invalid, so
// no address check is relaxed (the Resolver's AllowLocal stays off). The
// same Resolver is returned on every call, so its cache is shared. Its
// HTTPClient reaches the harness's agents and nothing else, for a site
// that builds its own Resolver.
func (s *Site) Resolver() *identity.Resolver {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resolver == nil {
		// A RoundTripper that is not an *http.Transport is used as it is:
		// the Resolver's hook for a transport that does its own checks.
		// This one reaches only the harness's agents.
		s.resolver = &identity.Resolver{HTTPClient: &http.Client{Transport: agentTransport{s}}, Clock: s.Clock}
	}
	return s.resolver
}

// AccessTokens verifies the access tokens the default IssueAccessToken issues
// issues: give it to the site's endpoint and join.
func (s *Site) AccessTokens() *identity.JWTAccessTokens {
	return &identity.JWTAccessTokens{Issuer: s.Origin, Keys: map[string]crypto.PublicKey{s.issuerKID: s.issuerKey.Public()}, Clock: s.Clock}
}

// Browser is an ordinary browser, joined to no Session: the Gate lets its
// requests through.
func (s *Site) Browser() *Browser {
	jar, _ := cookiejar.New(nil)
	return &Browser{site: s, client: &http.Client{
		Jar:       jar,
		Transport: siteTransport{s},
		// Redirects are not followed: the test sees each answer (a 303
		// after the join or an action) and asks for the next page itself.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// NewAgent makes a Personal Agent with its own ES256 key, at client_id
// https://agent-<random>.webkittest.invalid/client.
func (s *Site) NewAgent() *Agent {
	host := "agent-" + strings.ToLower(rand.Text()[:10]) + ".webkittest.invalid"
	keys, err := agentside.NewAgentKeys("https://"+host+"/client", "ES256")
	if err != nil {
		panic(fmt.Sprintf("webkittest: agent key: %v", err))
	}
	keys.Clock = s.Clock
	a := &Agent{site: s, host: host, keys: keys}
	s.mu.Lock()
	s.agents[host] = a
	s.mu.Unlock()
	return a
}

// Agent is a Personal Agent, with its own long-term key.
type Agent struct {
	keys *agentside.AgentKeys

	site *Site
	host string
	mu   sync.Mutex
	dlg  *agentside.Delegation
}

// ClientID is the agent's client_id.
func (a *Agent) ClientID() string { return a.keys.ClientID }

func (a *Agent) delegation() *agentside.Delegation {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dlg == nil || !a.site.now().Add(time.Minute).Before(a.dlg.ExpiresAt) {
		d, err := a.keys.Delegate(time.Hour)
		if err != nil {
			panic(fmt.Sprintf("webkittest: delegation: %v", err))
		}
		a.dlg = d
	}
	return a.dlg
}

// Session starts a signed-out Session for the pairwise User ID user, with
// a new random sid.
func (a *Agent) Session(user string) *Session {
	return &Session{agent: a, SID: "ses_" + rand.Text()[:16], user: user}
}

// SignedInSession starts a Session for user signed in to account: it
// carries an access token from the harness's own issuer.
func (a *Agent) SignedInSession(user, account string) *Session {
	s := a.Session(user)
	tok, err := a.site.IssueAccessToken(a.ClientID(), account)
	if err != nil {
		panic(fmt.Sprintf("webkittest: access token: %v", err))
	}
	s.accessToken = tok
	return s
}

// Session is one of an agent's Sessions, signed in (an access token goes
// with its requests) or out.
type Session struct {
	// SID is the Session's sid, which the site's Poppy-Operation names.
	SID string

	agent       *Agent
	user        string
	accessToken string // a signed-in Session's
}

// declared is what a join declares by default: the operations extension,
// version 3.
const declared = `"operations";v="3"`

// Join joins a new browser to the Session through the site's join,
// declaring the operations extension (version 3). It returns an error when
// the site refuses the join.
func (s *Session) Join() (*Browser, error) { return s.joinDeclaring(declared) }

// joinDeclaring joins a new browser declaring extensions (a
// Poppy-Extensions value; "" declares none), to test what the site does
// for a Session without the operations extension (W11, W12).
func (s *Session) joinDeclaring(extensions string) (*Browser, error) {
	site := s.agent.site
	assertion, err := s.agent.delegation().BrowserAssertion(agentside.BrowserClaims{
		SessionClaims: agentside.SessionClaims{Audience: site.joinURL(), SID: s.SID, User: s.user, AccessToken: s.accessToken, Lifetime: 30 * time.Second},
		ReturnTo:      site.Origin + "/",
		Extensions:    extensions,
	})
	if err != nil {
		panic(fmt.Sprintf("webkittest: join assertion: %v", err))
	}
	form := url.Values{"assertion": {assertion}}
	if s.accessToken != "" {
		form.Set("access_token", s.accessToken)
	}
	b := site.Browser()
	b.session = s
	// Posted from the agent's own page, so with no same-origin headers.
	res := b.send(&request{method: http.MethodPost, url: site.joinURL(), contentType: "application/x-www-form-urlencoded", accept: "text/html", body: []byte(form.Encode())})
	if res.Err != nil {
		return nil, res.Err
	}
	if res.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("webkittest: the join answered %d: %s", res.StatusCode, bytes.TrimSpace(res.Body))
	}
	b.last = nil // the join is not a request to repeat
	return b, nil
}

// Browser is a browser with its own cookies: ordinary (Site.Browser) or
// joined to a Session (Session.Join).
type Browser struct {
	// Header is added to every request the browser sends for a page's
	// script (PostForm, Post, PostJSON, Get, Again): what a real page's
	// request carries and the site checks, such as a CSRF token header, or
	// HX-Request: true for an htmx request (the Gate then answers with the
	// waiting card, and Again is htmx's repeat). Set it before sending. Its
	// fields replace those the browser sets itself: on a form submission
	// or a script's request, Origin (the site's) and Sec-Fetch-Site:
	// same-origin, as a page on the site sends them. Response.Continue, a
	// browser's own form submission, never sends it.
	Header http.Header

	session *Session // the Session it is joined to; nil for an ordinary browser
	site    *Site
	client  *http.Client
	mu      sync.Mutex
	last    *request
}

type request struct {
	method, url, contentType, accept string
	body                             []byte
	header                           http.Header // set by the browser; Browser.Header replaces them
	// own is the browser's own submission of a page's form or link
	// (Continue): it carries the cookies and the form's fields, never
	// Browser.Header, which only a page's script adds.
	own bool
}

// Response is the site's answer: to a browser's request (Browser's
// methods, Continue), or the operations endpoint's to the agent
// (Session's methods).
type Response struct {
	StatusCode int
	Header     http.Header
	Body       []byte
	// Err is set when the request could not be sent, or the handler
	// panicked, or Continue could not press the page's Continue. Check it
	// first.
	Err error

	// Ref, in a browser's answer, is the ref of a Poppy-Operation naming
	// the browser's own Session's sid (an agent ignores any other, A10);
	// "" when there is none.
	Ref string

	// Error, in the agent's answer, is the body's "error":
	// "approval_required", "approval_declined", "invalid_request",
	// "sign_in_required", …; "" for none.
	Error string
	// Operation is the operation of an approval_required answer.
	Operation *store.Operation
	// OperationStatus is the status answer's "status" (§6 "Looking up an
	// approved operation"): "approved", "performing" or "performed"; the
	// HTTP status is StatusCode.
	OperationStatus string
	// Decline is the body of an approval_declined answer.
	Decline *webkit.Decline

	url     string // the request's, against which the page's links and forms resolve
	browser *Browser
	req     *request
}

// sameOrigin is what a browser adds to a request a page of the site makes
// (Fetch Metadata and Origin): mode navigate for a form, cors for a
// script.
func (b *Browser) sameOrigin(mode string) http.Header {
	h := http.Header{"Origin": {b.site.Origin}, "Sec-Fetch-Site": {"same-origin"}, "Sec-Fetch-Mode": {mode}}
	if mode == "navigate" {
		h.Set("Sec-Fetch-Dest", "document")
	} else {
		h.Set("Sec-Fetch-Dest", "empty")
	}
	return h
}

// PostForm posts form to path on the site, as a page's form does (Accept:
// text/html, the same-origin headers).
func (b *Browser) PostForm(path string, form url.Values) *Response {
	return b.send(&request{method: http.MethodPost, url: b.site.Origin + path, contentType: "application/x-www-form-urlencoded", accept: "text/html", body: []byte(form.Encode()), header: b.sameOrigin("navigate")})
}

// Post posts body, of contentType, to path, as a page's form does: for a
// form that is not application/x-www-form-urlencoded, such as
// multipart/form-data.
func (b *Browser) Post(path, contentType string, body []byte) *Response {
	return b.send(&request{method: http.MethodPost, url: b.site.Origin + path, contentType: contentType, accept: "text/html", body: body, header: b.sameOrigin("navigate")})
}

// PostJSON posts the JSON body to path, as a page's script does (Accept:
// application/json, the same-origin headers).
func (b *Browser) PostJSON(path, body string) *Response {
	return b.send(&request{method: http.MethodPost, url: b.site.Origin + path, contentType: "application/json", accept: "application/json", body: []byte(body), header: b.sameOrigin("cors")})
}

// Get loads path, as a page.
func (b *Browser) Get(path string) *Response {
	return b.send(&request{method: http.MethodGet, url: b.site.Origin + path, accept: "text/html"})
}

// Again sends the browser's last request again, byte for byte: what a
// page script does with its request's JSON 403 once approved
// (opsgate.fetch), a reload, a double-click, a person going back to send
// a form again. It is not the waiting page's Continue: a browser pressing
// Continue sends what the page's control says, which Response.Continue
// does (and Again can't tell when the two differ).
func (b *Browser) Again() *Response {
	b.mu.Lock()
	last := b.last
	b.mu.Unlock()
	if last == nil {
		return &Response{Err: errors.New("webkittest: no request to repeat")}
	}
	return b.send(last)
}

// AgainConcurrently makes the last request again n times at once, as
// several tabs or servers would, and returns the answers in no order.
func (b *Browser) AgainConcurrently(n int) []*Response {
	out := make([]*Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = b.Again() })
	}
	wg.Wait()
	return out
}

// continueControl reads the waiting page's Continue control. It fails
// when the answer is not a waiting page (403, text/html, with
// Poppy-Operation: a script's JSON 403 is not one), and as
// continueform.Parse does.
func (r *Response) continueControl() (*continueform.Control, error) {
	switch {
	case r == nil || r.browser == nil:
		return nil, fmt.Errorf("%w: no page was loaded", errNotWaitingPage)
	case r.Err != nil:
		return nil, fmt.Errorf("%w: the request failed: %w", errNotWaitingPage, r.Err)
	}
	ct := r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case r.StatusCode == http.StatusForbidden && len(r.Header.Values("Poppy-Operation")) > 0 && mt == "application/json":
		return nil, fmt.Errorf("%w: the answer is a script's JSON 403, which has no Continue: a page script repeats its request (opsgate.fetch), as Browser.Again does", errNotWaitingPage)
	case r.StatusCode == http.StatusForbidden && len(r.Header.Values("Poppy-Operation")) > 0 &&
		(mt == "text/vnd.turbo-stream.html" || bytes.Contains(r.Body, []byte(" data-opsgate-via="))):
		return nil, fmt.Errorf("%w: the answer is the waiting card of an htmx or Turbo page (the request carried HX-Request, or asked for a Turbo Stream), "+
			"whose Continue the page's script (/_opsgate/card.js) or the framework sends with the page's headers: repeat the request with Browser.Again, as card.js does", errNotWaitingPage)
	case r.StatusCode != http.StatusForbidden || len(r.Header.Values("Poppy-Operation")) == 0 || mt != "text/html":
		op := "no Poppy-Operation"
		if len(r.Header.Values("Poppy-Operation")) > 0 {
			op = "Poppy-Operation"
		}
		why := ""
		if mt == "text/plain" { // such as a CSRF library's refusal; a page may carry a token, so is not shown
			why = fmt.Sprintf(": %.200q", bytes.TrimSpace(r.Body))
		}
		return nil, fmt.Errorf("%w: %s %s answered %d %q with %s, not 403 text/html with Poppy-Operation%s", errNotWaitingPage, r.req.method, r.url, r.StatusCode, ct, op, why)
	}
	return continueform.Parse(r.url, r.Body)
}

// Continue presses the waiting page's Continue, as the person (or the
// page's auto-continue) does once the agent has approved: it submits the
// page's Continue form, its method, action and fields in document order
// encoded per its enctype, or follows its link, with the browser's
// cookies and the headers a browser sends itself (Referer: the page). It
// never sends Browser.Header: a browser's own form submission can't send
// a header a page's script adds, such as a CSRF token header, so a site
// whose token is only in a header fails here as it does in a browser
// (the kit's page then says the request can't be repeated from it:
// ErrNotRepeatable).
//
// An htmx or Turbo request's answer is the waiting card of the page, not
// a page: the page's script (/_opsgate/card.js) repeats it with the
// page's headers, as Browser.Again does, and Continue returns an error
// saying so.
//
// It first checks that the control makes the request that got the page
// again: the same method and URL, and for a POST the same fields encoded
// the same way (a field named like a CSRF token may get a fresh value).
// When it does not, as when a middleware read the body before the Gate
// and the form lost its fields, nothing is sent and Err says which fields
// are missing, added or changed (never a token's value). Err is also set
// when r is not a waiting page, or the page has no Continue, or says its
// request can't be repeated (ErrNotRepeatable); StatusCode is then 0.
// Check Err.
func (r *Response) Continue() *Response {
	c, err := r.continueControl()
	if err != nil {
		return &Response{Err: fmt.Errorf("webkittest: Continue: %w", err)}
	}
	if err := c.Repeats(r.req.method, r.req.url, r.req.contentType, r.req.body); err != nil {
		return &Response{Err: fmt.Errorf("webkittest: Continue: %w", err)}
	}
	ct, body := c.Body()
	h := r.browser.sameOrigin("navigate")
	if c.Method == http.MethodGet {
		h.Del("Origin") // a navigation's GET carries none
	}
	h.Set("Referer", r.url)
	return r.browser.send(&request{method: c.Method, url: c.URL, contentType: ct, accept: "text/html", body: body, header: h, own: true})
}

// ContinueConcurrently presses the page's Continue n times at once, as
// several tabs showing the same waiting page would, and returns the
// answers in no order.
func (r *Response) ContinueConcurrently(n int) []*Response {
	out := make([]*Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = r.Continue() })
	}
	wg.Wait()
	return out
}

func (b *Browser) send(r *request) *Response {
	b.mu.Lock()
	b.last = r
	b.mu.Unlock()
	req, err := http.NewRequest(r.method, r.url, bytes.NewReader(r.body))
	if err != nil {
		return &Response{Err: err, url: r.url, browser: b, req: r}
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if !r.own {
		for k, v := range b.Header {
			req.Header[k] = v
		}
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	req.Header.Set("Accept", r.accept)
	res, err := b.client.Do(req)
	if err != nil {
		return &Response{Err: err, url: r.url, browser: b, req: r}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	out := &Response{StatusCode: res.StatusCode, Header: res.Header, Body: raw, Err: err, url: r.url, browser: b, req: r}
	if b.session != nil && len(res.Header.Values("Poppy-Operation")) > 0 {
		if sid, ref, err := headers.ParseOperation(res.Header.Values("Poppy-Operation")); err == nil && sid == b.session.SID {
			out.Ref = ref
		}
	}
	return out
}

// Lookup sends the ref to the endpoint with no approval (§6 "Looking up").
func (s *Session) Lookup(ref string) *Response { return s.send(ref, "") }

// Approve looks the ref up and approves the revision it returns as the
// user: the whole of what an agent does once its user says yes. It returns
// the lookup's answer when that is not approval_required (already
// approved, performed, refused), else the approval's answer.
func (s *Session) Approve(ref string) *Response { return s.ApproveAs(ref, store.ApproverUser) }

// ApproveAs is Approve with the approver given: store.ApproverAgent for
// an approval the agent gives under a standing instruction, which a site
// may decline.
func (s *Session) ApproveAs(ref string, approver store.Approver) *Response {
	look := s.Lookup(ref)
	if look.Err != nil || look.Operation == nil {
		return look
	}
	a := store.Approval{OperationID: look.Operation.ID, Revision: look.Operation.Revision, Approver: approver, ApprovedAt: s.agent.site.now()}
	if approver == store.ApproverUser {
		a.InputType = "tap"
	}
	return s.Send(ref, a)
}

// Send sends the ref with the approval a in Poppy-Approval, as given: to
// test what the site answers to an approval of another revision, or one
// the agent altered.
func (s *Session) Send(ref string, a store.Approval) *Response {
	h, err := headers.FormatApproval(a)
	if err != nil {
		return &Response{Err: err}
	}
	return s.send(ref, h)
}

func (s *Session) send(ref, approval string) *Response {
	site := s.agent.site
	jwt := s.sessionJWT()
	body, _ := json.Marshal(map[string]string{"ref": ref})
	req, err := http.NewRequest(http.MethodPost, site.endpointURL(), bytes.NewReader(body))
	if err != nil {
		return &Response{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headers.Session, jwt)
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, declared) // A01
	if s.accessToken != "" {
		req.Header.Set("Authorization", "Bearer "+s.accessToken)
	}
	if approval != "" {
		req.Header.Set(headers.Approval, approval)
	}
	return s.do(req)
}

// do sends the agent's own request to the site and reads its JSON answer.
func (s *Session) do(req *http.Request) *Response {
	res, err := (&http.Client{Transport: siteTransport{s.agent.site}}).Do(req)
	if err != nil {
		return &Response{Err: err}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	ans := &Response{StatusCode: res.StatusCode, Header: res.Header, Body: raw, Err: err, url: req.URL.String()}
	var v struct {
		Error     string           `json:"error"`
		Operation *store.Operation `json:"operation"`
		Status    string           `json:"status"`
		// An MCP tool call's answer: the operation, or the decline, is in
		// its result's structuredContent (§4, §6 "MCP").
		Result *struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
	}
	if json.Unmarshal(raw, &v) == nil && v.Result != nil {
		if raw = v.Result.StructuredContent; json.Unmarshal(raw, &v) != nil {
			raw = nil
		}
	}
	if raw != nil && json.Unmarshal(raw, &v) == nil {
		ans.Error, ans.Operation, ans.OperationStatus = v.Error, v.Operation, v.Status
		if v.Error == "approval_declined" {
			var d webkit.Decline
			if json.Unmarshal(raw, &d) == nil {
				ans.Decline = &d
			}
		}
	}
	return ans
}

// Call sends req to the site as an API call of the Session (§4, §6
// "APIs"): the request carries the Session itself, a joined browser's
// cookie plays no part (RULES.md choice 7). The harness adds what the
// agent adds to each of its API requests, unless req sets it already: a
// new Session JWT in Poppy-Session (single-use), Poppy-Version: 1.0,
// Poppy-Extensions declaring operations v3, and a signed-in Session's
// access token (Authorization: Bearer); and approval, when not nil, in
// Poppy-Approval (§6 "APIs": the same request again, with the approval).
//
// A req whose body is an MCP tools/call (a JSON-RPC request to the site's
// MCP server over Streamable HTTP, RULES.md choice 8) is sent as that
// HTTP request of an MCP session: approval then goes in params._meta
// under personalagentprotocol.org/approval (§6 "MCP"), and the answer's
// Operation, Error and Decline are read from the tool result's
// structuredContent (M46, M81); StatusCode is the HTTP status (503 while
// the operation is performing, M96).
// A path in req.URL is the site's. A header req sets is sent as it is,
// and one it sets to no values (req.Header["Poppy-Extensions"] = nil) is
// not sent: to test what the site answers a request without it.
//
// The answer's Error, Operation, OperationStatus and Decline are read
// from its JSON body, as the endpoint's are: approval_required with the
// operation (P44, P45), approval_declined with its members (P81), the
// status of a performing operation (503, P96).
func (s *Session) Call(req *http.Request, approval *store.Approval) *Response {
	site := s.agent.site
	if req.URL.Host == "" {
		u, err := url.Parse(site.Origin + req.URL.RequestURI())
		if err != nil {
			return &Response{Err: err}
		}
		req.URL, req.Host = u, u.Host
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	set := func(name, value string) {
		if _, ok := req.Header[name]; !ok {
			req.Header.Set(name, value)
		}
	}
	set(headers.Session, s.sessionJWT())
	set(headers.Version, "1.0")
	set(headers.Extensions, declared)
	if s.accessToken != "" {
		set("Authorization", "Bearer "+s.accessToken)
	}
	body, isMCP, err := toolCall(req, approval)
	switch {
	case err != nil:
		return &Response{Err: err}
	case isMCP:
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		set("Content-Type", "application/json")
		set("Accept", "application/json, text/event-stream")
	case approval != nil:
		h, err := headers.FormatApproval(*approval)
		if err != nil {
			return &Response{Err: err}
		}
		req.Header.Set(headers.Approval, h)
	}
	for name, v := range req.Header {
		if len(v) == 0 {
			delete(req.Header, name)
		}
	}
	return s.do(req)
}

// toolCall reads req's body: when it is an MCP tools/call (a JSON-RPC
// request), it returns the body with approval, when not nil, as a JSON
// object in params._meta under personalagentprotocol.org/approval (§6
// "MCP"), and true.
func toolCall(req *http.Request, approval *store.Approval) ([]byte, bool, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, false, nil
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, false, err
	}
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	var rpc map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&rpc) != nil || rpc["jsonrpc"] != "2.0" || rpc["method"] != "tools/call" {
		return body, false, nil
	}
	if approval == nil {
		return body, true, nil
	}
	params, _ := rpc["params"].(map[string]any)
	if params == nil {
		params = map[string]any{}
		rpc["params"] = params
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		params["_meta"] = meta
	}
	a := map[string]any{"operation_id": approval.OperationID, "revision": approval.Revision, "approver": string(approval.Approver)}
	if !approval.ApprovedAt.IsZero() {
		a["approved_at"] = approval.ApprovedAt.Unix()
	}
	if approval.InputType != "" && approval.Approver == store.ApproverUser {
		a["input_type"] = approval.InputType
	}
	if approval.Reference != "" {
		a["reference"] = approval.Reference
	}
	meta[apigate.MetaKey] = a
	body, err = json.Marshal(rpc)
	return body, true, err
}

// sessionJWT signs a new Session JWT for one request (RULES.md choice 1).
func (s *Session) sessionJWT() string {
	site := s.agent.site
	jwt, err := s.agent.delegation().SessionJWT(agentside.SessionClaims{Audience: site.Origin, SID: s.SID, User: s.user, AccessToken: s.accessToken})
	if err != nil {
		panic(fmt.Sprintf("webkittest: Session JWT: %v", err))
	}
	return jwt
}

// ErrNotRepeatable is Continue's error, for errors.Is, when the waiting
// page says its request can't be repeated from the page (a form with
// files, a script's request): the person goes back and sends it again.
var ErrNotRepeatable = continueform.ErrNotRepeatable

// errNotWaitingPage is Continue's error when the answer is not a waiting
// page.
var errNotWaitingPage = errors.New("not a waiting page")

// siteTransport serves requests to the site's origin with its Handler,
// in-process.
type siteTransport struct{ site *Site }

func (t siteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(t.site.Origin)
	if err != nil || req.URL.Scheme != u.Scheme || req.URL.Host != u.Host {
		return nil, fmt.Errorf("webkittest: %s is not on the site %s", req.URL.Redacted(), t.site.Origin)
	}
	if t.site.Handler == nil {
		return nil, errors.New("webkittest: Site.Handler is not set")
	}
	return serve(t.site.Handler, req)
}

// serve runs h for req as a server would, and returns its response.
func serve(h http.Handler, req *http.Request) (res *http.Response, err error) {
	var body []byte
	if req.Body != nil {
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	// As a server receives it: TLS set for https (httptest does), the
	// browser's cookies and headers, a documentation address as the peer.
	sr := httptest.NewRequestWithContext(req.Context(), req.Method, req.URL.String(), bytes.NewReader(body))
	sr.Header = make(http.Header, len(req.Header))
	for k, v := range req.Header { // as a server reads them: canonical names
		ck := textproto.CanonicalMIMEHeaderKey(k)
		sr.Header[ck] = append(sr.Header[ck], v...)
	}
	sr.Host = req.URL.Host
	sr.RemoteAddr = "192.0.2.1:4711"
	w := httptest.NewRecorder()
	defer func() {
		// A server recovers a handler's panic and drops the connection: the
		// client sees an error, never a made-up status.
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("webkittest: the handler for %s %s panicked: %v", req.Method, req.URL.Path, p)
		}
	}()
	h.ServeHTTP(w, sr)
	res = w.Result()
	res.Request = req
	return res, nil
}

// agentTransport serves the harness's agents' metadata documents and key
// sets.
type agentTransport struct{ site *Site }

func (t agentTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.site.mu.Lock()
	a := t.site.agents[req.URL.Host]
	t.site.mu.Unlock()
	if a == nil || req.URL.Scheme != "https" {
		return nil, fmt.Errorf("webkittest: no agent at %s", req.URL.Redacted())
	}
	return serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/client":
			w.Write(a.keys.Metadata("https://"+a.host+"/jwks", "webkittest agent"))
		case "/jwks":
			w.Write(a.keys.JWKS())
		default:
			http.NotFound(w, r)
		}
	}), req)
}
