package gateway

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/templates"
)

// Config is a gateway's configuration, read from its YAML file by [Load]
// or [Parse], which check all of it: a mistake is an error naming the file,
// the line and the field, before anything is served. README.md beside
// this package is the reference of the file.
type Config struct {
	file       string
	listen     string
	admin      string // admin_listen: health, readiness and metrics; "" for none
	shutdown   time.Duration
	origin     string
	upstream   *url.URL
	name       string
	allowLocal bool
	store      storeConfig
	keys       [][]byte
	ownLogin   []string
	// ownFlow is own_login_flow: ownFlowRefuse (the default) or
	// ownFlowUpstream.
	ownFlow string
	chrome  templates.Chrome
	actions []*action

	tokens         *tokenConfig // access_tokens: nil for no signed-in joins
	identityPrefix string       // identity_headers
	identityKey    []byte       // identity_key_env's secret: signs the identity; nil for none
	identityKeyEnv string
	identityOn     string // identity_on: identityOnApproved or identityOnJoined

	routing   string   // routingLenient or routingStrict
	pass      []*route // pass: unsafe requests open to agents' browsers
	overrides []string // method_override: the conventions the upstream honours
	timeouts  timeouts
}

// timeouts bound how long a request may take (the config's timeouts).
type timeouts struct {
	header   time.Duration // the request's headers, from the connection's start
	body     time.Duration // the request's body, from its headers
	upstream time.Duration // the upstream's answer (its headers), from the request sent
	idle     time.Duration // an idle keep-alive connection, the browser's and the upstream's
}

// When the gateway tells the upstream whom a request is for (identity_on).
const (
	identityOnApproved = "approved" // on the approved repeat alone
	identityOnJoined   = "joined"   // on every request of a joined browser
)

// tokenConfig is the access_tokens section: the issuer whose JWTs sign a
// join in (§4 W54).
type tokenConfig struct {
	issuer, audience, jwksURL string
}

// storeConfig is the store section: memory, or a Redis.
type storeConfig struct {
	redis      *redis.Options // nil: memory
	durability redisstore.DurabilityMode
	replicas   int
	prefix     string
}

// action is one entry of actions: a gated request and how to describe it.
type action struct {
	line    int
	pattern string // as the config writes it, "POST /orders/{order}/exchange"
	route   *route
	kind    string
	fields  reads // what key, terms and summary read

	// Described by the config: key, terms, summary, lifetime.
	key      *template
	terms    *termsTree
	summary  *template
	lifetime time.Duration

	// Or described by the upstream: the URL the gateway asks.
	describe        *url.URL
	describeTimeout time.Duration
	describeHeaders []string
}

// reads reports whether the action's key, terms or summary read src.
func (a *action) reads(src string) bool { return len(a.fields[src]) > 0 }

// Defaults of the config file.
const (
	defaultListen          = ":8080"
	defaultDescribeTimeout = 2 * time.Second
	defaultShutdown        = 30 * time.Second
)

// The timeouts when the config gives none.
var defaultTimeouts = timeouts{
	header:   10 * time.Second,
	body:     30 * time.Second,
	upstream: 60 * time.Second,
	idle:     2 * time.Minute,
}

// Load reads and checks the config file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	return Parse(path, data)
}

// Parse reads and checks a config file's contents; name is the file's name
// in errors, and the directory that header_file and footer_file are
// relative to. Cookie keys are read from the environment variables the
// file names.
func Parse(name string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &parser{file: name}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty; it needs at least origin and upstream", name)
	}
	c, err := p.config(doc.Content[0])
	if err != nil {
		return nil, err
	}
	c.file = name
	return c, nil
}

// parser reads the YAML tree, naming the file, line and field of each
// mistake.
type parser struct{ file string }

// errAt is a mistake at node n, in the field named field.
func (p *parser) errAt(n *yaml.Node, field, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s: %s", p.file, n.Line, field, fmt.Sprintf(format, args...))
}

// field is one member of a mapping: its key's node and its value.
type field struct {
	key, value *yaml.Node
}

