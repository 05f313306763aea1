package identity

import (
	"context"
	"crypto"
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

	"github.com/opsgate/opsgate/internal/discovery"
	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/internal/spans"
)

// loadedAgent is a Personal Agent as its Client ID Metadata Document describes it
// (webkit/RULES.md "Agent identity"), with the keys of its jwks_uri. An Agent is
// never modified after the Resolver returns it.
type loadedAgent struct {
	ClientID   string // the document's URL, which the document names
	ClientName string // client_name; "" when the document has none
	JWKSURI    string
	Keys       []jose.PublicKey // the usable keys of the key set (with a kid)
	LoadedAt   time.Time        // when Keys were loaded
}

// Key returns the key with kid that fits alg (see jose.PublicKey.Fits).
func (a *loadedAgent) Key(kid, alg string) (jose.PublicKey, bool) {
	for _, k := range a.Keys {
		if k.Kid == kid && k.Fits(alg) {
			return k, true
		}
	}
	return jose.PublicKey{}, false
}

func (a *loadedAgent) hasKid(kid string) bool {
	for _, k := range a.Keys {
		if k.Kid == kid {
			return true
		}
	}
	return false
}

// Key returns the public key named kid that fits alg in the key set of
// the agent clientID, and the agent's client_name, loading its metadata
// document and JWKS and caching them with the hardening of a 1.0 verifier
// (webkit/RULES.md "Hardening"): an unknown kid reloads the set at most
// every 30 s, a failed load is remembered for 30 s, keys loaded before are
// kept up to an hour while reloads fail. The kit's verifier of Session
// JWTs and join assertions calls it. Errors wrap ErrInvalid (the agent or
// its keys are unacceptable) or ErrUnavailable (they can't be loaded now).
func (r *Resolver) Key(ctx context.Context, clientID, kid, alg string) (key crypto.PublicKey, clientName string, err error) {
	k, a, err := r.key(ctx, clientID, kid, alg)
	if err != nil {
		return nil, "", err
	}
	return k.Key, a.ClientName, nil
}

// The hardening of a 1.0 verifier (webkit/RULES.md "Hardening").
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
	maxKeys            = 100
)

// Defaults of the Resolver's bounds on outbound fetches.
const (
	// defaultFetchTimeout bounds a load of an agent (its metadata document
	// and key set, dialling and reading included), so that a slow-drip
	// server holds a request for at most this long.
	defaultFetchTimeout = 3 * time.Second
	// defaultMaxFetches bounds the outbound fetches in flight at once, for
	// all agents together.
	defaultMaxFetches = 32
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
	// load ends within a bound (3 s) whatever the client says.
	HTTPClient *http.Client
	// AllowLocal is for local development: http:// is allowed on
	// localhost, 127.0.0.1 and [::1], and loopback, private and link-local
	// addresses may be dialled. Off, they are refused when dialling, after
	// DNS resolution, so DNS rebinding cannot get around the check.
	AllowLocal bool
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
	// The bounds below are the kit's defaults when zero; the package's
	// tests set them.

	// maxDocument limits the metadata document and the key set each;
	// 0 means 64 KiB.
	maxDocument int64
	// refreshEvery is how long a loaded agent is used before it is loaded
	// again; 0 means 5 minutes.
	refreshEvery time.Duration
	// agentCap bounds the cache, since anyone can send any client_id; 0
	// means 10000. Agents that loaded and failed loads are kept apart, each
	// within agentCap: made-up client_ids fill only the failures, and never
	// evict an agent that loaded. Beyond agentCap, the agent used least
	// recently goes.
	agentCap int
	// loadTimeout bounds each load of an agent, both documents together,
	// from waiting for a fetch slot to the last byte; 0 means
	// defaultFetchTimeout (3 s). A load that runs out is ErrUnavailable.
	loadTimeout time.Duration
	// fetchSlots bounds the outbound fetches in flight at once, for all
	// agents together; 0 means defaultMaxFetches. Concurrent requests for
	// one agent share one load, which takes one slot per document.
	fetchSlots int

	once     sync.Once
	client   *http.Client
	slots    chan struct{}
	group    singleflight.Group
	mu       sync.Mutex
	agents   map[string]*agentEntry // agents that loaded
	failures map[string]failedLoad  // client_ids whose last load failed
}

type agentEntry struct {
	agent      *loadedAgent // last good load
	failure    error        // last failed reload (ErrUnavailable); nil after a success
	failedAt   time.Time    // when failure happened
	reloadedAt time.Time    // last key set load, for reloadInterval
	usedAt     time.Time    // last use, for eviction
}

type failedLoad struct {
	err error
	at  time.Time
}

func (r *Resolver) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

