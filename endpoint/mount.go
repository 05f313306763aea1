// Package endpoint serves a website's part of the Poppy `operations`
// extension v3 from one origin (§4, §6 "Websites", §7): the operations
// endpoint the Personal Agent POSTs refs and approvals to, the browser join,
// the kit's scripts and poppy.json. A website builds one [Mount] with
// [NewMount] and puts it in front of its own router:
//
//	kit := webkit.New(hashKey, encryptionKey)
//	m, err := endpoint.NewMount(endpoint.Config{Origin: "https://shop.example", Name: "Shop", Kit: kit})
//	http.ListenAndServe(addr, m.Handler(mux))
//
// The endpoint never performs anything: it records approvals, and the Gate
// (package webkit) performs the action when the browser repeats its
// request. It reads its store, clock, logger, observer and store timeout
// from the Kit whenever it uses them, as the Gate does, so a website sets
// each of them once, on the Kit, before or after NewMount.
package endpoint

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
	"time"

	"github.com/opsgate/opsgate/internal/apigate"
	"github.com/opsgate/opsgate/internal/discovery"
	"github.com/opsgate/opsgate/internal/join"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// The paths of a Mount's routes (see Mount).
const (
	defaultEndpointPath  = "/poppy/operations"
	defaultJoinPath      = "/poppy/join"
	defaultPoppyJSONPath = "/.well-known/poppy.json"
)

// DeclineRequest is what the website's decline hook sees: the approval, the
// revision it approves, and the Session that sent it (§6 "Declining an
// approval").
//
// The hook's Reason and Alternative go to the agent as they are, so they
// must carry nothing the Session couldn't already see (W130): say what the
// User can do instead in words that hold for any Session ("Only the
// account holder can cancel the subscription."), never the rule or score
// that decided it, nor another account's or User's data. Give no reason
// code (W131): none is sent.
type DeclineRequest struct {
	Operation store.Operation
	Approval  store.Approval
	Session   webkit.Session
}

// Config is what a website says once to serve operations on its pages.
type Config struct {
	// Origin is the website's origin as browsers and agents reach it, such
	// as "https://shop.example": scheme, host and port, no path. It is the
	// audience of every Session JWT and join assertion, the origin return_to
	// must be on, and the base of the URLs in poppy.json. Required.
	Origin string
	// Name is the Company's name in poppy.json; "" leaves it out.
	Name string
	// Kit is the website's Kit, built by webkit.New. Required. The
	// endpoint and the join use the Kit's Store, Clock, Logger, Observer
	// and StoreTimeout, read from the Kit on every request, as the Gate
	// reads them: a field changed after NewMount is used by all of them.
	Kit *webkit.Kit
	// Resolver loads agents' keys; nil is a new identity.Resolver (with
	// AllowLocal when AllowLocal is set).
	Resolver *identity.Resolver
	// AcceptAgent, when set, is asked before an agent's keys are loaded;
	// false refuses the agent (revocation).
	AcceptAgent func(clientID string) bool
	// AccessTokens verifies the access tokens of signed-in Sessions at the
	// endpoint and the join; nil: the website has no signed-in Sessions.
	AccessTokens identity.AccessTokens
	// Decline, when set, is asked once checks 1–3 of §6 pass whether the
	// website declines the approval (W123). It returns nil to accept it.
	// It must put nothing in Reason that the Session couldn't already see
	// (W130), and Reason is short plain language for the User (W128). A
	// declined approval is never recorded (W134). On a website this is the
	// only place an approval is declined, never at the browser's request
	// (W132). nil declines nothing.
	Decline func(ctx context.Context, d DeclineRequest) *webkit.Decline
	// PoppyJSON holds the other members of the website's poppy.json (its
	// APIs, other extensions); the Mount adds the operations entry, the
	// join endpoint and Name. nil: only those.
	PoppyJSON map[string]any
	// AllowLocal is for local development: an http:// Origin on localhost,
	// 127.0.0.1 or [::1], and agents there.
	AllowLocal bool
}

