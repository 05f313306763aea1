// Package refagent is opsgate's reference Personal Agent: the agent's side
// of the Poppy `operations` extension v3 on a website (§4
// "Websites", §5, §6 "Websites", §7, §8.2), written to be read by agent
// developers and driven by the e2e tests.
//
// An Agent
//
//   - holds its keys (agentside.AgentKeys) and serves its own Client ID
//     Metadata Document and JWKS on a loopback HTTP server (the demo shop
//     accepts http agents on localhost and 127.0.0.1);
//   - reads the Company's /.well-known/poppy.json and uses the extension
//     only when it lists operations version 3 (A03, A04);
//   - joins its Chromium to a Session (webkit/RULES.md choice 3), declaring
//     `"operations";v="3"` (A02), signed out or signed in with an access
//     token for the demo account;
//   - takes a reference only from the Poppy-Operation header of a response
//     its own browser received, read from the browser's network events,
//     when the response comes from the Company's origin and its sid names a
//     Session the agent joined that browser to (A08–A12), never from page
//     content (A09);
//   - fetches the operation at the Company's endpoint with a fresh
//     Poppy-Session JWT per request (A13, A14), shows the Company's name,
//     the summary as plain text and the terms (A05, A07, A18, A19, A22),
//     checks them against the action its browser took and against each
//     other (A27, A28), and asks a Decider: the user at the terminal, a
//     standing instruction, or a test;
//   - sends the approval to the endpoint only (A31–A40), has the browser
//     repeat the request (A41): it presses the waiting page's Continue, or,
//     for a page script's request (fetch, htmx, Turbo), leaves the page's
//     script to repeat it and, when none does, presses the waiting card's
//     Continue in the page once; and on a new reference looks up the
//     earlier one first (A47–A51).
//
// It prints each step to Config.Log. It never prints the Poppy-Session
// header, an access token, a join assertion or a cookie.
package refagent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
)

// Config configures an Agent.
type Config struct {
	// Shop is the Company's origin, such as "http://localhost:8080". The
	// agent reads its poppy.json and sends references only to the endpoint
	// it lists (A12).
	Shop string
	// Browser is a chromedp context (a tab) the agent drives: its browser
	// is the one the agent joins to its Sessions. Required.
	Browser context.Context
	// Listen is where the agent serves its metadata document and JWKS,
	// and the pages its browser joins from; "" is 127.0.0.1:0 (any free
	// port on loopback).
	Listen string
	// AgentURL is the public URL the agent's metadata document and JWKS
	// are reached at, such as "https://agent.example/poppy": its client_id
	// is AgentURL + "/agent.json", its jwks_uri AgentURL + "/jwks.json".
	// A website off loopback accepts only an HTTPS client_id on a public
	// address (webkit/RULES.md "Agent identity"): point a tunnel or a
	// reverse proxy at Listen, or host the two documents yourself (they
	// are the same on every run with KeyFile). "" is http://<Listen>,
	// which only a website in local development (the demo on loopback)
	// accepts.
	AgentURL string
	// KeyFile keeps the agent's long-term key (PKCS #8 PEM, created when
	// missing): the same file is the same key and kid on every run, so a
	// website that cached the agent's key set needn't load it again. ""
	// makes a new key each run, which a website that has the old one
	// cached refuses until it loads the key set again (at most every
	// 30 s).
	KeyFile string
	// Name is the agent's client_name.
	Name string
	// User is the agent's pairwise User ID at this Company (sub): 1–255
	// visible ASCII characters; "" makes a random one. Every Session of the
	// agent uses it, so that any of them can approve an operation another
	// returned (§3 "Who can approve it"). The demo shop keeps one copy of
	// its data per agent (client_id) and User: an agent that keeps its
	// Listen address and User across runs sees its earlier runs' changes.
	User string
	// Account is the demo account a signed-in join asks a token for; ""
	// is "acct_demo".
	Account string
	// TokenPath is the demo shop's token endpoint, DEMO ONLY: a real
	// Company issues tokens after the person signs in. "" is /demo/token.
	TokenPath string
	// Clock is the time for iat, exp and approved_at; nil is time.Now.
	// Tests that move the shop's clock give the agent the same one.
	Clock func() time.Time
	// HTTPClient talks to the Company; nil is a client with a 15 s timeout.
	HTTPClient *http.Client
	// StepTimeout bounds each step that waits on the Company or the
	// browser: a page load, the join, a reference to arrive, a Continue.
	// 0 is 30 s. Approve as a whole is bounded by its context, or by
	// 5 minutes when the context has no deadline.
	StepTimeout time.Duration
	// Log gets every step, for a developer to follow; nil discards them.
	Log io.Writer
}