// mapping returns n's members by name, refusing a node that is not a
// mapping, a repeated member, and a member not in allowed.
func (p *parser) mapping(n *yaml.Node, name string, allowed ...string) (map[string]field, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, name, "want a mapping (name: value lines), got %s", describeNode(n))
	}
	out := map[string]field{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := k.Value
		if name != "" {
			full = name + "." + k.Value
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errAt(k, full, "given twice")
		}
		known := false
		for _, a := range allowed {
			known = known || a == k.Value
		}
		if !known {
			return nil, p.errAt(k, full, "unknown field; want one of %s", strings.Join(allowed, ", "))
		}
		out[k.Value] = field{key: k, value: v}
	}
	return out, nil
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// str returns a scalar's text.
func (p *parser) str(f field, name string) (string, error) {
	if f.value.Kind != yaml.ScalarNode || f.value.Tag == "!!null" {
		return "", p.errAt(f.value, name, "want a string, got %s", describeNode(f.value))
	}
	return f.value.Value, nil
}

func (p *parser) boolean(f field, name string) (bool, error) {
	var b bool
	if f.value.Kind != yaml.ScalarNode || f.value.Decode(&b) != nil {
		return false, p.errAt(f.value, name, "want true or false, got %s", describeNode(f.value))
	}
	return b, nil
}

func (p *parser) duration(f field, name string) (time.Duration, error) {
	s, err := p.str(f, name)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, p.errAt(f.value, name, "want a positive duration such as 10m or 2s, got %q", s)
	}
	return d, nil
}

