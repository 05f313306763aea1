package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// options are what tests set besides the config file.
type options struct {
	// Resolver loads agents' keys; nil is a new identity.Resolver (with
	// AllowLocal when the config allows local development). Tests give
	// webkittest's Site.Resolver().
	Resolver *identity.Resolver
	// AccessTokens verifies the access tokens of signed-in Sessions; nil:
	// no Session joins signed in.
	AccessTokens identity.AccessTokens
}

// Gateway is the website side of the operations extension in front of an
// unmodified website (the upstream): an http.Handler. Build it with [New].
type Gateway struct {
	handler         http.Handler
	listen          string
	adminAddr       string
	admin           http.Handler
	shutdownTimeout time.Duration
	timeouts        timeouts
	logger          *slog.Logger
	closers         []func() error
	adminState
}

// startTimeout bounds what New waits for: the Redis store's checks.
const startTimeout = 10 * time.Second

// maxBody is the longest request body the gateway reads to describe a
// gated request: the Gate's own limit (longer ones get 413 from it).
const maxBody = 1 << 20

// New builds the gateway c describes: it connects to the store and checks
// what it promises (a Redis whose durability can't hold is an error, but
// for durability: none, which is logged), and wires the kit's endpoint,
// join, scripts and poppy.json in front of the gated actions and the
// upstream.
//
// logger gets the gateway's and the kit's logs; nil is slog.Default().
// Neither ever logs a join cookie, a Poppy-Session header, an access
// token, a cookie key or a request body.
func New(c *Config, logger *slog.Logger) (*Gateway, error) {
	return newGateway(c, logger, options{})
}

func newGateway(c *Config, logger *slog.Logger, o options) (*Gateway, error) {
	if c == nil {
		return nil, errors.New("gateway: Config is nil: read one with gateway.Load")
	}
	if logger == nil {
		logger = slog.Default()
	}
	g := &Gateway{listen: c.listen, adminAddr: c.admin, shutdownTimeout: c.shutdown, logger: logger, timeouts: c.timeouts}

	var kit *webkit.Kit
	if len(c.keys) == 0 {
		logger.Warn("opsgate-gateway: no cookie_keys: using random keys, so joins and waiting pages last only as long as this process")
		kit = webkit.New()
	} else {
		kit = webkit.New(c.keys...)
	}
	kit.Logger = logger
	kit.Chrome = c.chrome
	if cs, ok := kit.Sessions.(*webkit.CookieSessions); ok && strings.HasPrefix(c.origin, "http://") {
		cs.Insecure = true // allow_local over plain http: a browser drops Secure cookies there
	}
	if len(c.ownLogin) > 0 {
		names := c.ownLogin
		// A browser with the website's own login gets the website's own
		// approval flow (§4 W56): the upstream's handlers only when
		// own_login_flow says they are that flow; by default the Gate
		// refuses its gated requests (ErrOwnLogin: confirm on the website).
		kit.OwnFlowInHandler = c.ownFlow == ownFlowUpstream
		kit.OwnLogin = func(r *http.Request, _ webkit.Session) bool { // §4 W56
			for _, n := range names {
				if _, err := r.Cookie(n); err == nil {
					return true
				}
			}
			return false
		}
	}
	if c.store.redis != nil {
		st, client, err := openRedis(c.store, logger)
		if err != nil {
			return nil, err
		}
		kit.Store = st
		g.closers = append(g.closers, client.Close)
		g.ping = func(ctx context.Context) error { return client.Ping(ctx).Err() }
	}
	// else the Kit's default: the in-memory store.

	if err := g.newAdmin(kit); err != nil { // before NewMount, which takes the Observer
		g.Close()
		return nil, err
	}
	client := &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	tokens := o.AccessTokens
	if tokens == nil && c.tokens != nil {
		keys := &jwks{url: c.tokens.jwksURL, client: client}
		tokens = &identity.JWTAccessTokens{Issuer: c.tokens.issuer, Audience: c.tokens.audience, KeyFunc: keys.key}
	}
	m, err := endpoint.NewMount(endpoint.Config{
		Origin:       c.origin,
		Name:         c.name,
		Kit:          kit,
		Resolver:     o.Resolver,
		AccessTokens: tokens,
		AllowLocal:   c.allowLocal,
	})
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("%s: %w", c.file, err)
	}

	origin, _ := url.Parse(c.origin)
	id := &upstreamIdentity{prefix: c.identityPrefix, key: c.identityKey, on: c.identityOn, kit: kit, now: time.Now}
	if c.identityKey == nil {
		logger.Warn("opsgate-gateway: no identity_key_env: the identity headers are not signed, so the website can trust them only if nothing but the gateway reaches it")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = c.timeouts.upstream
	transport.IdleConnTimeout = c.timeouts.idle
	proxy := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Rewrite has already dropped the client's X-Forwarded-*
			// headers (and the router every spelling of them): the
			// upstream gets only the gateway's.
			pr.SetURL(c.upstream)
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Forwarded-Host", origin.Host)
			pr.Out.Header.Set("X-Forwarded-Proto", origin.Scheme)
			dropGatewayCookies(pr.Out.Header)
			o, ok := id.owner(pr.In)
			id.set(pr.Out, o, ok)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			upstreamFailed(logger, w, r, err, c.timeouts.upstream)
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	rt := newRouter(c, kit, logger, proxy)
	for _, a := range c.actions {
		var h http.Handler
		if a.describe != nil {
			ask := &asker{a: a, upstream: c.upstream, client: client, logger: logger, kit: kit, identity: id}
			h = ask.wrap(kit.Gate(describedByUpstream)(proxy))
		} else {
			h = kit.Gate(a.describeFunc())(proxy)
		}
		rt.handle(a, h)
	}
	poppy, err := newPoppyJSON(m, c.upstream, client, logger)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("%s: %w", c.file, err)
	}
	site := m.Handler(rt)
	bodyTimeout := c.timeouts.body
	g.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bodyDeadline(w, r, bodyTimeout)
		if r.URL.Path == poppyJSONPath && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			poppy.ServeHTTP(w, r)
			return
		}
		site.ServeHTTP(w, r)
	})
	return g, nil
}

