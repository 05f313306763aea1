// Package shop is the demo shop behind `go run ./demo`: a small storefront
// whose actions with a business effect (exchange an item, cancel the
// subscription, change a delivery date) are gated by opsgate, so that a
// browser joined to a person's agent's Session waits for the agent's
// approval (§4 and §6 "Websites").
//
// Many agents can share one running shop: each agent's User gets its own
// sandbox of the demo data (see sandbox.go), and every action can be done
// again and again (exchange back and forth, cancel and resubscribe, move
// the delivery).
//
// Everything a test needs runs in-process: NewServer builds the shop, the
// kit, the browser join, the operations endpoint, poppy.json and a demo
// authorization server; Handler serves them all.
package shop

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/securecookie"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
	opsgateprom "github.com/opsgate/opsgate/webkit/metrics/prometheus"
)

//go:embed static
var staticFiles embed.FS

// Paths of the protocol's routes.
const (
	PathPoppyJSON = "/.well-known/poppy.json"
	// PathAPI is the base of the shop's JSON API, PathAPIExchange its
	// exchange, PathMCP its MCP server (Streamable HTTP), as poppy.json
	// lists them (RULES.md choice 9).
	PathAPI         = "/api"
	PathAPIExchange = "/api/orders/{order}/items/{item}/exchanges"
	PathMCP         = "/mcp"
	PathJoin        = "/poppy/join"       // web.browser_session_endpoint
	PathOperations  = "/poppy/operations" // the operations endpoint (§4, §6)
	PathToken       = "/demo/token"       // the demo authorization server
	PathReset       = "/demo/reset"       // restores the browser's sandbox
	PathMetrics     = "/metrics"          // Prometheus metrics, with Config.Metrics
	PathAdmin       = "/admin/operations" // the staff's page (Config.StaffCredential)
	PathLeave       = "/leave"            // ends the browser's join (Sessions.Unbind)
)

// Config configures a Server.
type Config struct {
	// BaseURL is the shop's origin as browsers and agents reach it, such as
	// "http://localhost:8080": scheme, host and port, no path. Required.
	BaseURL string
	// Store keeps operations and approvals; nil is memstore.New(memstore.Config{}).
	Store store.Store
	// Clock is the time; nil is time.Now.
	Clock func() time.Time
	// Logger gets the shop's and the kit's logs; nil is slog.Default().
	Logger *slog.Logger
	// Keys are securecookie pairs (hash key of 32 or 64 bytes, encryption
	// key of 16, 24 or 32 bytes) for the join cookie, waiting pages and the
	// shop's own login; nil makes random ones, valid while the process runs.
	Keys [][]byte
	// AllowLocal is demo mode for local development: agents whose client_id
	// is on localhost or 127.0.0.1 over plain http are accepted, and the
	// poppy.json URLs may be http on localhost.
	AllowLocal bool
	// HTTPClient fetches agents' metadata and keys; nil is the default.
	HTTPClient *http.Client
	// MaxSandboxes bounds the copies of the demo data kept at once (one per
	// agent's User, one for browsers without an agent); 0 is
	// shopdb.DefaultMaxSandboxes. SandboxIdle is how long an unused one is
	// kept; 0 is shopdb.DefaultSandboxIdle (a day).
	MaxSandboxes int
	SandboxIdle  time.Duration
	// MaxSandboxesPerAgent bounds the copies kept for one agent's Users (one
	// client_id); 0 is shopdb.DefaultMaxPerGroup. An agent at its cap makes
	// room by dropping its own least recently used copy, and beyond
	// MaxSandboxes the agent with the most copies gives way first: one
	// agent's joins never flush another agent's sandboxes.
	MaxSandboxesPerAgent int
	// MaxSandboxesPerSource bounds the copies made from one client network
	// (an IPv4 /24, an IPv6 /48); 0 is shopdb.DefaultMaxPerSource. Made-up
	// agents cost nothing, so one network's many agents make room from
	// their own copies first, and beyond MaxSandboxes the network with the
	// most copies gives way: 1,000 made-up agents from one network never
	// flush another's sandbox.
	MaxSandboxesPerSource int
	// TrustedProxies are the reverse proxies in front of the shop (such as
	// 127.0.0.1/32 for a proxy on the same machine): for a request from
	// one, the client is the last address in X-Forwarded-For that isn't a
	// proxy's. Without them, every request behind a proxy is the proxy's,
	// and shares its network's budgets (sandboxes, wrong passwords).
	TrustedProxies []netip.Prefix
	// CustomerPassword is the demo customer's password for the shop's own
	// login (POST /signin), asked again to confirm each gated action on
	// that login (the shop's own approval flow, §4 W56). "" makes a random
	// one nobody knows: the own login is then off.
	CustomerPassword string
	// StaffCredential signs a browser in as the shop's staff, for the
	// admin page (operations whose outcome is not known, §7 W142); it is
	// not the customer's password and no customer login reaches that page.
	// "" makes a random one nobody knows: the admin page is then closed.
	StaffCredential string
	// Metrics serves the kit's metrics at PathMetrics in the Prometheus
	// text format (webkit/metrics/prometheus, on the shop's own registry,
	// not the global one): the answers of the Gate, the operations
	// endpoint, the join and the waiting pages' status route, and the
	// store's latency. The labels are fixed sets and action kinds, never a
	// Session, a token, an operation_id or a ref. No page links to it.
	Metrics bool
	// MetricsPrivate keeps the metrics off Handler: only MetricsHandler
	// serves them, on a listener of the operator's (demo -metrics-addr).
	MetricsPrivate bool
}

