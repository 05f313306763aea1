// Package discovery builds the kit's part of poppy.json (§2 "Advertising
// support"); endpoint.Mount serves it.
package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Discovery builds the part of poppy.json that this kit is responsible for
// (§2 "Advertising support"): the operations entry and, with an endpoint,
// web.browser_session_endpoint.
type Discovery struct {
	// Endpoint is the HTTPS URL of the operations endpoint (/poppy/operations).
	// Empty: the website returns no operations (W05), and the entry has no
	// endpoint; the website then mounts neither endpoint nor Gate and
	// handles approval itself (W06).
	Endpoint string
	// BrowserSessionEndpoint is the join endpoint's HTTPS URL. Required with
	// Endpoint (§2 MUST, W04).
	BrowserSessionEndpoint string
	// AllowLocal accepts http:// URLs on localhost, 127.0.0.1 and [::1],
	// and on the names RFC 6761 reserves so that they never reach the
	// internet (*.localhost, *.test), for local development and tests.
	AllowLocal bool
}

// ErrDiscovery is wrapped by every error Fragment returns.
var ErrDiscovery = errors.New("poppy.json")

// Fragment returns the members to merge into poppy.json:
//
//	{"extensions":{"operations":[{"version":"3","endpoint":"…"}]},
//	 "web":{"browser_session_endpoint":"…"}}
func (d Discovery) Fragment() (map[string]any, error) {
	entry := map[string]any{"version": "3"} // W01
	out := map[string]any{"extensions": map[string]any{"operations": []any{entry}}}
	if d.Endpoint == "" {
		return out, nil // W05: no operations on the website, no endpoint
	}
	if err := d.checkURL("endpoint", d.Endpoint); err != nil { // W03
		return nil, err
	}
	if d.BrowserSessionEndpoint == "" { // §2: MUST list it with endpoint (W04)
		return nil, fmt.Errorf("%w: an operations endpoint needs web.browser_session_endpoint (§2): only a browser joined to a Session gets operations", ErrDiscovery)
	}
	if err := d.checkURL("web.browser_session_endpoint", d.BrowserSessionEndpoint); err != nil {
		return nil, err
	}
	entry["endpoint"] = d.Endpoint // W02
	out["web"] = map[string]any{"browser_session_endpoint": d.BrowserSessionEndpoint}
	return out, nil
}

// JSON returns Fragment as a JSON object.
func (d Discovery) JSON() ([]byte, error) {
	f, err := d.Fragment()
	if err != nil {
		return nil, err
	}
	return json.Marshal(f)
}

// AddTo merges Fragment into an existing poppy.json document, keeping the
// document's other extensions and web members.
func (d Discovery) AddTo(doc map[string]any) error {
	f, err := d.Fragment()
	if err != nil {
		return err
	}
	for _, name := range []string{"extensions", "web"} {
		add, ok := f[name].(map[string]any)
		if !ok {
			continue
		}
		have, ok := doc[name].(map[string]any)
		if !ok {
			if doc[name] != nil {
				return fmt.Errorf("%w: member %q is not an object", ErrDiscovery, name)
			}
			have = map[string]any{}
			doc[name] = have
		}
		for k, v := range add {
			have[k] = v
		}
	}
	return nil
}

func (d Discovery) checkURL(member, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDiscovery, member, err)
	}
	if !u.IsAbs() || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("%w: %s must be an absolute URL with a host and no userinfo or fragment, got %q", ErrDiscovery, member, raw)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && d.AllowLocal && IsLocalHost(u.Hostname()):
		return nil
	}
	if u.Scheme == "http" && IsLocalHost(u.Hostname()) {
		return fmt.Errorf("%w: %s must be an HTTPS URL (§2), got %q; for local development on localhost, set AllowLocal (endpoint.Config.AllowLocal)", ErrDiscovery, member, raw)
	}
	return fmt.Errorf("%w: %s must be an HTTPS URL (§2), got %q", ErrDiscovery, member, raw)
}

// IsLocalHost reports whether host is a name or address for local
// development, where AllowLocal lets http:// stand: localhost and
// *.localhost, test and *.test (RFC 6761), and loopback addresses. The
// identity Resolver uses the same rule for agents' URLs.
func IsLocalHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || host == "test" || strings.HasSuffix(host, ".test") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