// agent returns the agent whose client_id is clientID, from the cache or
// loaded now. Errors wrap ErrInvalid (the client_id, document or key set is
// wrong) or ErrUnavailable (it could not be fetched).
func (r *Resolver) agent(ctx context.Context, clientID string) (*loadedAgent, error) {
	if _, err := r.checkURL(clientID, "client_id"); err != nil {
		return nil, err
	}
	now := r.now()
	r.mu.Lock()
	if e := r.agents[clientID]; e != nil {
		e.usedAt = now
		refresh := r.refreshEvery
		if refresh <= 0 {
			refresh = defaultRefresh
		}
		if now.Before(e.agent.LoadedAt.Add(refresh)) {
			r.mu.Unlock()
			return e.agent, nil
		}
		if e.failure != nil && now.Before(e.failedAt.Add(failureTTL)) {
			a, err := e.agent, e.failure
			r.mu.Unlock()
			if now.Before(a.LoadedAt.Add(staleTTL)) {
				return a, nil
			}
			return nil, fmt.Errorf("%w (remembered for %v)", err, failureTTL)
		}
	} else if f, ok := r.failures[clientID]; ok && now.Before(f.at.Add(failureTTL)) {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w (remembered for %v)", f.err, failureTTL)
	}
	r.mu.Unlock()

	v, err := r.share(ctx, "agent "+clientID, func(ctx context.Context) (*loadedAgent, error) {
		a, err := r.load(ctx, clientID)
		r.store(clientID, a, err)
		return a, err
	})
	if err != nil {
		r.mu.Lock()
		var old *loadedAgent
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

// key returns the agent's key with kid that fits alg. An unknown kid reloads
// the key set, at most once every 30 s per agent, so that a rotated key is
// found without letting made-up kids hammer the agent's server.
func (r *Resolver) key(ctx context.Context, clientID, kid, alg string) (jose.PublicKey, *loadedAgent, error) {
	a, err := r.agent(ctx, clientID)
	if err != nil {
		return jose.PublicKey{}, nil, err
	}
	if k, ok := a.Key(kid, alg); ok {
		return k, a, nil
	}
	if a.hasKid(kid) {
		// The kid is known: a wrong alg is the token's fault, not a rotation.
		return jose.PublicKey{}, nil, invalid("kid %q of %s does not fit alg %q", kid, clientID, alg)
	}
	now := r.now()
	r.mu.Lock()
	e := r.agents[clientID]
	due := e != nil && !now.Before(e.reloadedAt.Add(reloadInterval))
	var nextReload time.Time
	if e != nil {
		nextReload = e.reloadedAt.Add(reloadInterval)
	}
	r.mu.Unlock()
	if !due {
		err := invalid("unknown kid %q for %s", kid, clientID)
		if nextReload.IsZero() {
			return jose.PublicKey{}, nil, err
		}
		return jose.PublicKey{}, nil, explain.Because(err, fmt.Sprintf("kid %q is not in the key set of %s as this website loaded it at %s; "+
			"it loads an agent's key set again for an unknown kid at most every %v, next after %s "+
			"(an agent that made new keys under the same client_id waits until then, or keeps its keys across runs)",
			kid, clientID, a.LoadedAt.UTC().Format(time.RFC3339), reloadInterval, nextReload.UTC().Format(time.RFC3339)))
	}
	a, err = r.share(ctx, "jwks "+clientID, func(ctx context.Context) (*loadedAgent, error) {
		r.mu.Lock()
		e := r.agents[clientID]
		var cur *loadedAgent
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
		return jose.PublicKey{}, nil, err
	}
	if k, ok := a.Key(kid, alg); ok {
		return k, a, nil
	}
	return jose.PublicKey{}, nil, explain.Because(invalid("unknown kid %q for %s (key set reloaded)", kid, clientID),
		fmt.Sprintf("kid %q is not in the key set of %s, loaded again just now from its jwks_uri: the delegation must be signed with a key that key set lists", kid, clientID))
}

// share runs load once for all concurrent callers with the same key. The
// load is detached from any one caller's cancellation (it has its own
// fetchTimeout); a caller whose context ends stops waiting.
func (r *Resolver) share(ctx context.Context, key string, load func(context.Context) (*loadedAgent, error)) (*loadedAgent, error) {
	ch := r.group.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.fetchTimeout())
		defer cancel()
		return load(lctx)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(*loadedAgent), nil
	case <-ctx.Done():
		return nil, unavailable("loading agent: %w", ctx.Err())
	}
}

func (r *Resolver) fetchTimeout() time.Duration {
	if r.loadTimeout > 0 {
		return r.loadTimeout
	}
	return defaultFetchTimeout
}

func (r *Resolver) maxAgents() int {
	if r.agentCap > 0 {
		return r.agentCap
	}
	return defaultMaxAgents
}

// store records the outcome of a load of clientID.
func (r *Resolver) store(clientID string, a *loadedAgent, err error) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agents == nil {
		r.agents = make(map[string]*agentEntry)
		r.failures = make(map[string]failedLoad)
	}
	e := r.agents[clientID]
	switch {
	case err == nil:
		delete(r.failures, clientID)
		if e == nil {
			r.evictAgent()
			e = &agentEntry{}
			r.agents[clientID] = e
		}
		e.agent, e.failure, e.reloadedAt, e.usedAt = a, nil, now, now
	case e != nil && errors.Is(err, ErrUnavailable):
		// The keys loaded before stay in use, up to staleTTL.
		e.failure, e.failedAt = err, now
	default:
		// An invalid document is the agent's current word: its old keys
		// are not kept.
		delete(r.agents, clientID)
		if len(r.failures) >= r.maxAgents() {
			r.evictFailures(now)
		}
		r.failures[clientID] = failedLoad{err: err, at: now}
	}
}