// ServeHTTP serves the gateway: the kit's routes, the gated actions, and
// everything else proxied to the upstream.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// Close closes the store's connections. Shut the server down first, so
// that the performances in flight finish.
func (g *Gateway) Close() error {
	var errs []error
	for _, c := range g.closers {
		errs = append(errs, c())
	}
	g.closers = nil
	return errors.Join(errs...)
}

// openRedis connects the Redis store and checks that it keeps the
// durability the config asks for.
func openRedis(sc storeConfig, logger *slog.Logger) (*redisstore.Store, *redis.Client, error) {
	client := redis.NewClient(sc.redis)
	st := redisstore.New(client, redisstore.Options{Durability: sc.durability, Replicas: sc.replicas, Prefix: sc.prefix})
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := st.Check(ctx); err != nil {
		if sc.durability != redisstore.DurableNone {
			client.Close()
			return nil, nil, fmt.Errorf("gateway: store: %w", err)
		}
		logger.Warn("opsgate-gateway: store", "risk", err.Error()) // durability: none was chosen
	}
	if err := st.Load(ctx); err != nil {
		logger.Warn("opsgate-gateway: store: functions not loaded; the first calls cost one more round trip", "error", err.Error())
	}
	return st, client, nil
}

// describeFunc is the Gate's describe of an action the config describes:
// the key, terms and summary built from the request's path, query, form
// and JSON body, read strictly (readRequest).
func (a *action) describeFunc() webkit.Describe {
	return func(r *http.Request) (webkit.Action, error) {
		var body []byte
		if (a.reads("form") || a.reads("json") || a.reads("query")) && r.Body != nil {
			b, err := io.ReadAll(r.Body) // the Gate's copy: it restores it for the upstream
			if err != nil {
				return webkit.Action{}, fmt.Errorf("the request body could not be read")
			}
			body = b
		}
		d, err := readRequest(r, body, a.fields)
		if err != nil {
			return webkit.Action{}, err
		}
		return webkit.Action{
			Key:      a.key.text(d),
			Terms:    a.terms.build(d),
			Summary:  a.summary.text(d),
			Lifetime: a.lifetime,
			Kind:     a.kind,
		}, nil
	}
}

// dropGatewayCookies removes the gateway's own cookies (the join cookie
// and its marker) from a request to the upstream: they are the gateway's
// credentials, and none of the upstream's business.
func dropGatewayCookies(h http.Header) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		for _, c := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(c), "=")
			if name != "" && !isGatewayCookie(name) {
				kept = append(kept, strings.TrimSpace(c))
			}
		}
	}
	h.Del("Cookie")
	if len(kept) > 0 {
		h.Set("Cookie", strings.Join(kept, "; "))
	}
}

// upstreamFailed answers a request the upstream did not answer. A request
// that never reached it (the connection was refused) performed nothing:
// an approved repeat is then not performed, rather than of unknown
// outcome (§7). Any other failure may have reached it, an answer that did
// not come within timeouts.upstream among them: the Gate holds the 502
// back and answers that the outcome is not known yet (W142), never that
// it failed.
func upstreamFailed(logger *slog.Logger, w http.ResponseWriter, r *http.Request, err error, upstreamTimeout time.Duration) {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		webkit.SetOutcome(r, store.OutcomeNotPerformed)
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		logger.LogAttrs(r.Context(), slog.LevelInfo, "opsgate-gateway: the browser left before the upstream answered",
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
	} else if isTimeout(err) || strings.Contains(err.Error(), "timeout awaiting response headers") {
		logger.LogAttrs(r.Context(), slog.LevelWarn, "opsgate-gateway: the upstream did not answer in time (timeouts.upstream)",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("timeout", upstreamTimeout.String()), slog.String("error", err.Error()))
	} else {
		logger.LogAttrs(r.Context(), slog.LevelWarn, "opsgate-gateway: the upstream did not answer",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusBadGateway)
	io.WriteString(w, "The website did not answer. Try again in a moment.\n")
}
