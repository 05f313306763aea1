package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/singleflight"
)

// Agent is a Personal Agent as its Client ID Metadata Document describes it
// (poppy-core "Agent identity"), with the keys of its jwks_uri. An Agent is
// never modified after the Resolver returns it.
type Agent struct {
	ClientID   string // the document's URL, which the document names
	ClientName string // client_name; "" when the document has none
	JWKSURI    string
	Keys       []PublicKey // the usable keys of the key set (with a kid)
	LoadedAt   time.Time   // when Keys were loaded
}

// Key returns the key with kid that fits alg (see PublicKey.Fits).
func (a *Agent) Key(kid, alg string) (PublicKey, bool) {
	for _, k := range a.Keys {
		if k.Kid == kid && k.Fits(alg) {
			return k, true
		}
	}
	return PublicKey{}, false
}

func (a *Agent) hasKid(kid string) bool {
	for _, k := range a.Keys {
		if k.Kid == kid {
			return true
		}
	}
	return false
}

// The hardening of a 1.0 verifier (poppy-core "Hardening").
const (
	// failureTTL: a failed load is remembered, and not retried, for 30 s.
	failureTTL = 30 * time.Second
	// reloadInterval: an unknown kid reloads the key set at most every 30 s.
	reloadInterval = 30 * time.Second
	// staleTTL: keys loaded before are kept up to 1 h while reloads fail.
	staleTTL = time.Hour

	defaultRefresh     = 5 * time.Minute
	defaultMaxDocument = 64 << 10
	defaultMaxAgents   = 10000
	connectTimeout     = 3 * time.Second
	totalTimeout       = 10 * time.Second
	maxURLLength       = 2048
	maxKeys            = 100
)

// Resolver loads and caches agents' metadata documents and key sets. The
// zero value is ready to use; set fields before the first call.
type Resolver struct {
	// HTTPClient is the client whose Transport is used. When its Transport
	// is an *http.Transport (or nil: http.DefaultTransport), the Resolver
	// uses a clone with its own dialer (the address check below, a 3 s
	// connect timeout) and no proxy, because a proxy would hide the address
	// that is dialled. Any other RoundTripper is used as it is and must do
	// its own address checks. Redirects are never followed and every
	// request ends within 10 s whatever the client says.
	HTTPClient *http.Client
	// AllowLocal is for local development: http:// is allowed on
	// localhost, 127.0.0.1 and [::1], and loopback, private and link-local
	// addresses may be dialled. Off, they are refused when dialling, after
	// DNS resolution, so DNS rebinding cannot get around the check.
	AllowLocal bool
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
	// MaxDocumentBytes limits the metadata document and the key set each;
	// 0 means 64 KiB.
	MaxDocumentBytes int64
	// RefreshAfter is how long a loaded agent is used before it is loaded
	// again; 0 means 5 minutes.
	RefreshAfter time.Duration
	// MaxAgents bounds the cache, since anyone can send any client_id; 0
	// means 10000. Beyond it, arbitrary entries are dropped.
	MaxAgents int

	once   sync.Once
	client *http.Client
	group  singleflight.Group
	mu     sync.Mutex
	agents map[string]*agentEntry
}

type agentEntry struct {
	agent      *Agent    // last good load; nil when none
	failure    error     // last failed load; nil after a success
	failedAt   time.Time // when failure happened
	reloadedAt time.Time // last key set load, for reloadInterval
}

func (r *Resolver) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// Agent returns the agent whose client_id is clientID, from the cache or
// loaded now. Errors wrap ErrInvalid (the client_id, document or key set is
// wrong) or ErrUnavailable (it could not be fetched).
func (r *Resolver) Agent(ctx context.Context, clientID string) (*Agent, error) {
	if _, err := r.checkURL(clientID, "client_id"); err != nil {
		return nil, err
	}
	now := r.now()
	r.mu.Lock()
	e := r.agents[clientID]
	if e != nil {
		refresh := r.RefreshAfter
		if refresh <= 0 {
			refresh = defaultRefresh
		}
		if e.agent != nil && now.Before(e.agent.LoadedAt.Add(refresh)) {
			r.mu.Unlock()
			return e.agent, nil
		}
		if e.failure != nil && now.Before(e.failedAt.Add(failureTTL)) {
			a, err := e.agent, e.failure
			r.mu.Unlock()
			if a != nil && errors.Is(err, ErrUnavailable) && now.Before(a.LoadedAt.Add(staleTTL)) {
				return a, nil
			}
			return nil, fmt.Errorf("%w (remembered for %v)", err, failureTTL)
		}
	}
	r.mu.Unlock()

	v, err := r.share(ctx, "agent "+clientID, func(ctx context.Context) (*Agent, error) {
		a, err := r.load(ctx, clientID)
		r.store(clientID, a, err)
		return a, err
	})
	if err != nil {
		r.mu.Lock()
		var old *Agent
		if e := r.agents[clientID]; e != nil {
			old = e.agent
		}
		r.mu.Unlock()
		if old != nil && errors.Is(err, ErrUnavailable) && now.Before(old.LoadedAt.Add(staleTTL)) {
			return old, nil
		}
		return nil, err
	}
	return v, nil
}