// evictAgent makes room for one agent: the one used least recently goes.
// It scans the cache, which only a load that succeeded (two fetches, within
// fetchSlots) can make it do.
func (r *Resolver) evictAgent() {
	if len(r.agents) < r.maxAgents() {
		return
	}
	var oldest string
	var at time.Time
	for id, e := range r.agents {
		if oldest == "" || e.usedAt.Before(at) {
			oldest, at = id, e.usedAt
		}
	}
	delete(r.agents, oldest)
}

// evictFailures makes room among the failures: the expired ones go, and
// when none has expired, an arbitrary half, in O(1) per entry. A failure
// forgotten early is only fetched again sooner, within fetchSlots.
func (r *Resolver) evictFailures(now time.Time) {
	for id, f := range r.failures {
		if !now.Before(f.at.Add(failureTTL)) {
			delete(r.failures, id)
		}
	}
	for id := range r.failures {
		if len(r.failures) < r.maxAgents()/2 {
			break
		}
		delete(r.failures, id)
	}
}

// metadata is the Client ID Metadata Document (webkit/RULES.md choice 1).
type metadata struct {
	ClientID   string `json:"client_id"`
	ClientName string `json:"client_name"`
	JWKSURI    string `json:"jwks_uri"`
}

func (r *Resolver) load(ctx context.Context, clientID string) (*loadedAgent, error) {
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
	if !jose.SameHost(idURL, ju) {
		return nil, invalid("metadata document of %s: jwks_uri is not on the client_id's host", clientID)
	}
	keys, err := r.loadKeys(ctx, m.JWKSURI)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", clientID, err)
	}
	return &loadedAgent{ClientID: clientID, ClientName: m.ClientName, JWKSURI: m.JWKSURI, Keys: keys, LoadedAt: r.now()}, nil
}