// Session is one of the agent's Poppy Sessions with the Company.
type Session struct {
	SID      string
	SignedIn bool // it sends the access token with its requests (A14)
}

// Discovery is what the agent read in the Company's poppy.json (§2).
type Discovery struct {
	Name       string // the Company's name, shown to the user (A18)
	Operations bool   // operations with version "3" is listed (A03, A04)
	Endpoint   string // the operations endpoint
	Join       string // web.browser_session_endpoint
	// APIBase is api.base_url and MCP mcp.url: where the Company's JSON
	// API and MCP server are (webkit/RULES.md choice 9); "" when it lists
	// none.
	APIBase, MCP string
}

// Agent is the reference Personal Agent. Its methods are safe for
// concurrent use, except that one tab must not be driven by two goroutines
// at once (a chromedp rule).
type Agent struct {
	cfg      Config
	origin   string
	clientID string
	base     string // where the website fetches the agent's documents: AgentURL, or local
	local    string // the agent's own server, http://127.0.0.1:port: its join pages
	keys     *agentside.AgentKeys
	ln       net.Listener
	srv      *http.Server
	disc     Discovery

	mu        sync.Mutex
	dlg       *agentside.Delegation
	token     string // the access token; a credential, never printed
	sessions  map[string]*Session
	joined    map[string]bool     // sids this browser was joined to (A10)
	joinPages map[string]joinPage // single-use join pages by handle
	tabs      []*tab              // every tab the agent watches
	refs      []*Reference        // accepted references, in arrival order
	ignored   []string            // why headers were ignored (A09–A11)
	responses []Response          // the browser's responses, for outcomes
	sent      []sentRequest       // the browser's requests, latest last (at most maxSent)
	approvals []*sentApproval     // approvals recorded by the endpoint (204)
	declined  map[string]bool     // operation_id|revision|approver of declined approvals (A42)
	cautious  map[string]string   // action → why a user must decide (A26, A43)
	refsUsed  map[string]bool     // approval references sent (A36, A37)
	seen      map[string]bool     // request IDs whose header was handled
	wake      chan struct{}       // closed and replaced when refs or responses change
}

type joinPage struct {
	action, assertion, token string
	expires                  time.Time
}

// ErrNotSupported: the Company does not list operations v3, so the agent
// uses its website without the extension and leaves approval to it (A03).
var ErrNotSupported = errors.New("refagent: the Company does not support operations v3")

// New starts the agent: its keys, its server, the Company's poppy.json and
// the watch on its browser's network events.
//
// An agent that acts only at the Company's API and MCP server
// (CallThrough) has no browser: Config.Browser nil.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Browser == nil {
		return start(ctx, cfg)
	}
	if chromedp.FromContext(cfg.Browser) == nil {
		return nil, errors.New("refagent: Config.Browser must be a chromedp context")
	}
	a, err := start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := a.watch(cfg.Browser, "tab 1"); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// start is New without the browser: the agent's keys, its server and the