// Key returns the agent's key with kid that fits alg. An unknown kid reloads
// the key set, at most once every 30 s per agent, so that a rotated key is
// found without letting made-up kids hammer the agent's server.
func (r *Resolver) Key(ctx context.Context, clientID, kid, alg string) (PublicKey, *Agent, error) {
	a, err := r.Agent(ctx, clientID)
	if err != nil {
		return PublicKey{}, nil, err
	}
	if k, ok := a.Key(kid, alg); ok {
		return k, a, nil
	}
	if a.hasKid(kid) {
		// The kid is known: a wrong alg is the token's fault, not a rotation.
		return PublicKey{}, nil, invalid("kid %q of %s does not fit alg %q", kid, clientID, alg)
	}
	now := r.now()
	r.mu.Lock()
	e := r.agents[clientID]
	due := e != nil && e.agent != nil && !now.Before(e.reloadedAt.Add(reloadInterval))
	r.mu.Unlock()
	if !due {
		return PublicKey{}, nil, invalid("unknown kid %q for %s", kid, clientID)
	}
	a, err = r.share(ctx, "jwks "+clientID, func(ctx context.Context) (*Agent, error) {
		r.mu.Lock()
		e := r.agents[clientID]
		var cur *Agent
		if e != nil {
			cur = e.agent
		}
		// Another caller may have reloaded while this one waited.
		if cur == nil || now.Before(e.reloadedAt.Add(reloadInterval)) {
			r.mu.Unlock()
			if cur == nil {
				return nil, invalid("unknown kid %q for %s", kid, clientID)
			}
			return cur, nil
		}
		e.reloadedAt = now
		r.mu.Unlock()
		keys, err := r.loadKeys(ctx, cur.JWKSURI)
		if err != nil {
			// The keys loaded before stay in use (up to their stale TTL).
			return nil, err
		}
		next := *cur
		next.Keys, next.LoadedAt = keys, r.now()
		r.mu.Lock()
		if e := r.agents[clientID]; e != nil {
			e.agent = &next
		}
		r.mu.Unlock()
		return &next, nil
	})
	if err != nil {
		return PublicKey{}, nil, err
	}
	if k, ok := a.Key(kid, alg); ok {
		return k, a, nil
	}
	return PublicKey{}, nil, invalid("unknown kid %q for %s (key set reloaded)", kid, clientID)
}

// share runs load once for all concurrent callers with the same key. The
// load is detached from any one caller's cancellation (it has its own 10 s
// limit); a caller whose context ends stops waiting.
func (r *Resolver) share(ctx context.Context, key string, load func(context.Context) (*Agent, error)) (*Agent, error) {
	ch := r.group.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), totalTimeout)
		defer cancel()
		return load(lctx)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*Agent), nil
	case <-ctx.Done():
		return nil, unavailable("loading agent: %w", ctx.Err())
	}
}

func (r *Resolver) store(clientID string, a *Agent, err error) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agents == nil {
		r.agents = make(map[string]*agentEntry)
	}
	e := r.agents[clientID]
	if e == nil {
		max := r.MaxAgents
		if max <= 0 {
			max = defaultMaxAgents
		}
		for k := range r.agents {
			if len(r.agents) < max {
				break
			}
			delete(r.agents, k)
		}
		e = &agentEntry{}
		r.agents[clientID] = e
	}
	if err != nil {
		e.failure, e.failedAt = err, now
		if !errors.Is(err, ErrUnavailable) {
			// An invalid document is the agent's current word: its old keys
			// are not kept.
			e.agent = nil
		}
		return
	}
	e.agent, e.failure, e.reloadedAt = a, nil, now
}

// metadata is the Client ID Metadata Document (poppy-core choice 1).
type metadata struct {
	ClientID   string `json:"client_id"`
	ClientName string `json:"client_name"`
	JWKSURI    string `json:"jwks_uri"`
}

func (r *Resolver) load(ctx context.Context, clientID string) (*Agent, error) {
	idURL, err := r.checkURL(clientID, "client_id")
	if err != nil {
		return nil, err
	}
	var m metadata
	if err := r.fetch(ctx, clientID, "metadata document", &m); err != nil {
		return nil, err
	}
	// The document must name itself, or anyone could serve another agent's
	// keys under their own URL.
	if m.ClientID != clientID {
		return nil, invalid("metadata document of %s: client_id %q does not name the document", clientID, m.ClientID)
	}
	if len(m.ClientName) > 255 || !utf8.ValidString(m.ClientName) {
		return nil, invalid("metadata document of %s: client_name is not 1–255 bytes of UTF-8", clientID)
	}
	ju, err := r.checkURL(m.JWKSURI, "jwks_uri")
	if err != nil {
		return nil, fmt.Errorf("metadata document of %s: %w", clientID, err)
	}
	if !sameHost(idURL, ju) {
		return nil, invalid("metadata document of %s: jwks_uri is not on the client_id's host", clientID)
	}
	keys, err := r.loadKeys(ctx, m.JWKSURI)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", clientID, err)
	}
	return &Agent{ClientID: clientID, ClientName: m.ClientName, JWKSURI: m.JWKSURI, Keys: keys, LoadedAt: r.now()}, nil
}

