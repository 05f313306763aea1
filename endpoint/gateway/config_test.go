package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const goodHead = `origin: https://shop.example
upstream: http://127.0.0.1:3000
cookie_keys:
  - hash_env: GW_TEST_HASH
    encryption_env: GW_TEST_ENC
`

// Bad config fails at start with the file, the line and the field at fault.
func TestConfigErrors(t *testing.T) {
	setKeys(t)
	t.Setenv("GW_TEST_SHORT", "c2hvcnQ=") // "short": 5 bytes
	for _, tc := range []struct {
		name, config, want string
	}{
		{"empty", ``, "gateway.yaml: the file is empty"},
		{"yaml syntax", "origin: https://shop.example\nupstream: [\n", "gateway.yaml: yaml: line 2"},
		{"unknown top-level field", goodHead + "upstrem: x\n", "gateway.yaml:6: upstrem: unknown field"},
		{"missing origin", "upstream: http://127.0.0.1:3000\n", "gateway.yaml:1: origin: missing"},
		{"origin with a path", "origin: https://shop.example/shop\nupstream: http://x\n", "gateway.yaml:1: origin: want scheme://host"},
		{"http origin", "origin: http://localhost:8080\nupstream: http://x\n", "gateway.yaml:1: origin: \"http://localhost:8080\" is plain http"},
		{"bad upstream", "origin: https://shop.example\nupstream: 127.0.0.1:3000\n", "gateway.yaml:2: upstream: want the website's own address"},
		{"bad store", goodHead + "store: postgres\n", "gateway.yaml:6: store: want memory"},
		{"bad durability", goodHead + "store:\n  redis: redis://localhost:6379\n  durability: fsync\n", "gateway.yaml:8: store.durability: want disk, replicas, server or none"},
		{"replicas without replicas", goodHead + "store:\n  redis: redis://localhost:6379\n  replicas: 2\n", "gateway.yaml:8: store.replicas: only with durability: replicas"},
		{"bad redis URL", goodHead + "store:\n  redis: mysql://x\n", "gateway.yaml:7: store.redis:"},
		{"redis without keys", "origin: https://shop.example\nupstream: http://x\nstore:\n  redis: redis://localhost:6379\n", "cookie_keys: missing"},
		{"key env unset", "origin: https://shop.example\nupstream: http://x\ncookie_keys:\n  - hash_env: GW_TEST_NOT_SET\n    encryption_env: GW_TEST_ENC\n", "gateway.yaml:4: cookie_keys[0].hash_env: environment variable GW_TEST_NOT_SET is not set"},
		{"key too short", "origin: https://shop.example\nupstream: http://x\ncookie_keys:\n  - hash_env: GW_TEST_HASH\n    encryption_env: GW_TEST_SHORT\n", "gateway.yaml:5: cookie_keys[0].encryption_env: environment variable GW_TEST_SHORT holds 5 bytes; want 16 or 24 or 32"},
		{"own login cookie of the gateway", goodHead + "own_login_cookies: [opsgate_join]\n", "gateway.yaml:6: own_login_cookies[0]:"},
		{"own_login_flow of no known value", goodHead + "own_login_cookies: [signed_in]\nown_login_flow: handler\n", "own_login_flow"},
		{"own_login_flow without own login cookies", goodHead + "own_login_flow: upstream\n", "own_login_flow"},
		{"chrome header twice", goodHead + "chrome:\n  header: <b>x</b>\n  header_file: h.html\n", "gateway.yaml:8: chrome.header_file: give header or header_file, not both"},
		{"chrome header file missing", goodHead + "chrome:\n  footer_file: no-such-footer.html\n", "gateway.yaml:7: chrome.footer_file:"},
		{"actions not a list", goodHead + "actions: {}\n", "gateway.yaml:6: actions: want a list"},
		{"no match", goodHead + "actions:\n  - key: x\n", "gateway.yaml:7: actions[0].match: missing"},
		{"match without method", goodHead + "actions:\n  - match: /orders/{id}\n", "gateway.yaml:7: actions[0].match: want a method and a path"},
		{"GET is never gated", goodHead + "actions:\n  - match: GET /orders/{id}\n", "gateway.yaml:7: actions[0].match: GET requests are safe"},
		{"the gateway's own route", goodHead + "actions:\n  - match: POST /poppy/join\n", "gateway.yaml:7: actions[0].match: /poppy/join is the gateway's own route"},
		{"bad pattern", goodHead + "actions:\n  - match: POST /orders/{id\n    key: k\n    summary: s\n    terms: {a: b}\n", "gateway.yaml:7: actions[0].match:"},
		{"conflicting patterns", goodHead + "actions:\n" +
			"  - match: POST /orders/{id}/x\n    key: k\n    summary: s\n    terms: {a: b}\n" +
			"  - match: POST /orders/{order}/x\n    key: k\n    summary: s\n    terms: {a: b}\n",
			"gateway.yaml:11: actions[1].match:"},
		{"no key", goodHead + "actions:\n  - match: POST /x\n    summary: s\n    terms: {a: b}\n", "gateway.yaml:7: actions[0].key: missing"},
		{"no summary", goodHead + "actions:\n  - match: POST /x\n    key: k\n    terms: {a: b}\n", "gateway.yaml:7: actions[0].summary: missing"},
		{"terms not a mapping", goodHead + "actions:\n  - match: POST /x\n    key: k\n    summary: s\n    terms: [a]\n", "gateway.yaml:10: actions[0].terms: want a mapping"},
		{"unknown source", goodHead + "actions:\n  - match: POST /x\n    key: k\n    summary: s\n    terms:\n      size: \"{body.size}\"\n", "gateway.yaml:11: actions[0].terms.size: \"{body.size}\": placeholder {body.size}: want {path.NAME}"},
		{"path placeholder not in the pattern", goodHead + "actions:\n  - match: POST /orders/{id}\n    key: \"order:{path.order}\"\n", "gateway.yaml:8: actions[0].key: \"order:{path.order}\": placeholder {path.order}: the action's match pattern has no wildcard {order}"},
		{"unclosed brace", goodHead + "actions:\n  - match: POST /x\n    key: k\n    summary: \"for {form.size\"\n", "gateway.yaml:9: actions[0].summary: \"for {form.size\": a { with no closing }"},
		{"bad lifetime", goodHead + "actions:\n  - match: POST /x\n    key: k\n    summary: s\n    terms: {a: b}\n    lifetime: ten minutes\n", "gateway.yaml:11: actions[0].lifetime: want a positive duration"},
		{"bad kind", goodHead + "actions:\n  - match: POST /x\n    kind: Order 7\n", "gateway.yaml:8: actions[0].kind: want a short label"},
		{"unknown action field", goodHead + "actions:\n  - match: POST /x\n    sumary: s\n", "gateway.yaml:8: actions[0].sumary: unknown field"},
		{"describe and key", goodHead + "actions:\n  - match: POST /x\n    describe: /describe\n    key: k\n", "gateway.yaml:9: actions[0].key: give describe or key"},
		{"describe not a path", goodHead + "actions:\n  - match: POST /x\n    describe: describe\n", "gateway.yaml:8: actions[0].describe: want a path on the upstream"},
		{"describe_timeout without describe", goodHead + "actions:\n  - match: POST /x\n    key: k\n    describe_timeout: 1s\n", "gateway.yaml:9: actions[0].describe_timeout: only with describe"},
		{"bad describe header", goodHead + "actions:\n  - match: POST /x\n    describe: /d\n    describe_headers: [\"X Bad\"]\n", "gateway.yaml:9: actions[0].describe_headers[0]: \"X Bad\" is not a header name"},
		{"JWKS over http", goodHead + "access_tokens:\n  issuer: https://auth.example\n  jwks_url: http://auth.example/jwks\n", "gateway.yaml:8: access_tokens.jwks_url: want the issuer's https URL"},
		{"no issuer", goodHead + "access_tokens:\n  jwks_url: https://auth.example/jwks\n", "gateway.yaml:7: access_tokens.issuer: missing"},
		{"bad identity prefix", goodHead + "identity_headers: X-Opsgate\n", "gateway.yaml:6: identity_headers: want a header-name prefix ending in -"},
		{"twice", goodHead + "origin: https://other.example\n", "gateway.yaml:6: origin: given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "aGhoaGhoaGho") || strings.Contains(err.Error(), "hhhh") {
				t.Fatalf("the error shows a key: %v", err)
			}
		})
	}
}

// A good file reads, and its header and footer files are relative to it.
func TestConfigLoad(t *testing.T) {
	setKeys(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "header.html"), []byte("<header>H</header>"), 0o644)
	cfg := goodHead + `listen: 127.0.0.1:9090
allow_local: true
store:
  redis: redis://localhost:6379/2
  durability: replicas
  replicas: 2
  prefix: "shop:"
chrome:
  header_file: header.html
actions:
  - match: POST /orders/{order}/exchange
    key: "exchange:{path.order}"
    terms: {order_id: "{path.order}", size: "{form.size}", count: 1, gift: false, note: null, tags: ["a", "{query.t}"]}
    summary: "Exchange {{literally}} {path.order}"
  - match: POST /api/bookings
    describe: /opsgate/describe
    describe_timeout: 500ms
    describe_headers: [cookie, Authorization]
    kind: booking
`
	path := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(path, []byte(cfg), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		t.Fatal("nil config")
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Fatal("a missing file loaded")
	}
}