// Company's poppy.json.
func start(ctx context.Context, cfg Config) (*Agent, error) {
	u, err := url.Parse(cfg.Shop)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("refagent: Shop must be an origin such as http://localhost:8080, got %q", cfg.Shop)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Name == "" {
		cfg.Name = "opsgate reference agent"
	}
	if cfg.User == "" {
		cfg.User = "usr_" + randomID(16)
	} else if err := CheckUser(cfg.User); err != nil {
		return nil, err
	}
	if cfg.Account == "" {
		cfg.Account = "acct_demo"
	}
	if cfg.TokenPath == "" {
		cfg.TokenPath = "/demo/token"
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 15 * time.Second}
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 30 * time.Second
	}
	a := &Agent{
		cfg:       cfg,
		origin:    u.Scheme + "://" + u.Host,
		sessions:  map[string]*Session{},
		joined:    map[string]bool{},
		joinPages: map[string]joinPage{},
		declined:  map[string]bool{},
		cautious:  map[string]string{},
		refsUsed:  map[string]bool{},
		seen:      map[string]bool{},
		wake:      make(chan struct{}),
	}

	// The agent's own server: its metadata document (its client_id URL)
	// and JWKS (webkit/RULES.md choice 1), and the join pages.
	a.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("refagent: listen: %w", err)
	}
	a.local = "http://" + a.ln.Addr().String()
	a.base = a.local
	if cfg.AgentURL != "" {
		u, err := url.Parse(cfg.AgentURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			a.ln.Close()
			return nil, fmt.Errorf("refagent: AgentURL must be a URL such as https://agent.example/poppy, got %q", cfg.AgentURL)
		}
		a.base = strings.TrimRight(cfg.AgentURL, "/")
	}
	a.clientID = a.base + "/agent.json"
	created := true
	if cfg.KeyFile != "" {
		a.keys, created, err = agentside.LoadAgentKeys(a.clientID, cfg.KeyFile)
	} else {
		a.keys, err = agentside.NewAgentKeys(a.clientID, "ES256")
	}
	if err != nil {
		a.ln.Close()
		return nil, err
	}
	a.keys.Clock = cfg.Clock
	a.srv = &http.Server{Handler: a.routes(), ReadHeaderTimeout: 5 * time.Second}
	go a.srv.Serve(a.ln)
	switch {
	case cfg.AgentURL != "":
		a.step("agent %q is %s: the website fetches it and %s/jwks.json there (this agent serves both at %s; point your tunnel or reverse proxy there, or host them)", cfg.Name, a.clientID, a.base, a.local)
	default:
		a.step("agent %q is %s (metadata and JWKS served on loopback: only a website in local development accepts it; -agent-url gives a public one)", cfg.Name, a.clientID)
	}
	switch {
	case cfg.KeyFile != "" && created:
		a.step("a new key (kid %s) kept in %s for the next runs", a.keys.Kid(), cfg.KeyFile)
	case cfg.KeyFile != "":
		a.step("the key of earlier runs (kid %s) from %s", a.keys.Kid(), cfg.KeyFile)
	}

	if err := a.discover(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// CheckUser reports whether user can be a pairwise User ID (a Session's
// sub): 1–255 bytes of visible ASCII, as websites check it.
func CheckUser(user string) error {
	if len(user) == 0 || len(user) > 255 {
		return fmt.Errorf("refagent: a User ID is 1–255 characters, got %d", len(user))
	}
	for i := 0; i < len(user); i++ {
		if c := user[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("refagent: a User ID is visible ASCII (letters, digits, punctuation; no space), got %q", user)
		}
	}
	return nil
}

// Close stops the agent's server. It leaves the browser to its owner.
func (a *Agent) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return a.srv.Shutdown(ctx)
}

// ClientID is the agent's client_id: the URL of its metadata document.
func (a *Agent) ClientID() string { return a.clientID }

// Metadata and JWKS are the agent's Client ID Metadata Document and key
// set, as it serves them at its client_id and jwks_uri: for a developer
// who hosts them (Config.AgentURL).
func (a *Agent) Metadata() []byte { return a.keys.Metadata(a.base+"/jwks.json", a.cfg.Name) }

// JWKS is the agent's key set (see Metadata).
func (a *Agent) JWKS() []byte { return a.keys.JWKS() }

// User is the agent's pairwise User ID at the Company (every Session's sub).
func (a *Agent) User() string { return a.cfg.User }