func (p *parser) strings(f field, name string) ([]string, error) {
	n := f.value
	if n.Kind != yaml.SequenceNode {
		return nil, p.errAt(n, name, "want a list, got %s", describeNode(n))
	}
	var out []string
	for i, e := range n.Content {
		s, err := p.str(field{value: e}, fmt.Sprintf("%s[%d]", name, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (p *parser) config(root *yaml.Node) (*Config, error) {
	m, err := p.mapping(root, "", "listen", "admin_listen", "shutdown_timeout", "origin", "upstream", "name", "allow_local", "store", "cookie_keys", "own_login_cookies", "chrome", "actions", "access_tokens", "identity_headers",
		"identity_key_env", "identity_on", "routing", "pass", "method_override", "timeouts", "own_login_flow")
	if err != nil {
		return nil, err
	}
	c := &Config{listen: defaultListen, shutdown: defaultShutdown, identityPrefix: defaultIdentityPrefix,
		identityOn: identityOnApproved, routing: routingLenient, timeouts: defaultTimeouts, ownFlow: ownFlowRefuse}
	if f, ok := m["allow_local"]; ok {
		if c.allowLocal, err = p.boolean(f, "allow_local"); err != nil {
			return nil, err
		}
	}
	if f, ok := m["listen"]; ok {
		if c.listen, err = p.str(f, "listen"); err != nil {
			return nil, err
		}
	}
	if f, ok := m["admin_listen"]; ok {
		if c.admin, err = p.str(f, "admin_listen"); err != nil {
			return nil, err
		}
		if c.admin == c.listen {
			return nil, p.errAt(f.value, "admin_listen", "the same address as listen: metrics and health go on a listener of their own")
		}
	}
	if f, ok := m["shutdown_timeout"]; ok {
		if c.shutdown, err = p.duration(f, "shutdown_timeout"); err != nil {
			return nil, err
		}
	}
	f, ok := m["origin"]
	if !ok {
		return nil, fmt.Errorf("%s:%d: origin: missing; the website's public origin, such as https://shop.example", p.file, root.Line)
	}
	if c.origin, err = p.origin(f, c.allowLocal); err != nil {
		return nil, err
	}
	f, ok = m["upstream"]
	if !ok {
		return nil, fmt.Errorf("%s:%d: upstream: missing; the website's own address, such as http://127.0.0.1:3000", p.file, root.Line)
	}
	if c.upstream, err = p.upstream(f); err != nil {
		return nil, err
	}
	if f, ok := m["name"]; ok {
		if c.name, err = p.str(f, "name"); err != nil {
			return nil, err
		}
	}
	if f, ok := m["store"]; ok {
		if c.store, err = p.storeSection(f); err != nil {
			return nil, err
		}
	}
	if f, ok := m["cookie_keys"]; ok {
		if c.keys, err = p.cookieKeys(f); err != nil {
			return nil, err
		}
	} else if c.store.redis != nil {
		return nil, fmt.Errorf("%s:%d: cookie_keys: missing; with a Redis store every instance needs the same keys (from the environment)", p.file, root.Line)
	}
	if f, ok := m["own_login_cookies"]; ok {
		if c.ownLogin, err = p.strings(f, "own_login_cookies"); err != nil {
			return nil, err
		}
		for i, name := range c.ownLogin {
			if !validCookieName(name) || isGatewayCookie(name) {
				return nil, p.errAt(f.value.Content[i], fmt.Sprintf("own_login_cookies[%d]", i), "%q is not a cookie name of the website's own (opsgate_* cookies are the gateway's)", name)
			}
		}
	}
	c.chrome.SiteName = c.name
	if f, ok := m["chrome"]; ok {
		if err := p.chromeSection(f, &c.chrome); err != nil {
			return nil, err
		}
	}
	if f, ok := m["own_login_flow"]; ok {
		if c.ownFlow, err = p.str(f, "own_login_flow"); err != nil {
			return nil, err
		}
		if c.ownFlow != ownFlowRefuse && c.ownFlow != ownFlowUpstream {
			return nil, p.errAt(f.value, "own_login_flow", "want refuse (the default: an agent's browser with your own login performs no gated action) or upstream (your website confirms each gated action with the person itself), got %q", c.ownFlow)
		}
		if len(c.ownLogin) == 0 {
			return nil, p.errAt(f.value, "own_login_flow", "without own_login_cookies no browser has your own login")
		}
	}
	if f, ok := m["routing"]; ok {
		if c.routing, err = p.str(f, "routing"); err != nil {
			return nil, err
		}
		if c.routing != routingLenient && c.routing != routingStrict {
			return nil, p.errAt(f.value, "routing", "want lenient (the default: case and one trailing slash ignored, as most websites route) or strict, got %q", c.routing)
		}
	}
	strict := c.routing == routingStrict
	if f, ok := m["actions"]; ok {
		if c.actions, err = p.actions(f, strict); err != nil {
			return nil, err
		}
	}
	if f, ok := m["pass"]; ok {
		if c.pass, err = p.passes(f, strict, c.actions); err != nil {
			return nil, err
		}
	}
	if f, ok := m["method_override"]; ok {
		if c.overrides, err = p.methodOverride(f); err != nil {
			return nil, err
		}
	}
	if f, ok := m["timeouts"]; ok {
		if err := p.timeoutsSection(f, &c.timeouts); err != nil {
			return nil, err
		}
	}
	if f, ok := m["identity_key_env"]; ok {
		if c.identityKeyEnv, err = p.str(f, "identity_key_env"); err != nil {
			return nil, err
		}
		if c.identityKey, err = identitySecret(c.identityKeyEnv); err != nil {
			return nil, p.errAt(f.value, "identity_key_env", "%v", err)
		}
	}
	if f, ok := m["identity_on"]; ok {
		if c.identityOn, err = p.str(f, "identity_on"); err != nil {
			return nil, err
		}
		if c.identityOn != identityOnApproved && c.identityOn != identityOnJoined {
			return nil, p.errAt(f.value, "identity_on", "want approved (the default: the approved repeat alone) or joined (every request of an agent's browser), got %q", c.identityOn)
		}
	}
	if f, ok := m["access_tokens"]; ok {
		if c.tokens, err = p.accessTokens(f, c.allowLocal); err != nil {
			return nil, err
		}
	}
	if f, ok := m["identity_headers"]; ok {
		if c.identityPrefix, err = p.str(f, "identity_headers"); err != nil {
			return nil, err
		}
		if !validHeaderName(c.identityPrefix) || !strings.HasSuffix(c.identityPrefix, "-") || len(c.identityPrefix) < 3 {
			return nil, p.errAt(f.value, "identity_headers", "want a header-name prefix ending in -, such as X-Opsgate-, got %q", c.identityPrefix)
		}
		c.identityPrefix = http.CanonicalHeaderKey(c.identityPrefix)
	}
	return c, nil
}

func (p *parser) accessTokens(f field, allowLocal bool) (*tokenConfig, error) {
	m, err := p.mapping(f.value, "access_tokens", "issuer", "audience", "jwks_url")
	if err != nil {
		return nil, err
	}
	tc := &tokenConfig{}
	for _, k := range []struct {
		name string
		dst  *string
	}{{"issuer", &tc.issuer}, {"audience", &tc.audience}, {"jwks_url", &tc.jwksURL}} {
		sf, ok := m[k.name]
		if !ok {
			if k.name == "audience" {
				continue
			}
			return nil, p.errAt(f.value, "access_tokens."+k.name, "missing")
		}
		if *k.dst, err = p.str(sf, "access_tokens."+k.name); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(tc.jwksURL)
	if err != nil || u.Host == "" || !(u.Scheme == "https" || u.Scheme == "http" && allowLocal) {
		return nil, p.errAt(m["jwks_url"].value, "access_tokens.jwks_url", "want the issuer's https URL of its key set (http only with allow_local), got %q", tc.jwksURL)
	}
	return tc, nil
}

func (p *parser) origin(f field, allowLocal bool) (string, error) {
	s, err := p.str(f, "origin")
	if err != nil {
		return "", err
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil ||
		strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", p.errAt(f.value, "origin", "want scheme://host[:port] such as https://shop.example, got %q", s)
	}
	if u.Scheme == "http" && !allowLocal {
		return "", p.errAt(f.value, "origin", "%q is plain http: browsers and agents need https; for local development on localhost, set allow_local: true", s)
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host), nil
}

func (p *parser) upstream(f field) (*url.URL, error) {
	s, err := p.str(f, "upstream")
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, p.errAt(f.value, "upstream", "want the website's own address, http(s)://host[:port][/path], got %q", s)
	}
	return u, nil
}

func (p *parser) storeSection(f field) (storeConfig, error) {
	var sc storeConfig
	if f.value.Kind == yaml.ScalarNode {
		if f.value.Value != "memory" {
			return sc, p.errAt(f.value, "store", "want memory, or a mapping with redis: URL, got %q", f.value.Value)
		}
		return sc, nil
	}
	m, err := p.mapping(f.value, "store", "redis", "durability", "replicas", "prefix")
	if err != nil {
		return sc, err
	}
	rf, ok := m["redis"]
	if !ok {
		return sc, p.errAt(f.value, "store.redis", "missing; a Redis URL such as redis://localhost:6379/0 (or write store: memory)")
	}
	raw, err := p.str(rf, "store.redis")
	if err != nil {
		return sc, err
	}
	if sc.redis, err = redis.ParseURL(raw); err != nil {
		return sc, p.errAt(rf.value, "store.redis", "%v", err)
	}
	sc.redis.ContextTimeoutEnabled = true
	if df, ok := m["durability"]; ok {
		s, err := p.str(df, "store.durability")
		if err != nil {
			return sc, err
		}
		switch s {
		case "disk":
			sc.durability = redisstore.DurableDisk
		case "replicas":
			sc.durability = redisstore.DurableReplicas
		case "server":
			sc.durability = redisstore.DurableServer
		case "none":
			sc.durability = redisstore.DurableNone
		default:
			return sc, p.errAt(df.value, "store.durability", "want disk, replicas, server or none, got %q", s)
		}
	}
	if rf, ok := m["replicas"]; ok {
		n, err := strconv.Atoi(rf.value.Value)
		if err != nil || n < 1 || rf.value.Kind != yaml.ScalarNode {
			return sc, p.errAt(rf.value, "store.replicas", "want a whole number of at least 1, got %s", describeNode(rf.value))
		}
		if sc.durability != redisstore.DurableReplicas {
			return sc, p.errAt(rf.key, "store.replicas", "only with durability: replicas")
		}
		sc.replicas = n
	}
	if pf, ok := m["prefix"]; ok {
		if sc.prefix, err = p.str(pf, "store.prefix"); err != nil {
			return sc, err
		}
	}
	return sc, nil
}

// cookieKeys reads the pairs of environment variables that hold the cookie
// keys, base64: the first pair signs new cookies, the others are older
// keys still accepted (rotation).
func (p *parser) cookieKeys(f field) ([][]byte, error) {
	if f.value.Kind != yaml.SequenceNode || len(f.value.Content) == 0 {
		return nil, p.errAt(f.value, "cookie_keys", "want a list of {hash_env: NAME, encryption_env: NAME}, got %s", describeNode(f.value))
	}
	var keys [][]byte
	for i, e := range f.value.Content {
		name := fmt.Sprintf("cookie_keys[%d]", i)
		m, err := p.mapping(e, name, "hash_env", "encryption_env")
		if err != nil {
			return nil, err
		}
		for _, k := range []struct {
			field string
			sizes []int
		}{{"hash_env", []int{32, 64}}, {"encryption_env", []int{16, 24, 32}}} {
			kf, ok := m[k.field]
			if !ok {
				return nil, p.errAt(e, name+"."+k.field, "missing; the name of an environment variable holding the key in base64")
			}
			env, err := p.str(kf, name+"."+k.field)
			if err != nil {
				return nil, err
			}
			key, err := envKey(env, k.sizes)
			if err != nil {
				return nil, p.errAt(kf.value, name+"."+k.field, "%v", err)
			}
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// envKey reads a base64 key of one of sizes bytes from environment
// variable env. It never says the value.
func envKey(env string, sizes []int) ([]byte, error) {
	v, ok := os.LookupEnv(env)
	if !ok || strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("environment variable %s is not set (make one with: openssl rand -base64 %d)", env, sizes[len(sizes)-1])
	}
	v = strings.Join(strings.Fields(v), "")
	key, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		key, err = base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
	}
	if err != nil {
		return nil, fmt.Errorf("environment variable %s is not base64", env)
	}
	for _, n := range sizes {
		if len(key) == n {
			return key, nil
		}
	}
	return nil, fmt.Errorf("environment variable %s holds %d bytes; want %s (openssl rand -base64 %d)", env, len(key), joinInts(sizes), sizes[len(sizes)-1])
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " or ")
}

func (p *parser) chromeSection(f field, ch *templates.Chrome) error {
	m, err := p.mapping(f.value, "chrome", "site_name", "home_url", "back_url", "back_label", "stylesheets", "header", "header_file", "footer", "footer_file")
	if err != nil {
		return err
	}
	strs := map[string]*string{"site_name": &ch.SiteName, "home_url": &ch.HomeURL, "back_url": &ch.BackURL, "back_label": &ch.BackLabel}
	for name, dst := range strs {
		if sf, ok := m[name]; ok {
			if *dst, err = p.str(sf, "chrome."+name); err != nil {
				return err
			}
		}
	}
	if sf, ok := m["stylesheets"]; ok {
		if ch.Stylesheets, err = p.strings(sf, "chrome.stylesheets"); err != nil {
			return err
		}
	}
	for _, part := range []struct {
		name string
		dst  *templ.Component
	}{{"header", &ch.Header}, {"footer", &ch.Footer}} {
		inline, hasInline := m[part.name]
		file, hasFile := m[part.name+"_file"]
		var html string
		switch {
		case hasInline && hasFile:
			return p.errAt(file.key, "chrome."+part.name+"_file", "give %s or %s_file, not both", part.name, part.name)
		case hasInline:
			if html, err = p.str(inline, "chrome."+part.name); err != nil {
				return err
			}
		case hasFile:
			path, err := p.str(file, "chrome."+part.name+"_file")
			if err != nil {
				return err
			}
			if !filepath.IsAbs(path) {
				path = filepath.Join(filepath.Dir(p.file), path)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return p.errAt(file.value, "chrome."+part.name+"_file", "%v", err)
			}
			html = string(b)
		default:
			continue
		}
		// The website's own HTML fragment, as it wrote it: trusted like
		// the rest of the config, and the same on every page (W64).
		*part.dst = templ.Raw(html)
	}
	return nil
}

// kindRE is what an action's kind may be: a short metrics label.
var kindRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// reserved are the paths the gateway serves itself (endpoint.Mount).
var reserved = []string{"/poppy/operations", "/poppy/join", "/.well-known/poppy.json", "/_opsgate/"}

func (p *parser) actions(f field, strict bool) ([]*action, error) {
	if f.value.Kind != yaml.SequenceNode {
		return nil, p.errAt(f.value, "actions", "want a list of actions, got %s", describeNode(f.value))
	}
	// Only to find two patterns that match the same requests, neither
	// more specific (as the gateway matches them: lenient routing lower
	// cases their literals and drops a trailing slash).
	mux := http.NewServeMux()
	var out []*action
	for i, e := range f.value.Content {
		name := fmt.Sprintf("actions[%d]", i)
		a, muxPattern, err := p.action(e, name, strict)
		if err != nil {
			return nil, err
		}
		if err := register(mux, muxPattern, http.NotFoundHandler()); err != nil {
			return nil, p.errAt(e, name+".match", "%s matches the same requests as another action: %v", a.pattern, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// passes reads pass: the unsafe requests (POST, PUT, PATCH, DELETE…)
// that an agent's browser may send without approval. Any other unsafe
// request of an agent's browser that no action gates is refused.
func (p *parser) passes(f field, strict bool, actions []*action) ([]*route, error) {
	if f.value.Kind != yaml.SequenceNode {
		return nil, p.errAt(f.value, "pass", "want a list of patterns such as \"POST /cart/items\", got %s", describeNode(f.value))
	}
	mux := http.NewServeMux()
	var out []*route
	for i, e := range f.value.Content {
		name := fmt.Sprintf("pass[%d]", i)
		s, err := p.str(field{value: e}, name)
		if err != nil {
			return nil, err
		}
		rt, muxPattern, err := parsePattern(s, strict, true)
		if err != nil {
			return nil, p.errAt(e, name, "%v", err)
		}
		if rt.method != "" && safeMethod(rt.method) {
			return nil, p.errAt(e, name, "%s requests always pass; name the unsafe ones (POST, PUT, PATCH, DELETE…)", rt.method)
		}
		if err := reservedPath(rt); err != nil {
			return nil, p.errAt(e, name, "%v", err)
		}
		if err := register(mux, muxPattern, http.NotFoundHandler()); err != nil {
			return nil, p.errAt(e, name, "%v", err)
		}
		rt.line = e.Line
		out = append(out, rt)
	}
	return out, nil
}

// The method-override conventions the gateway knows (method_override).
var (
	overrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}
	overrideField   = "_method" // a form field, or a top-level member of a JSON body
)

func (p *parser) methodOverride(f field) ([]string, error) {
	names, err := p.strings(f, "method_override")
	if err != nil {
		return nil, err
	}
	var out []string
	for i, n := range names {
		canon := http.CanonicalHeaderKey(n)
		switch {
		case n == overrideField:
			canon = n
		case slices.Contains(overrideHeaders, canon) && !strings.Contains(n, "_"):
		default:
			return nil, p.errAt(f.value.Content[i], fmt.Sprintf("method_override[%d]", i), "want X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override or _method, got %q", n)
		}
		if slices.Contains(out, canon) {
			return nil, p.errAt(f.value.Content[i], fmt.Sprintf("method_override[%d]", i), "given twice")
		}
		out = append(out, canon)
	}
	return out, nil
}

func (p *parser) timeoutsSection(f field, t *timeouts) error {
	m, err := p.mapping(f.value, "timeouts", "header", "body", "upstream", "idle")
	if err != nil {
		return err
	}
	for _, k := range []struct {
		name string
		dst  *time.Duration
	}{{"header", &t.header}, {"body", &t.body}, {"upstream", &t.upstream}, {"idle", &t.idle}} {
		if tf, ok := m[k.name]; ok {
			if *k.dst, err = p.duration(tf, "timeouts."+k.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// identitySecret reads the secret that signs the identity headers from
// environment variable env: at least 32 printable characters, no space,
// used as it is (the upstream reads the same variable). It never says
// the value.
func identitySecret(env string) ([]byte, error) {
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return nil, fmt.Errorf("environment variable %s is not set (make one with: openssl rand -hex 32)", env)
	}
	for _, c := range []byte(v) {
		if c <= ' ' || c >= 0x7f {
			return nil, fmt.Errorf("environment variable %s holds a space or a character that is not printable ASCII (make one with: openssl rand -hex 32)", env)
		}
	}
	if len(v) < 32 {
		return nil, fmt.Errorf("environment variable %s holds %d characters; want at least 32 (openssl rand -hex 32)", env, len(v))
	}
	return []byte(v), nil
}

// reservedPath refuses a pattern on the gateway's own routes.
func reservedPath(rt *route) error {
	var path strings.Builder
	for _, s := range rt.segs {
		path.WriteString("/" + s.lit)
		if s.wild != "" {
			break
		}
	}
	for _, rp := range reserved {
		if strings.HasPrefix(strings.ToLower(path.String()+"/"), rp) || strings.EqualFold(path.String(), strings.TrimSuffix(rp, "/")) {
			return fmt.Errorf("%s is the gateway's own route", rp)
		}
	}
	return nil
}

// register is mux.Handle, with its panic (a bad or conflicting pattern) an
// error.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}

func (p *parser) action(n *yaml.Node, name string, strict bool) (a *action, muxPattern string, err error) {
	m, err := p.mapping(n, name, "match", "key", "terms", "summary", "lifetime", "kind", "describe", "describe_timeout", "describe_headers")
	if err != nil {
		return nil, "", err
	}
	a = &action{line: n.Line}
	mf, ok := m["match"]
	if !ok {
		return nil, "", p.errAt(n, name+".match", "missing; a method and path pattern such as POST /orders/{order}/exchange")
	}
	if a.pattern, err = p.str(mf, name+".match"); err != nil {
		return nil, "", err
	}
	if a.route, muxPattern, err = parsePattern(a.pattern, strict, false); err != nil {
		return nil, "", p.errAt(mf.value, name+".match", "%v", err)
	}
	if safeMethod(a.route.method) {
		return nil, "", p.errAt(mf.value, name+".match", "%s requests are safe and never gated; gate the request that changes something (POST, PUT, PATCH, DELETE)", a.route.method)
	}
	if err := reservedPath(a.route); err != nil {
		return nil, "", p.errAt(mf.value, name+".match", "%v", err)
	}
	a.route.action, a.route.line = a, n.Line
	wildcards := a.route.wildcards()
	if kf, ok := m["kind"]; ok {
		if a.kind, err = p.str(kf, name+".kind"); err != nil {
			return nil, "", err
		}
		if !kindRE.MatchString(a.kind) {
			return nil, "", p.errAt(kf.value, name+".kind", "want a short label of lower-case letters, digits and _ such as exchange (a metrics label, never an ID), got %q", a.kind)
		}
	}
	if df, ok := m["describe"]; ok {
		return a, muxPattern, p.describedAction(a, m, df, name)
	}
	for _, k := range []string{"describe_timeout", "describe_headers"} {
		if f, ok := m[k]; ok {
			return nil, "", p.errAt(f.key, name+"."+k, "only with describe")
		}
	}
	kf, ok := m["key"]
	if !ok {
		return nil, "", p.errAt(n, name+".key", "missing; the action's key, such as exchange:{path.order} (or describe: a URL on the upstream)")
	}
	if a.key, err = p.template(kf, name+".key", wildcards); err != nil {
		return nil, "", err
	}
	if len(a.key.parts) == 0 {
		return nil, "", p.errAt(kf.value, name+".key", "empty")
	}
	sf, ok := m["summary"]
	if !ok {
		return nil, "", p.errAt(n, name+".summary", "missing; the terms in plain words for the person approving, such as Exchange order {path.order} for size {form.size}.")
	}
	if a.summary, err = p.template(sf, name+".summary", wildcards); err != nil {
		return nil, "", err
	}
	tf, ok := m["terms"]
	if !ok {
		return nil, "", p.errAt(n, name+".terms", "missing; a mapping of everything the action depends on, such as size: \"{form.size}\"")
	}
	if tf.value.Kind != yaml.MappingNode {
		return nil, "", p.errAt(tf.value, name+".terms", "want a mapping (terms are a JSON object), got %s", describeNode(tf.value))
	}
	if a.terms, err = p.terms(tf.value, name+".terms", wildcards); err != nil {
		return nil, "", err
	}
	if lf, ok := m["lifetime"]; ok {
		if a.lifetime, err = p.duration(lf, name+".lifetime"); err != nil {
			return nil, "", err
		}
	}
	a.fields = readsOf([]*template{a.key, a.summary}, a.terms)
	if a.reads("form") && a.reads("json") {
		return nil, "", p.errAt(n, name, "reads both {form.…} and {json.…}: a request's body is a form or JSON, not both")
	}
	return a, muxPattern, nil
}

func (p *parser) describedAction(a *action, m map[string]field, df field, name string) error {
	for _, k := range []string{"key", "terms", "summary", "lifetime"} {
		if f, ok := m[k]; ok {
			return p.errAt(f.key, name+"."+k, "give describe or key, terms, summary and lifetime, not both: the describe URL answers them")
		}
	}
	s, err := p.str(df, name+".describe")
	if err != nil {
		return err
	}
	u, err := url.Parse(s)
	if err != nil || (u.IsAbs() && u.Host == "") || (!u.IsAbs() && !strings.HasPrefix(u.Path, "/")) || (u.IsAbs() && u.Scheme != "http" && u.Scheme != "https") {
		return p.errAt(df.value, name+".describe", "want a path on the upstream such as /opsgate/describe, or an http(s) URL, got %q", s)
	}
	a.describe = u
	a.describeTimeout = defaultDescribeTimeout
	if tf, ok := m["describe_timeout"]; ok {
		if a.describeTimeout, err = p.duration(tf, name+".describe_timeout"); err != nil {
			return err
		}
	}
	if hf, ok := m["describe_headers"]; ok {
		if a.describeHeaders, err = p.strings(hf, name+".describe_headers"); err != nil {
			return err
		}
		for i, h := range a.describeHeaders {
			if !validHeaderName(h) {
				return p.errAt(hf.value.Content[i], fmt.Sprintf("%s.describe_headers[%d]", name, i), "%q is not a header name", h)
			}
			a.describeHeaders[i] = http.CanonicalHeaderKey(h)
		}
	}
	return nil
}

func (p *parser) template(f field, name string, wildcards map[string]bool) (*template, error) {
	s, err := p.str(f, name)
	if err != nil {
		return nil, err
	}
	t, err := parseTemplate(s, wildcards)
	if err != nil {
		return nil, p.errAt(f.value, name, "%v", err)
	}
	return &t, nil
}

// terms reads the terms mapping: strings are templates, other scalars
// literals, mappings and lists nest.
func (p *parser) terms(n *yaml.Node, name string, wildcards map[string]bool) (*termsTree, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		t := &termsTree{kind: treeObject, object: map[string]*termsTree{}}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if _, dup := t.object[k.Value]; dup {
				return nil, p.errAt(k, name+"."+k.Value, "given twice")
			}
			sub, err := p.terms(v, name+"."+k.Value, wildcards)
			if err != nil {
				return nil, err
			}
			t.object[k.Value] = sub
		}
		return t, nil
	case yaml.SequenceNode:
		t := &termsTree{kind: treeList}
		for i, e := range n.Content {
			sub, err := p.terms(e, fmt.Sprintf("%s[%d]", name, i), wildcards)
			if err != nil {
				return nil, err
			}
			t.list = append(t.list, sub)
		}
		return t, nil
	case yaml.ScalarNode:
		if n.Tag == "!!str" {
			tm, err := parseTemplate(n.Value, wildcards)
			if err != nil {
				return nil, p.errAt(n, name, "%v", err)
			}
			if len(tm.parts) == 1 && tm.parts[0].src == "" || len(tm.parts) == 0 {
				return &termsTree{kind: treeLiteral, lit: n.Value}, nil
			}
			return &termsTree{kind: treeTemplate, tmpl: &tm}, nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, p.errAt(n, name, "%v", err)
		}
		switch v := v.(type) {
		case float64:
			if math.IsInf(v, 0) || math.IsNaN(v) {
				return nil, p.errAt(n, name, "%s is not a JSON number", n.Value)
			}
			return &termsTree{kind: treeLiteral, lit: v}, nil
		case nil, bool, int, int64, uint64:
			return &termsTree{kind: treeLiteral, lit: v}, nil
		}
		return nil, p.errAt(n, name, "want a string, number, true, false or null, got %s", describeNode(n))
	}
	return nil, p.errAt(n, name, "want a value, got %s", describeNode(n))
}

// validCookieName reports whether s is a cookie name (an RFC 7230 token).
func validCookieName(s string) bool { return validHeaderName(s) }

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// isGatewayCookie reports whether a cookie is the gateway's own (the join
// cookie and its marker): never the upstream's, never forwarded to it.
func isGatewayCookie(name string) bool {
	return strings.HasPrefix(strings.TrimPrefix(name, "__Host-"), "opsgate_")
}