func (r *Resolver) loadKeys(ctx context.Context, jwksURI string) ([]jose.PublicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := r.fetch(ctx, jwksURI, "key set", &set); err != nil {
		return nil, err
	}
	if len(set.Keys) > maxKeys {
		return nil, invalid("key set %s: more than %d keys", jwksURI, maxKeys)
	}
	var keys []jose.PublicKey
	for _, raw := range set.Keys {
		// Keys this package cannot use (other types, encryption keys, no
		// kid) are skipped, as RFC 7517 §5 asks.
		k, err := jose.ParseJWK(raw)
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

func (r *Resolver) fetch(ctx context.Context, u, what string, v any) (err error) {
	// A span when the request is traced: labelled by what it loads, never
	// by the agent's URL.
	kind := "jwks"
	if what == "metadata document" {
		kind = "metadata"
	}
	ctx, sp := spans.Start(ctx, "opsgate.identity.fetch", spans.Labels{Kind: kind})
	defer func() { sp.End(spans.Labels{}, err) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return invalid("%s %s: %v", what, u, err)
	}
	req.Header.Set("Accept", "application/json")
	client := r.httpClient()
	// One slot of fetchSlots, for all agents together: a flood of made-up
	// client_ids waits here (and runs out of fetchTimeout) instead of
	// opening connections without bound.
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	case <-ctx.Done():
		return unavailable("%s %s: no fetch slot free: %v", what, u, ctx.Err())
	}
	resp, err := client.Do(req)
	if err != nil {
		var dnsErr *net.DNSError
		switch {
		case errors.Is(err, errRefusedAddress):
			return invalid("%s %s: %v", what, u, err)
		case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
			// NXDOMAIN: the host does not exist, which is the client_id's
			// fault, not an outage (a timeout or a refused connection is).
			return invalid("%s %s: host not found", what, u)
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
	max := r.maxDocument
	if max <= 0 {
		max = defaultMaxDocument
	}
	if resp.ContentLength > max {
		return invalid("%s %s: larger than %d bytes", what, u, max)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err == nil {
		// A read cut short by the deadline can end without an error (the
		// connection closed): it is a slow server, not a wrong document.
		err = ctx.Err()
	}
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
			d := &net.Dialer{Timeout: r.fetchTimeout(), Control: r.checkDial}
			base.DialContext = d.DialContext
			base.DialTLSContext = nil
			base.Proxy = nil
			base.MaxResponseHeaderBytes = 16 << 10
			rt = base
		}
		max := r.fetchSlots
		if max <= 0 {
			max = defaultMaxFetches
		}
		r.slots = make(chan struct{}, max)
		r.client = &http.Client{
			Transport: rt,
			Timeout:   r.fetchTimeout(),
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

// specialIPv4 is the IANA IPv4 Special-Purpose Address Registry (RFC 6890
// and its updates), with multicast and the rest of 240.0.0.0/4. None of it
// is where an agent's documents live; some of it reaches private networks.
var specialIPv4 = prefixes(
	"0.0.0.0/8",       // "this network" (RFC 791)
	"10.0.0.0/8",      // private (RFC 1918)
	"100.64.0.0/10",   // shared address space, carrier-grade NAT (RFC 6598)
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local, cloud metadata services
	"172.16.0.0/12",   // private
	"192.0.0.0/24",    // IETF protocol assignments (RFC 6890)
	"192.0.2.0/24",    // documentation TEST-NET-1 (RFC 5737)
	"192.31.196.0/24", // AS112-v4 (RFC 7535)
	"192.52.193.0/24", // AMT (RFC 7450)
	"192.88.99.0/24",  // deprecated 6to4 relay anycast (RFC 7526)
	"192.168.0.0/16",  // private
	"192.175.48.0/24", // direct delegation AS112 service (RFC 7534)
	"198.18.0.0/15",   // benchmarking (RFC 2544)
	"198.51.100.0/24", // documentation TEST-NET-2
	"203.0.113.0/24",  // documentation TEST-NET-3
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, and 255.255.255.255 broadcast
)

// globalIPv6 is the only IPv6 space dialled: global unicast (IANA IPv6
// Address Space registry). Everything outside it is refused: ::/128,
// ::1/128, IPv4-compatible ::a.b.c.d (::/96), NAT64 64:ff9b::/96 and
// 64:ff9b:1::/48 (which reach IPv4, private included), discard-only
// 100::/64, ULA fc00::/7, link-local fe80::/10, site-local fec0::/10,
// multicast ff00::/8. IPv4-mapped ::ffff:a.b.c.d is checked as IPv4.
var globalIPv6 = netip.MustParsePrefix("2000::/3")

// specialIPv6 is the part of 2000::/3 in the IANA IPv6 Special-Purpose
// Address Registry.
var specialIPv6 = prefixes(
	"2001::/23",         // IETF protocol assignments: Teredo 2001::/32, benchmarking, ORCHID, …
	"2001:db8::/32",     // documentation (RFC 3849)
	"2002::/16",         // 6to4 (RFC 3056): embeds any IPv4 address
	"2620:4f:8000::/48", // direct delegation AS112 service
	"3fff::/20",         // documentation (RFC 9637)
)

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// publicAddr reports whether ip may be dialled: a public unicast address,
// outside every special-purpose range.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	var special []netip.Prefix
	switch {
	case ip.Is4():
		special = specialIPv4
	case ip.Is6() && globalIPv6.Contains(ip):
		special = specialIPv6
	default:
		return false
	}
	for _, p := range special {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// checkURL checks a client_id or jwks_uri: an absolute https URL (http on a
// local host with AllowLocal), no userinfo, no fragment, at most 2048 bytes.
func (r *Resolver) checkURL(raw, what string) (*url.URL, error) {
	if raw == "" {
		return nil, invalid("%s is missing", what)
	}
	if len(raw) > jose.MaxURLLength {
		return nil, invalid("%s is longer than %d bytes", what, jose.MaxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalid("%s: %v", what, err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && r.AllowLocal && discovery.IsLocalHost(u.Hostname()):
	default:
		return nil, invalid("%s %q is not an https URL", what, raw)
	}
	if u.Host == "" || u.Opaque != "" || u.User != nil || u.Fragment != "" || strings.ContainsAny(raw, "#\\") {
		return nil, invalid("%s %q must have a host and no userinfo or fragment", what, raw)
	}
	return u, nil
}