// Discovery is what the agent read in the Company's poppy.json.
func (a *Agent) Discovery() Discovery { return a.disc }

// Browser is the chromedp context of the agent's first tab.
func (a *Agent) Browser() context.Context { return a.cfg.Browser }

// Origin is the Company's origin.
func (a *Agent) Origin() string { return a.origin }

func (a *Agent) now() time.Time { return a.cfg.Clock() }

// step prints one step of the protocol for the developer.
func (a *Agent) step(format string, args ...any) {
	fmt.Fprintf(a.cfg.Log, "agent: "+format+"\n", args...)
}

func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /agent.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.Metadata())
	})
	mux.HandleFunc("GET /jwks.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.keys.JWKS())
	})
	mux.HandleFunc("GET /join/{handle}", a.serveJoinPage)
	return mux
}

// --- poppy.json (§2) ---

func (a *Agent) discover(ctx context.Context) error {
	u := a.origin + "/.well-known/poppy.json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	res, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("refagent: poppy.json: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("refagent: poppy.json: %s", res.Status)
	}
	var doc struct {
		Name       string `json:"name"`
		Extensions struct {
			Operations []struct {
				Version  string `json:"version"`
				Endpoint string `json:"endpoint"`
			} `json:"operations"`
		} `json:"extensions"`
		Web struct {
			BrowserSessionEndpoint string `json:"browser_session_endpoint"`
		} `json:"web"`
		API struct {
			BaseURL string `json:"base_url"`
		} `json:"api"`
		MCP struct {
			URL string `json:"url"`
		} `json:"mcp"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&doc); err != nil {
		return fmt.Errorf("refagent: poppy.json: %w", err)
	}
	a.disc = Discovery{Name: doc.Name, Join: doc.Web.BrowserSessionEndpoint, APIBase: doc.API.BaseURL, MCP: doc.MCP.URL}
	if a.disc.Name == "" {
		a.disc.Name = a.origin
	}
	for _, e := range doc.Extensions.Operations {
		// A04: only version "3" (major 3) is support for v3.
		if major, _, _ := strings.Cut(e.Version, "."); major == "3" && e.Endpoint != "" {
			a.disc.Operations, a.disc.Endpoint = true, e.Endpoint
			break
		}
	}
	if o := originOf(a.disc.Join); o != "" && o != a.origin {
		// The join's return_to is on a.origin: a website that calls itself
		// otherwise (localhost for 127.0.0.1) refuses it.
		a.step("WARNING: the website names its join on %s, and the agent was given %s: they are different origins, and the website will refuse a join that returns to %s; use %s", o, a.origin, a.origin, o)
	}
	if a.disc.Operations {
		a.step("%s lists operations v3: endpoint %s, browser join %s", u, a.disc.Endpoint, a.disc.Join)
	} else {
		// A03: use the website without the extension; the Company
		// handles approval itself.
		a.step("%s does not list operations v3: the agent will not use the extension (A03)", u)
	}
	return nil
}

// --- Sessions, tokens and signing (webkit/RULES.md choices 1–3) ---

// NewSession starts a Session of the agent with the Company, signed in or
// out, without joining a browser to it. Every Session shares the agent's
// User ID, so each can approve the others' signed-out operations (§3).
func (a *Agent) NewSession(ctx context.Context, signedIn bool) (*Session, error) {
	if signedIn {
		if _, err := a.accessToken(ctx); err != nil {
			return nil, err
		}
	}
	s := &Session{SID: "ses_" + randomID(16), SignedIn: signedIn}
	a.mu.Lock()
	a.sessions[s.SID] = s
	a.mu.Unlock()
	return s, nil
}

// accessToken gets (once) an access token for the demo account from the
// demo shop's token endpoint: DEMO ONLY, a real Company issues it after
// the person signs in.
func (a *Agent) accessToken(ctx context.Context) (string, error) {
	a.mu.Lock()
	tok := a.token
	a.mu.Unlock()
	if tok != "" {
		return tok, nil
	}
	form := url.Values{"client_id": {a.clientID}, "account": {a.cfg.Account}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.origin+a.cfg.TokenPath, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("refagent: demo token: %w", err)
	}
	defer res.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&body)
	if res.StatusCode != http.StatusOK || body.AccessToken == "" {
		return "", fmt.Errorf("refagent: demo token: %s %s", res.Status, body.Error)
	}
	a.mu.Lock()
	a.token = body.AccessToken
	a.mu.Unlock()
	a.step("signed in: got an access token for %s from %s (not shown: it is a credential)", a.cfg.Account, a.cfg.TokenPath)
	return body.AccessToken, nil
}

// delegation returns the current delegated key, renewing it when it has
// less than 5 minutes left (webkit/RULES.md choice 1: at most 24 h).
func (a *Agent) delegation() (*agentside.Delegation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dlg != nil && a.dlg.ExpiresAt.Sub(a.now()) > 5*time.Minute {
		return a.dlg, nil
	}
	d, err := a.keys.Delegate(time.Hour)
	if err != nil {
		return nil, err
	}
	d.Clock = a.cfg.Clock
	a.dlg = d
	return d, nil
}

// sessionHeader signs a fresh Poppy-Session JWT for one request (aud = the
// Company's origin; ath binds the access token when signed in).
func (a *Agent) sessionHeader(s *Session, token string) (string, error) {
	d, err := a.delegation()
	if err != nil {
		return "", err
	}
	return d.SessionJWT(agentside.SessionClaims{Audience: a.origin, SID: s.SID, User: a.cfg.User, AccessToken: token})
}

// --- The browser join (webkit/RULES.md choice 3) ---

// JoinOptions says how to join the browser.
type JoinOptions struct {
	// SignedIn joins with an access token for the demo account (W54).
	SignedIn bool
	// NoExtension leaves operations out of the join's declaration: the
	// Company then returns no operations to this browser (W11). Only tests
	// want this; the agent declares it whenever the Company supports it (A02).
	NoExtension bool
	// ReturnTo is the path on the shop the join lands on; "" is "/".
	ReturnTo string
}

// Join joins the agent's browser to a new Session: the agent serves a
// single-use page with the join form (assertion and, signed in,
// access_token: never in a URL), the browser submits it to the Company's
// browser_session_endpoint, which answers 303 to return_to.
func (a *Agent) Join(ctx context.Context, opts JoinOptions) (*Session, error) {
	if a.cfg.Browser == nil {
		return nil, errors.New("refagent: Join needs a browser (Config.Browser)")
	}
	s, form, decl, err := a.joinForm(ctx, opts)
	if err != nil {
		return nil, err
	}
	handle := randomID(20)
	a.mu.Lock()
	a.joinPages[handle] = joinPage{action: a.disc.Join, assertion: form.Get("assertion"), token: form.Get("access_token"), expires: time.Now().Add(time.Minute)}
	a.mu.Unlock()

	a.step("joining the browser to Session %s (signed in: %v, declaring %s) at %s", s.SID, s.SignedIn, decl, a.disc.Join)
	// The sid counts as joined to this browser from the moment the browser
	// posts the form (A10); a refused join leaves it unused.
	a.mu.Lock()
	a.joined[s.SID] = true
	a.mu.Unlock()
	jctx, cancel := context.WithTimeout(a.cfg.Browser, a.cfg.StepTimeout)
	defer cancel()
	if err := chromedp.Do(jctx, chromedp.Navigate(a.local+"/join/"+handle)); err != nil {
		return nil, fmt.Errorf("refagent: join page (within %s): %w", a.cfg.StepTimeout, err)
	}
	res, err := a.submitJoin(jctx, a.local+"/join/"+handle)
	if err != nil {
		return nil, err
	}
	if res.Status != http.StatusOK || !strings.HasPrefix(res.URL, a.origin+"/") {
		a.mu.Lock()
		delete(a.joined, s.SID)
		a.mu.Unlock()
		status, header := res.Status, http.Header{}
		for k, v := range res.Headers {
			// Chromium joins a repeated header's values with "\n".
			for _, line := range strings.Split(fmt.Sprint(v), "\n") {
				header.Add(k, line)
			}
		}
		// The website's own words: the text of the page the browser
		// shows (a text/plain or JSON answer is one <pre>).
		body, _ := chromedp.Run(jctx, chromedp.Evaluate[string](pageTextJS))
		err := a.joinRefusal(status, header, body, s.SignedIn)
		a.step("the join was refused (status %d)", status)
		if status == http.StatusUnauthorized {
			// A website remembers a delegation that failed and refuses it
			// again for 30 s without a second look: the next join signs
			// with a new one.
			a.mu.Lock()
			a.dlg = nil
			a.mu.Unlock()
		}
		return nil, err
	}
	a.step("browser joined to Session %s; it is at %s", s.SID, res.URL)
	return s, nil
}

// pageTextJS reads the text of the page the browser shows, bounded.
const pageTextJS = `(() => {
	const d = document, b = d.body;
	if (!b) return "";
	const pre = d.contentType !== "text/html" && b.querySelector("pre");
	return (pre || b).innerText.slice(0, 4096);
})()`

// joinForm starts a Session for a join and makes the join form's fields
// (webkit/RULES.md choice 3): the browser join assertion (aud = the
// Company's browser_session_endpoint) and, signed in, access_token (W54).
// decl is the declared extensions, for the log.
func (a *Agent) joinForm(ctx context.Context, opts JoinOptions) (s *Session, form url.Values, decl string, err error) {
	if a.disc.Join == "" {
		return nil, nil, "", errors.New("refagent: the Company lists no web.browser_session_endpoint")
	}
	s, err = a.NewSession(ctx, opts.SignedIn)
	if err != nil {
		return nil, nil, "", err
	}
	token := ""
	if s.SignedIn {
		token, _ = a.accessToken(ctx)
	}
	ext := ""
	if a.disc.Operations && !opts.NoExtension {
		ext = headers.FormatExtensions(map[string]string{"operations": "3"}) // A02
	}
	returnTo := a.origin + "/"
	if opts.ReturnTo != "" {
		returnTo = a.origin + opts.ReturnTo
	}
	d, err := a.delegation()
	if err != nil {
		return nil, nil, "", err
	}
	assertion, err := d.BrowserAssertion(agentside.BrowserClaims{
		SessionClaims: agentside.SessionClaims{Audience: a.disc.Join, SID: s.SID, User: a.cfg.User, AccessToken: token},
		ReturnTo:      returnTo,
		Extensions:    ext,
	})
	if err != nil {
		return nil, nil, "", err
	}
	form = url.Values{"assertion": {assertion}}
	if token != "" {
		form.Set("access_token", token)
	}
	decl = ext
	if decl == "" {
		decl = "nothing"
	}
	return s, form, decl, nil
}

var joinTemplate = template.Must(template.New("join").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Joining your agent's Session</title>
<meta name="referrer" content="no-referrer"></head>
<body style="font-family: system-ui, sans-serif; margin: 3rem;">
<h1>Joining your agent's Session…</h1>
<form id="join-form" method="post" action="{{.Action}}" enctype="application/x-www-form-urlencoded">
<input type="hidden" name="assertion" value="{{.Assertion}}">
{{if .Token}}<input type="hidden" name="access_token" value="{{.Token}}">{{end}}
<button id="join" type="submit">Continue to the shop</button>
</form></body></html>`))

// serveJoinPage serves a join form once. The page holds the assertion
// and token in its body, never in a URL (webkit/RULES.md choice 3).
func (a *Agent) serveJoinPage(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	p, ok := a.joinPages[r.PathValue("handle")]
	delete(a.joinPages, r.PathValue("handle"))
	a.mu.Unlock()
	if !ok || time.Now().After(p.expires) {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	_ = joinTemplate.Execute(w, struct{ Action, Assertion, Token string }{p.action, p.assertion, p.token})
}

// randomID returns n random characters of the spec 8.2 ID alphabet.
func randomID(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