func (r *Resolver) loadKeys(ctx context.Context, jwksURI string) ([]PublicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := r.fetch(ctx, jwksURI, "key set", &set); err != nil {
		return nil, err
	}
	if len(set.Keys) > maxKeys {
		return nil, invalid("key set %s: more than %d keys", jwksURI, maxKeys)
	}
	var keys []PublicKey
	for _, raw := range set.Keys {
		// Keys this package cannot use (other types, encryption keys, no
		// kid) are skipped, as RFC 7517 §5 asks.
		k, err := ParseJWK(raw)
		if err != nil || k.Kid == "" {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, invalid("key set %s: no usable key", jwksURI)
	}
	return keys, nil
}

// errRefusedAddress marks a dial refused by the address check.
var errRefusedAddress = errors.New("address is not public")

func (r *Resolver) fetch(ctx context.Context, u, what string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return invalid("%s %s: %v", what, u, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.httpClient().Do(req)
	if err != nil {
		if errors.Is(err, errRefusedAddress) {
			return invalid("%s %s: %v", what, u, err)
		}
		return unavailable("%s %s: %v", what, u, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return invalid("%s %s: redirect (%d) is not followed", what, u, resp.StatusCode)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return unavailable("%s %s: status %d", what, u, resp.StatusCode)
	default:
		return invalid("%s %s: status %d", what, u, resp.StatusCode)
	}
	max := r.MaxDocumentBytes
	if max <= 0 {
		max = defaultMaxDocument
	}
	if resp.ContentLength > max {
		return invalid("%s %s: larger than %d bytes", what, u, max)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return unavailable("%s %s: reading: %v", what, u, err)
	}
	if int64(len(body)) > max {
		return invalid("%s %s: larger than %d bytes", what, u, max)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return invalid("%s %s: %v", what, u, err)
	}
	return nil
}

func (r *Resolver) httpClient() *http.Client {
	r.once.Do(func() {
		var rt http.RoundTripper
		var base *http.Transport
		switch t := clientTransport(r.HTTPClient).(type) {
		case nil:
			base = http.DefaultTransport.(*http.Transport).Clone()
		case *http.Transport:
			base = t.Clone()
		default:
			rt = t
		}
		if base != nil {
			d := &net.Dialer{Timeout: connectTimeout, Control: r.checkDial}
			base.DialContext = d.DialContext
			base.DialTLSContext = nil
			base.Proxy = nil
			base.MaxResponseHeaderBytes = 16 << 10
			rt = base
		}
		r.client = &http.Client{
			Transport: rt,
			Timeout:   totalTimeout,
			// A redirect could lead to another host or a private address.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
	return r.client
}

func clientTransport(c *http.Client) http.RoundTripper {
	if c == nil {
		return nil
	}
	return c.Transport
}

// checkDial runs after DNS resolution, on the address actually dialled.
func (r *Resolver) checkDial(network, address string, _ syscall.RawConn) error {
	if r.AllowLocal {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errRefusedAddress, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !publicAddr(ip) {
		return fmt.Errorf("%w: %s", errRefusedAddress, host)
	}
	return nil
}

var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"), // NAT64 can reach private IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

func isLocalHost(h string) bool {
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// checkURL checks a client_id or jwks_uri: an absolute https URL (http on a
// local host with AllowLocal), no userinfo, no fragment, at most 2048 bytes.
func (r *Resolver) checkURL(raw, what string) (*url.URL, error) {
	if raw == "" {
		return nil, invalid("%s is missing", what)
	}
	if len(raw) > maxURLLength {
		return nil, invalid("%s is longer than %d bytes", what, maxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalid("%s: %v", what, err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && r.AllowLocal && isLocalHost(u.Hostname()):
	default:
		return nil, invalid("%s %q is not an https URL", what, raw)
	}
	if u.Host == "" || u.Opaque != "" || u.User != nil || u.Fragment != "" || strings.ContainsAny(raw, "#\\") {
		return nil, invalid("%s %q must have a host and no userinfo or fragment", what, raw)
	}
	return u, nil
}

func sameHost(a, b *url.URL) bool {
	return strings.EqualFold(a.Hostname(), b.Hostname()) && effectivePort(a) == effectivePort(b)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "http" {
		return "80"
	}
	return "443"
}