// Server is the demo shop.
type Server struct {
	cfg    Config
	origin string
	// sandboxes hold each agent User's own copy of the demo data (see
	// sandboxKey).
	sandboxes *shopdb.Sandboxes
	kit       *webkit.Kit
	login     *securecookie.SecureCookie
	staff     *securecookie.SecureCookie // the staff's sign-in (admin.go)
	secure    bool                       // BaseURL is https: cookies are Secure
	mount     *endpoint.Mount
	tokens    *identity.JWTAccessTokens
	issuer    crypto.Signer
	issuerID  string         // kid of issuer
	metrics   *prom.Registry // nil without Config.Metrics
	handler   http.Handler
	// Wrong guesses of the customer's password (sign-in, confirmation)
	// and of the staff credential, by source (source.go).
	passwordTries, staffTries *throttle
	// What the shop saw of each agent (seen.go), and the bench (bench.go).
	seen  seenLog
	bench bench
	inner http.Handler // what record serves, for the bench's background requests
}

// NewServer builds the shop, seeded with the demo account, around cfg.
func NewServer(cfg Config) (*Server, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("shop: BaseURL must be an origin such as http://localhost:8080, got %q", cfg.BaseURL)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Store == nil {
		cfg.Store = memstore.New(memstore.Config{})
	}
	if cfg.CustomerPassword == "" {
		cfg.CustomerPassword = rand.Text()
	}
	if cfg.StaffCredential == "" {
		cfg.StaffCredential = rand.Text()
	}
	if cfg.StaffCredential == cfg.CustomerPassword {
		return nil, errors.New("shop: StaffCredential must not be the customer's password")
	}
	if len(cfg.Keys) == 0 {
		cfg.Keys = [][]byte{securecookie.GenerateRandomKey(64), securecookie.GenerateRandomKey(32)}
	}
	if len(cfg.Keys) < 2 {
		return nil, errors.New("shop: Keys must hold a hash key and an encryption key")
	}
	s := &Server{
		cfg:       cfg,
		origin:    u.Scheme + "://" + u.Host,
		sandboxes: &shopdb.Sandboxes{Max: cfg.MaxSandboxes, MaxPerGroup: cfg.MaxSandboxesPerAgent, MaxPerSource: cfg.MaxSandboxesPerSource, Idle: cfg.SandboxIdle, Group: sandboxAgent},
		secure:    u.Scheme == "https",
	}
	s.passwordTries, s.staffTries = &throttle{clock: cfg.Clock}, &throttle{clock: cfg.Clock}
	s.bench.s = s
	cfg.BaseURL = s.origin

	// The kit: the Gate's configuration.
	s.kit = webkit.New(cfg.Keys...)
	s.kit.Store = cfg.Store
	s.kit.Clock = cfg.Clock
	s.kit.Logger = cfg.Logger
	s.kit.OwnLogin = func(r *http.Request, _ webkit.Session) bool { return s.ownLogin(r) != "" }
	// §4 W56: the shop's gated handlers are its own approval flow for that
	// login: each sends the browser to the confirmation page (ownflow.go),
	// which performs only with the password again and a single-use token.
	s.kit.OwnFlowInHandler = true
	// The demo is agent developers' test bench: every refusal to an agent
	// or its browser says why (issue 37). A production website leaves it
	// off.
	s.kit.ExplainRefusals = true
	if cs, ok := s.kit.Sessions.(*webkit.CookieSessions); ok {
		cs.Insecure = !s.secure // local http only: a Secure cookie would never come back
	}

	// The shop's own login: a signed, encrypted cookie naming the account.
	s.login = securecookie.New(cfg.Keys[0], cfg.Keys[1])
	s.login.MaxAge(int((12 * time.Hour).Seconds()))
	s.staff = securecookie.New(cfg.Keys[0], cfg.Keys[1])
	s.staff.MaxAge(int(staffLifetime.Seconds()))

	// The demo authorization server's key, and the verifier of its tokens.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("shop: issuer key: %w", err)
	}
	s.issuer, s.issuerID = key, "demo-"+rand.Text()[:8]
	s.tokens = &identity.JWTAccessTokens{
		Issuer: s.origin,
		Keys:   map[string]crypto.PublicKey{s.issuerID: key.Public()},
		Clock:  cfg.Clock,
	}
	// The kit's pages (waiting, try again, too many waiting) wear the shop's own chrome.
	s.kit.Chrome = templates.Chrome{
		SiteName:    views.ShopName,
		BackURL:     "/account",
		BackLabel:   "Back to your account",
		Stylesheets: []string{"/static/shop.css"},
		Header:      views.WaitingMasthead(),
		Footer:      views.WaitingFooter(),
	}

	// The Observer is set before the mount, which hands it to the
	// endpoint: one Observer sees the Gate, the endpoint, the join, the
	// status route and the store (webkit.Kit.Observer).
	if cfg.Metrics {
		s.metrics = prom.NewRegistry()
		obs, err := opsgateprom.New(s.metrics)
		if err != nil {
			return nil, fmt.Errorf("shop: metrics: %w", err)
		}
		s.kit.Observer = obs
	}
	// What the shop saw (seen.go) hears every Event first.
	s.kit.Observer = seenObserver{next: s.kit.Observer}

	// One mount for the protocol's routes: the operations endpoint with
	// the shop's decline hook (§6), the browser join, the kit's scripts
	// and poppy.json, all from the shop's one origin.
	s.mount, err = endpoint.NewMount(endpoint.Config{
		Origin:       s.origin,
		Name:         views.ShopName,
		Kit:          s.kit,
		Resolver:     &identity.Resolver{AllowLocal: cfg.AllowLocal, HTTPClient: cfg.HTTPClient, Clock: cfg.Clock},
		AccessTokens: s.tokens,
		Decline:      s.declineHook,
		AllowLocal:   cfg.AllowLocal,
		// RULES.md choice 9: where its API and MCP server are.
		PoppyJSON: map[string]any{
			"api": map[string]any{"base_url": s.origin + PathAPI},
			"mcp": map[string]any{"url": s.origin + PathMCP},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("shop: %w", err)
	}

	s.handler = s.routes()
	return s, nil
}

// Handler serves the whole shop.
func (s *Server) Handler() http.Handler { return s.handler }

// MetricsHandler serves the kit's metrics in the Prometheus text format
// (Config.Metrics), for a listener other than the shop's own; nil without
// Config.Metrics.
func (s *Server) MetricsHandler() http.Handler {
	if s.metrics == nil {
		return nil
	}
	return promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{})
}