// Mount serves a website's whole part of the protocol from one origin: the
// operations endpoint (this package), the kit's browser join (§2 step 2),
// the Kit's browser-facing routes (Kit.ServeHTTP: waiting.js, fetch.js,
// card.js, opsgate.css, status) and poppy.json. Build it with NewMount; it is an http.Handler that serves
// those routes only, and [Mount.Handler] puts them in front of the website's
// own router, whichever it is:
//
//	m, err := endpoint.NewMount(endpoint.Config{Origin: "https://shop.example", Name: "Shop", Kit: kit})
//	http.ListenAndServe(addr, m.Handler(mux)) // mux: http.ServeMux, chi, gorilla/mux, gin, echo…
//
// Its routes are at fixed paths: the endpoint at /poppy/operations, the join
// at /poppy/join, poppy.json at /.well-known/poppy.json, and the kit's
// browser-facing routes under /_opsgate/ (waiting.js, fetch.js, card.js, opsgate.css,
// status). A router that registers each route itself registers those (the
// last as a prefix: "/_opsgate/*" on chi, PathPrefix on gorilla/mux);
// Mount.Handler needs none of this.
//
// The routes of a Mount carry their own proof instead of a CSRF token: the
// endpoint a Session JWT in a header, the join a signed, single-use
// assertion. Put the website's CSRF protection inside the Mount
// (m.Handler(csrf(site))), or, around it, exempt them: [Mount.Bypass] for
// net/http's CrossOriginProtection, [Mount.Exempt] for other libraries, and
// [Mount.Refused] as their failure handler so that a refused join says why.
type Mount struct {
	endpoint *opsendpoint.Endpoint
	join     http.Handler

	kit                                   *webkit.Kit
	base                                  string
	endpointPath, joinPath, poppyJSONPath string
	poppyJSON                             []byte
	static                                http.Handler

	mu       sync.Mutex
	bypassed map[*http.CrossOriginProtection]bool
}

// errConfig is wrapped by every error NewMount returns.
var errConfig = errors.New("endpoint: mount")

// NewMount checks c and builds the Mount. Every mistake it can see is an
// error here, not at the first request: a missing or malformed Origin, a
// Kit that can't work (Kit.Check: not built by webkit.New, keys New
// refused, a Store or Sessions missing), a poppy.json that would not be
// valid.
func NewMount(c Config) (*Mount, error) {
	if c.Kit == nil {
		return nil, fmt.Errorf("%w: Config.Kit is nil: build one with webkit.New", errConfig)
	}
	if err := c.Kit.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	origin, err := checkOrigin(c.Origin)
	if err != nil {
		return nil, err
	}
	kit := c.Kit
	m := &Mount{
		kit:           kit,
		base:          respond.BasePath,
		endpointPath:  defaultEndpointPath,
		joinPath:      defaultJoinPath,
		poppyJSONPath: defaultPoppyJSONPath,
	}

	// One Kit: the Mount reads the Kit's Store, StoreTimeout, Clock,
	// Logger and Observer when it uses them, as the Gate does, so that a
	// field set after NewMount is the one both use (issue 34).
	now := func() time.Time {
		if kit.Clock != nil {
			return kit.Clock()
		}
		return time.Now()
	}
	resolver := c.Resolver
	if resolver == nil {
		resolver = &identity.Resolver{AllowLocal: c.AllowLocal, Clock: now}
	}
	// The jti check is a store call like the others: it has the kit's
	// StoreTimeout, so a stalled store answers 503 in bounded time, and the
	// Observer sees it (the join's use_once step).
	verifier := &siteverify.Verifier{Origin: origin, Resolver: resolver, Replay: &kitReplay{kit: kit}, Clock: now, AcceptAgent: c.AcceptAgent}
	m.endpoint = opsendpoint.New(kit, opsendpoint.IdentityAuthenticator{Verifier: verifier, AccessTokens: c.AccessTokens})
	if c.Decline != nil {
		m.endpoint.Decline = func(ctx context.Context, d opsendpoint.DeclineRequest) *webkit.Decline {
			return c.Decline(ctx, DeclineRequest(d))
		}
	}
	joinURL := origin + m.joinPath
	m.join = join.New(kit, joinURL, verifier, c.AccessTokens)
	m.static = kit

	doc := map[string]any{}
	for k, v := range c.PoppyJSON {
		doc[k] = v
	}
	if c.Name != "" {
		doc["name"] = c.Name
	}
	d := discovery.Discovery{Endpoint: origin + m.endpointPath, BrowserSessionEndpoint: joinURL, AllowLocal: c.AllowLocal}
	if err := d.AddTo(doc); err != nil {
		return nil, fmt.Errorf("%w: %w", errConfig, err)
	}
	if m.poppyJSON, err = json.MarshalIndent(doc, "", "  "); err != nil {
		return nil, fmt.Errorf("%w: poppy.json: %w", errConfig, err)
	}
	m.poppyJSON = append(m.poppyJSON, '\n')
	return m, nil
}

// kitReplay is the Kit's store, as it is when a jti is checked.
type kitReplay struct {
	kit *webkit.Kit
	c   storewrap.Cached
}

func (r *kitReplay) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	return opsendpoint.KitStore(r.kit, &r.c).UseOnce(ctx, key, until, now)
}

