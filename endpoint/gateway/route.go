package gateway

import (
	"fmt"
	"net/http"
	"strings"
)

// Routing: the gateway decides which requests are gated on its own
// reading of the path, and the upstream acts on another. Websites route
// leniently: Express's default router, Rails, Django and Laravel in
// common settings send /Orders/7/exchange, /orders/7/EXCHANGE and
// /orders/7/exchange/ to the handler of /orders/{order}/exchange. So the
// gateway matches the same way (§3 "MUST NOT start the action before it
// receives an approval for it"):
//
//   - the path is percent-decoded exactly once (%2F is a slash, %2e a dot)
//     and its dot segments are removed exactly once; empty segments (//)
//     are dropped;
//   - by default (routing: lenient) literal segments match whatever their
//     case, and one trailing slash is ignored; routing: strict, for an
//     upstream known to be strict, matches case and trailing slash
//     exactly.
//
// A path that a website may read in yet another way, from an agent's
// browser with an unsafe method, is refused rather than guessed at
// (cleanPath).

// Routing modes (the config's routing).
const (
	routingLenient = "lenient"
	routingStrict  = "strict"
)

// The values of own_login_flow (§4 W56).
const (
	ownFlowRefuse   = "refuse"
	ownFlowUpstream = "upstream"
)

// patternSeg is one segment of a path pattern: a literal, a wildcard
// {name}, or a final {name...} (the rest of the path).
type patternSeg struct {
	lit  string // literal text: lower case under lenient routing
	wild string // the wildcard's name; "" for a literal
	rest bool   // {name...}
}

// route is one pattern of the config, gated (action) or open to agents
// (pass), ready to match.
type route struct {
	source   string // as the config writes it
	line     int    // its line in the config file
	method   string // "" for any method (a pass of "*")
	segs     []patternSeg
	trailing bool // strict routing: the path ends with a slash
	action   *action
}

// parsePattern reads "METHOD /path" (method "*" when anyMethod allows it)
// under the routing mode. It returns the route and the ServeMux pattern
// that stands for it, with which overlapping patterns are found.
func parsePattern(pattern string, strict, anyMethod bool) (*route, string, error) {
	method, path, ok := strings.Cut(strings.TrimSpace(pattern), " ")
	path = strings.TrimSpace(path)
	if !ok || method == "" || method != strings.ToUpper(method) || path == "" {
		return nil, "", fmt.Errorf("want a method and a path such as POST /orders/{order}/exchange, got %q", pattern)
	}
	if method == "*" && !anyMethod {
		return nil, "", fmt.Errorf("want a method such as POST, got *")
	}
	if method != "*" && !validHeaderName(method) {
		return nil, "", fmt.Errorf("%q is not a method", method)
	}
	if !strings.HasPrefix(path, "/") {
		return nil, "", fmt.Errorf("%q: the path must start with / (the gateway serves one origin: no host)", path)
	}
	rt := &route{source: strings.TrimSpace(pattern)}
	if method != "*" {
		rt.method = method
	}
	trimmed := strings.TrimPrefix(path, "/")
	var raw []string
	if trimmed != "" {
		raw = strings.Split(trimmed, "/")
	}
	if n := len(raw); n > 0 && (raw[n-1] == "" || raw[n-1] == "{$}") {
		rt.trailing = true
		raw = raw[:n-1]
	}
	var mux strings.Builder // the ServeMux pattern
	if rt.method != "" {
		mux.WriteString(rt.method + " ")
	}
	for i, s := range raw {
		switch {
		case s == "" || s == "." || s == "..":
			return nil, "", fmt.Errorf("%q: an empty, . or .. segment", path)
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			name := s[1 : len(s)-1]
			seg := patternSeg{wild: name}
			if n, ok := strings.CutSuffix(name, "..."); ok {
				if i != len(raw)-1 || rt.trailing {
					return nil, "", fmt.Errorf("%q: {%s} must be the last segment", path, name)
				}
				seg = patternSeg{wild: n, rest: true}
			}
			if seg.wild == "" || seg.wild == "$" || strings.ContainsAny(seg.wild, "{}/.") {
				return nil, "", fmt.Errorf("%q: bad wildcard {%s}", path, name)
			}
			rt.segs = append(rt.segs, seg)
			mux.WriteString("/" + s)
		case strings.ContainsAny(s, "{}"):
			return nil, "", fmt.Errorf("%q: a wildcard must be a whole segment, such as /orders/{order}", path)
		default:
			lit := s
			if !strict {
				lit = strings.ToLower(s)
			}
			// The pattern's literal is matched against decoded paths: it
			// is written decoded too.
			if strings.ContainsAny(lit, "%?#\\;") || hasControl(lit) {
				return nil, "", fmt.Errorf("%q: a literal segment with %%, ?, #, \\ or ; (write it decoded)", path)
			}
			rt.segs = append(rt.segs, patternSeg{lit: lit})
			mux.WriteString("/" + muxEscape(lit))
		}
	}
	if !strict {
		rt.trailing = false // one trailing slash is ignored
	}
	switch {
	case len(rt.segs) > 0 && rt.segs[len(rt.segs)-1].rest:
	case rt.trailing || len(rt.segs) == 0:
		mux.WriteString("/{$}") // exactly the path, with its slash
	}
	return rt, mux.String(), nil
}