// Kit is the shop's kit: tests bind browsers with Kit().Sessions.
func (s *Server) Kit() *webkit.Kit { return s.kit }

// DB is the data that browsers joined to no agent's Session see (people
// trying the shop themselves), for tests to check the effect of an action.
func (s *Server) DB() *shopdb.DB { return s.sandboxes.Get(publicSandbox, s.now()) }

// Sandbox is the data of the agent agent's User user: what every browser
// joined to one of its Sessions sees and changes, signed in or not. It is
// seeded on first use.
func (s *Server) Sandbox(agent, user string) *shopdb.DB {
	return s.sandboxes.Get(agentSandbox(agent, user), s.now())
}

// Sandboxes is the number of copies of the demo data the shop keeps.
func (s *Server) Sandboxes() int { return s.sandboxes.Len() }

// URL returns the absolute URL of path on the shop.
func (s *Server) URL(path string) string { return s.origin + path }

func (s *Server) now() time.Time { return s.cfg.Clock() }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	gate := s.kit.Gate

	// The storefront.
	mux.HandleFunc("GET /{$}", s.home)
	mux.HandleFunc("GET /products/{slug}", s.product)
	mux.HandleFunc("GET /account", s.account)
	mux.HandleFunc("GET /orders/{order}", s.order)
	mux.HandleFunc("GET /account/subscription", s.subscription)
	mux.HandleFunc("GET /deliveries", s.deliveries)
	mux.HandleFunc("GET /signin", s.signInPage)
	mux.HandleFunc("POST /signin", s.signIn)
	mux.HandleFunc("GET /confirm", s.confirmPage)
	mux.HandleFunc("POST /confirm", s.confirm)
	mux.HandleFunc("POST /signout", s.signOut)
	mux.HandleFunc("POST "+PathLeave, s.leave)
	mux.HandleFunc("GET "+PathAdmin, s.adminOperations)
	mux.HandleFunc("POST /admin/operations/resolve", s.adminResolve)
	mux.HandleFunc("GET /admin/ledger", s.adminLedger)
	mux.HandleFunc("POST /admin/signin", s.staffSignIn)
	mux.HandleFunc("POST /admin/signout", s.staffSignOut)
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler(static)))

	// Gated actions (§4 "Websites"): each describe says what the request
	// asks for; the handler performs exactly that.
	mux.Handle("POST /orders/{order}/items/{item}/exchange", gate(s.describeExchange)(http.HandlerFunc(s.exchange)))
	mux.Handle("POST /account/subscription/cancel", gate(s.describeCancel)(http.HandlerFunc(s.cancel)))
	mux.Handle("POST /account/subscription/resubscribe", gate(s.describeResubscribe)(http.HandlerFunc(s.resubscribe)))
	mux.Handle("POST /api/deliveries/{id}", gate(s.describeReschedule)(http.HandlerFunc(s.reschedule)))
	// The JSON API and the MCP server offer the same actions to agents
	// that call them directly (§4, §6 "APIs" and "MCP"): the same Gate,
	// describe and handlers, one record (§7).
	mux.Handle("POST "+PathAPIExchange, gate(s.describeExchange)(http.HandlerFunc(s.apiExchange)))
	mux.Handle(PathMCP, s.mcpHandler())

	// The demo's own routes for agents.
	mux.HandleFunc("POST "+PathToken, s.issueToken)
	mux.HandleFunc("POST "+PathReset, s.reset)
	mux.HandleFunc("GET "+PathSeen, s.seenPage)
	mux.HandleFunc("GET "+PathBench, s.benchPage)
	mux.HandleFunc("POST "+PathBenchStart, s.benchStart)
	mux.HandleFunc("GET "+PathBench+"/alternative/{nonce}", s.benchAlternative)

	// The operator's: Prometheus scrapes it; no page links to it.
	if s.metrics != nil && !s.cfg.MetricsPrivate {
		mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}))
	}

	// CSRF: browsers' cross-origin POSTs to the shop are refused. The
	// mount's routes (the endpoint, the join, the kit's scripts,
	// poppy.json) are answered before it: each carries its own proof.
	cop := http.NewCrossOriginProtection()
	return s.logRequests(s.record(securityHeaders(s.mount.Handler(cop.Handler(mux)))))
}

func staticHandler(files fs.FS) http.Handler {
	fileServer := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		fileServer.ServeHTTP(w, r)
	})
}

// securityHeaders sets a strict Content-Security-Policy: the shop and the
// kit serve every script and style as a file.
func securityHeaders(next http.Handler) http.Handler {
	const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// logRequests logs each request's method, path and status: never headers
// or bodies, which carry the Session header, tokens and the join cookie.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		next.ServeHTTP(rw, r)
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", rw.code()), slog.Duration("took", time.Since(start)),
		}
		if op := rw.Header().Get("Poppy-Operation"); op != "" {
			attrs = append(attrs, slog.Bool("poppy_operation", true))
		}
		s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusRecorder) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