// checkOrigin returns the origin in its canonical form (lower-case scheme
// and host); the Discovery checks then say whether it may be http.
func checkOrigin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil ||
		strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: Origin must be scheme://host[:port] such as https://shop.example, got %q", errConfig, raw)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host), nil
}

// ServeHTTP serves the Mount's routes and answers 404 to anything else.
func (m *Mount) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := m.route(r); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	http.NotFound(w, r)
}

// Handler returns site with the Mount's routes in front of it: a request
// for one of them is the Mount's, any other is site's. It is middleware
// (func(http.Handler) http.Handler), so chi's r.Use(m.Handler) works too.
//
// A request that carries Poppy-Session on itself is an API call (or an
// HTTP request of an MCP session): its Session, account and extensions
// come from its own headers, never a joined browser's cookie
// (RULES.md choices 7 and 8). The Mount verifies them as its endpoint
// does, for the Gate (webkit.Kit.Gate) and the MCP adapter
// (endpoint/mcpgate) of every route behind Handler: a request with
// Poppy-Session that reaches either any other way is refused, never
// handled as an ordinary request. Put Handler in front of every route
// that serves agents, gated or not, so that its gated routes can verify
// the Session their requests carry.
func (m *Mount) Handler(site http.Handler) http.Handler {
	calls := m.endpoint.Calls()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := m.route(r); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		if apigate.IsCall(r) {
			r = r.WithContext(apigate.WithVerifier(r.Context(), calls))
		}
		site.ServeHTTP(w, r)
	})
}

// route returns the Mount's handler for r, or nil when r is the site's.
func (m *Mount) route(r *http.Request) http.Handler {
	switch p := r.URL.Path; {
	case p == m.endpointPath:
		return m.endpoint
	case p == m.joinPath:
		return m.join
	case p == m.poppyJSONPath:
		return http.HandlerFunc(m.servePoppyJSON)
	case strings.HasPrefix(p, m.base):
		return m.static
	}
	return nil
}

func (m *Mount) servePoppyJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead {
		return
	}
	w.Write(m.poppyJSON)
}

// Exempt reports whether r is for the endpoint or the join, the two routes
// a browser-oriented CSRF check must let through: their proof is a Session
// JWT in a header (the endpoint, called by the agent, never by a browser
// form) or a signed single-use assertion whose audience is this join (the
// agent's browser posts it from the agent's own page, so it is cross-site
// by design). Give it to a CSRF library's exemption hook, such as
// nosurf's ExemptFunc.
func (m *Mount) Exempt(r *http.Request) bool {
	return r.URL.Path == m.endpointPath || r.URL.Path == m.joinPath
}

// Bypass lets the join and the endpoint through cop, the website's
// net/http.CrossOriginProtection around the whole site, and makes cop's
// refusal of anything else still cop's. Every other route of the website,
// gated or not, stays protected. Calling it again for the same cop does
// nothing (cop itself would panic on a pattern registered twice).
func (m *Mount) Bypass(cop *http.CrossOriginProtection) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bypassed[cop] {
		return
	}
	if m.bypassed == nil {
		m.bypassed = map[*http.CrossOriginProtection]bool{}
	}
	m.bypassed[cop] = true
	cop.AddInsecureBypassPattern("POST " + m.joinPath)
	cop.AddInsecureBypassPattern("POST " + m.endpointPath)
}

// Refused returns a CSRF library's failure handler that says why when the
// refused request is the join or the endpoint: it logs an error naming the
// fix, and answers 403 with a plain message the agent can show, instead of
// the bare 403 that leaves an agent waiting. Any other refused request goes
// to next (nil: a plain 403).
//
//	cop.SetDenyHandler(m.Refused(nil))
func (m *Mount) Refused(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.Exempt(r) {
			if next != nil {
				next.ServeHTTP(w, r)
				return
			}
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		route := "join"
		if r.URL.Path == m.endpointPath {
			route = "endpoint"
		}
		if o := m.kit.Observer; o != nil {
			o.Observe(r.Context(), webkit.Event{Route: route, Outcome: "refused", Reason: "csrf"})
		}
		m.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: the website's CSRF protection refused the "+route+" before opsgate saw it; exempt it (endpoint.Mount.Bypass or Mount.Exempt)",
			slog.String("path", r.URL.Path))
		joinRefused(w, route)
	})
}

func joinRefused(w http.ResponseWriter, route string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "The website's cross-site request protection refused the %s before it reached opsgate: the website must exempt this route. Nothing was joined or recorded.\n", route)
}

func (m *Mount) logger() *slog.Logger {
	if m.kit.Logger != nil {
		return m.kit.Logger
	}
	return slog.Default()
}