// muxEscape escapes a literal segment for a ServeMux pattern, which reads
// its literals unescaped.
func muxEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c == '{' || c == '}' || c == ' ' || c >= 0x80 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func hasControl(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// wildcards returns the names of rt's wildcards.
func (rt *route) wildcards() map[string]bool {
	w := map[string]bool{}
	for _, s := range rt.segs {
		if s.wild != "" {
			w[s.wild] = true
		}
	}
	return w
}

// requestPath is a request's path as the gateway matches it: decoded once,
// dot segments removed once, empty segments dropped.
type requestPath struct {
	segs     []string // as sent (case kept): wildcard values
	lower    []string // lower case, for lenient matching
	trailing bool
}

// cleanPath reads decoded, the request's path decoded once (net/http's
// URL.Path). ambiguous is why a website may read the path in another way
// than the gateway does, "" when it can't: a percent sign that still
// escapes something (a path encoded twice, read again by a website that
// decodes again), a backslash (a slash to some servers), a ; (path
// parameters, cut off by some), a control character.
func cleanPath(decoded string) (p requestPath, ambiguous string) {
	switch {
	case !strings.HasPrefix(decoded, "/"):
		ambiguous = "the path does not start with /"
	case hasEscape(decoded):
		ambiguous = "the path is percent-encoded twice"
	case strings.ContainsRune(decoded, '\\'):
		ambiguous = "the path holds a backslash"
	case strings.ContainsRune(decoded, ';'):
		ambiguous = "the path holds a ; (path parameters)"
	case hasControl(decoded):
		ambiguous = "the path holds a control character"
	}
	parts := strings.Split(decoded, "/")
	for i, s := range parts {
		last := i == len(parts)-1
		switch s {
		case "", ".":
			if last && i > 0 {
				p.trailing = true
			}
		case "..":
			if len(p.segs) > 0 {
				p.segs = p.segs[:len(p.segs)-1]
			}
			if last {
				p.trailing = true
			}
		default:
			p.segs = append(p.segs, s)
		}
	}
	if len(p.segs) == 0 {
		p.trailing = false
	}
	p.lower = make([]string, len(p.segs))
	for i, s := range p.segs {
		p.lower[i] = strings.ToLower(s)
	}
	return p, ambiguous
}

// hasEscape reports whether s holds a percent escape (% and two hex
// digits).
func hasEscape(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2]) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// String is the path as the gateway reads it, for logs and the config
// line it suggests.
func (p requestPath) String() string {
	s := "/" + strings.Join(p.segs, "/")
	if p.trailing {
		s += "/"
	}
	return s
}

// match reports whether rt matches a request of method to p, and its
// wildcards' values.
func (rt *route) match(method string, p requestPath, strict bool) (map[string]string, bool) {
	if rt.method != "" && rt.method != method {
		return nil, false
	}
	if strict && rt.trailing != p.trailing && !(len(rt.segs) > 0 && rt.segs[len(rt.segs)-1].rest) {
		return nil, false
	}
	var values map[string]string
	for i, s := range rt.segs {
		if s.rest {
			if values == nil {
				values = map[string]string{}
			}
			rest := strings.Join(p.segs[min(i, len(p.segs)):], "/")
			if strict && p.trailing && rest != "" {
				rest += "/"
			}
			values[s.wild] = rest
			return values, true
		}
		if i >= len(p.segs) {
			return nil, false
		}
		switch {
		case s.wild != "":
			if values == nil {
				values = map[string]string{}
			}
			values[s.wild] = p.segs[i]
		case strict && s.lit != p.segs[i], !strict && s.lit != p.lower[i]:
			return nil, false
		}
	}
	if len(p.segs) != len(rt.segs) {
		return nil, false
	}
	return values, true
}

// moreSpecific reports whether a should win over b when both match a
// request: at the first segment where they differ a literal beats a
// wildcard and a wildcard beats {name...}; a method beats any method.
// The config refuses two patterns of which neither is more specific
// (ServeMux's rule), so this picks the one ServeMux would.
func moreSpecific(a, b *route) bool {
	for i := 0; i < len(a.segs) && i < len(b.segs); i++ {
		if r, s := rank(a.segs[i]), rank(b.segs[i]); r != s {
			return r < s
		}
	}
	if len(a.segs) != len(b.segs) {
		return len(a.segs) > len(b.segs)
	}
	return a.method != "" && b.method == ""
}

func rank(s patternSeg) int {
	switch {
	case s.rest:
		return 2
	case s.wild != "":
		return 1
	}
	return 0
}

// table is a list of routes; lookup finds the most specific match.
type table struct {
	routes []*route
	strict bool
}

func (t *table) lookup(method string, p requestPath) (*route, map[string]string) {
	var best *route
	var bestValues map[string]string
	for _, rt := range t.routes {
		if v, ok := rt.match(method, p, t.strict); ok && (best == nil || moreSpecific(rt, best)) {
			best, bestValues = rt, v
		}
	}
	return best, bestValues
}

// safeMethod reports whether a request of method changes nothing:
// GET, HEAD, OPTIONS. Anything else (POST, PUT, PATCH, DELETE, any other
// method) is unsafe.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}
