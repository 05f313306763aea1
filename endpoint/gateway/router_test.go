package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// Paths as the gateway reads them: decoded once, dot segments removed
// once, empty segments dropped; what a website may read otherwise is
// ambiguous.
func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		decoded, want, ambiguous string
	}{
		{"/orders/7/exchange", "/orders/7/exchange", ""},
		{"/orders/7/exchange/", "/orders/7/exchange/", ""},
		{"/orders//7/./exchange", "/orders/7/exchange", ""},
		{"/orders/x/../7/exchange", "/orders/7/exchange", ""},
		{"/../../orders/7/exchange", "/orders/7/exchange", ""},
		{"/orders/7/exchange/..", "/orders/7/", ""},
		{"/", "/", ""},
		{"/orders/7/%65xchange", "/orders/7/%65xchange", "encoded twice"},
		{"/orders/7\\exchange", "/orders/7\\exchange", "backslash"},
		{"/orders/7/exchange;jsessionid=1", "/orders/7/exchange;jsessionid=1", "path parameters"},
		{"/orders/7/\x00", "/orders/7/\x00", "control"},
		{"/orders/100%", "/orders/100%", ""}, // a lone % escapes nothing
	} {
		p, amb := cleanPath(tc.decoded)
		if p.String() != tc.want || (tc.ambiguous == "") != (amb == "") || !strings.Contains(amb, tc.ambiguous) {
			t.Errorf("cleanPath(%q) = %q, %q; want %q, %q", tc.decoded, p.String(), amb, tc.want, tc.ambiguous)
		}
	}
}

// Patterns match as websites route: lenient by default, exactly with
// routing: strict; a literal beats a wildcard.
func TestRouteMatch(t *testing.T) {
	mk := func(pattern string, strict bool) *route {
		rt, _, err := parsePattern(pattern, strict, true)
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	for _, tc := range []struct {
		pattern, method, path string
		strict, match         bool
		values                string
	}{
		{"POST /orders/{order}/exchange", "POST", "/orders/Ord_7/exchange", false, true, "order=Ord_7"},
		{"POST /orders/{order}/exchange", "POST", "/ORDERS/Ord_7/Exchange/", false, true, "order=Ord_7"},
		{"POST /orders/{order}/exchange", "POST", "/ORDERS/Ord_7/exchange", true, false, ""},
		{"POST /orders/{order}/exchange", "POST", "/orders/Ord_7/exchange/", true, false, ""},
		{"POST /orders/{order}/exchange/", "POST", "/orders/7/exchange/", true, true, "order=7"},
		{"POST /orders/{order}/exchange", "PUT", "/orders/7/exchange", false, false, ""},
		{"* /cart/{rest...}", "PUT", "/cart/a/b", false, true, "rest=a/b"},
		{"* /cart/{rest...}", "PUT", "/Cart", false, true, "rest="},
		{"POST /orders/{order}/exchange", "POST", "/orders/exchange", false, false, ""},
		{"POST /", "POST", "/", false, true, ""},
		{"POST /", "POST", "/x", false, false, ""},
	} {
		p, _ := cleanPath(tc.path)
		values, ok := mk(tc.pattern, tc.strict).match(tc.method, p, tc.strict)
		var got []string
		for k, v := range values {
			got = append(got, k+"="+v)
		}
		if ok != tc.match || strings.Join(got, ",") != tc.values {
			t.Errorf("%q (strict %v) %s %s: %v %v, want %v %q", tc.pattern, tc.strict, tc.method, tc.path, ok, got, tc.match, tc.values)
		}
	}
	tb := table{routes: []*route{mk("POST /orders/{order}/{verb}", false), mk("POST /orders/{order}/exchange", false)}}
	if rt, _ := tb.lookup("POST", requestPath{segs: []string{"orders", "7", "exchange"}, lower: []string{"orders", "7", "exchange"}}); rt != tb.routes[1] {
		t.Errorf("the literal did not win: %v", rt)
	}
}

// The config's routing, pass, method_override, identity and timeouts.
func TestConfigRouting(t *testing.T) {
	setKeys(t)
	t.Setenv("GW_TEST_IDKEY", strings.Repeat("k", 32))
	t.Setenv("GW_TEST_IDKEY_SHORT", "short")
	act := func(match string) string {
		return "  - match: " + match + "\n    key: k\n    summary: s\n    terms: {a: b}\n"
	}
	for _, tc := range []struct{ name, config, want string }{
		{"lenient case conflict", goodHead + "actions:\n" + act("POST /Orders/{id}") + act("POST /orders/{x}"), "gateway.yaml:11: actions[1].match: POST /orders/{x} matches the same requests"},
		{"lenient slash conflict", goodHead + "actions:\n" + act("POST /orders/{id}/") + act("POST /orders/{id}"), "actions[1].match:"},
		{"host in a pattern", goodHead + "actions:\n" + act("POST shop.example/orders"), "actions[0].match:"},
		{"partial wildcard", goodHead + "actions:\n" + act("POST /orders/x{id}"), "a wildcard must be a whole segment"},
		{"bad routing", goodHead + "routing: loose\n", "gateway.yaml:6: routing: want lenient"},
		{"pass not a list", goodHead + "pass: POST /x\n", "gateway.yaml:6: pass: want a list"},
		{"pass GET", goodHead + "pass: [GET /x]\n", "gateway.yaml:6: pass[0]: GET requests always pass"},
		{"pass of the gateway's route", goodHead + "pass: [POST /poppy/join]\n", "pass[0]: /poppy/join is the gateway's own route"},
		{"unknown override", goodHead + "method_override: [X-Override]\n", "method_override[0]: want X-HTTP-Method-Override"},
		{"override with underscores", goodHead + "method_override: [X_HTTP_Method_Override]\n", "method_override[0]:"},
		{"identity key unset", goodHead + "identity_key_env: GW_TEST_NO_SUCH\n", "identity_key_env: environment variable GW_TEST_NO_SUCH is not set"},
		{"identity key short", goodHead + "identity_key_env: GW_TEST_IDKEY_SHORT\n", "holds 5 characters; want at least 32"},
		{"bad identity_on", goodHead + "identity_on: always\n", "identity_on: want approved"},
		{"bad timeout", goodHead + "timeouts: {body: soon}\n", "gateway.yaml:6: timeouts.body: want a positive duration"},
		{"form and json", goodHead + "actions:\n  - match: POST /x\n    key: k\n    summary: \"{form.a}\"\n    terms: {b: \"{json.b}\"}\n", "reads both {form.…} and {json.…}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), strings.Repeat("k", 32)) {
				t.Fatal("the error shows the identity key")
			}
		})
	}
	c, err := Parse("gateway.yaml", []byte(goodHead+"routing: strict\npass: [\"* /cart/{rest...}\", POST /newsletter]\nmethod_override: [x-http-method-override, _method]\nidentity_key_env: GW_TEST_IDKEY\nidentity_on: joined\ntimeouts: {body: 5s, upstream: 20s, idle: 1m, header: 3s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.routing != routingStrict || len(c.pass) != 2 || strings.Join(c.overrides, ",") != "X-Http-Method-Override,_method" || c.identityOn != identityOnJoined ||
		c.timeouts != (timeouts{header: 3 * time.Second, body: 5 * time.Second, upstream: 20 * time.Second, idle: time.Minute}) {
		t.Errorf("config %+v", c)
	}
}

// Terms only from an unambiguous request: each refusal before any
// operation (readRequest).
func TestReadRequestStrict(t *testing.T) {
	formReads := reads{"form": {"size"}}
	jsonReads := reads{"json": {"date"}}
	for _, tc := range []struct {
		name, target, ct, body string
		rd                     reads
		want                   string // "" for read
	}{
		{"form", "/x", formURLEncoded, "size=M&other=1&other=2", formReads, ""},
		{"repeated", "/x", formURLEncoded, "size=M&size=XL", formReads, "more than once"},
		{"list", "/x", formURLEncoded, "size[]=XL", formReads, `sent as "size[]"`},
		{"map", "/x", formURLEncoded, "size=M&size[a]=XL", formReads, "more than once"},
		{"leading space", "/x", formURLEncoded, "+size=XL", formReads, "sent as"},
		{"query and body", "/x?size=XL", formURLEncoded, "size=M", formReads, "more than once"},
		{"form as JSON", "/x", "application/json", `{"size":"M"}`, formReads, "this action reads form fields"},
		{"no content type", "/x", "", "size=M", formReads, "not no Content-Type"},
		{"bad form", "/x", formURLEncoded, "size=%zz", formReads, "could not be read"},
		{"semicolon query", "/x?a=1;b=2", formURLEncoded, "size=M", formReads, "query string"},
		{"json", "/x", "application/json; charset=utf-8", `{"date":"d","x":{"y":1,"z":[1,2]}}`, jsonReads, ""},
		{"problem+json", "/x", "application/merge-patch+json", `{"date":"d"}`, jsonReads, ""},
		{"json as form", "/x", formURLEncoded, "date=d", jsonReads, "this action reads JSON members"},
		{"duplicate member", "/x", "application/json", `{"date":"d","date":"e"}`, jsonReads, "given twice"},
		{"duplicate escaped member", "/x", "application/json", `{"date":"d","\u0064ate":"e"}`, jsonReads, "given twice"},
		{"nested duplicate", "/x", "application/json", `{"date":"d","x":{"a":1,"a":2}}`, jsonReads, "given twice"},
		{"two values", "/x", "application/json", `{"date":"d"}{}`, jsonReads, "more than one"},
		{"empty", "/x", "application/json", ``, jsonReads, "empty"},
		{"not utf-8", "/x", "application/json", "{\"date\":\"\xff\"}", jsonReads, "UTF-8"},
		{"member in the query too", "/x?date=e", "application/json", `{"date":"d"}`, jsonReads, "both in the query and the JSON body"},
		{"too deep", "/x", "application/json", strings.Repeat("[", 200) + strings.Repeat("]", 200), jsonReads, "nested deeper"},
		{"query field in the body", "/x?size=M", formURLEncoded, "size=XL", reads{"query": {"size"}}, "more than once"},
		{"path only", "/x", "text/plain", "anything", reads{"path": {"id"}}, ""},
	} {
		r := httptest.NewRequest("POST", tc.target, strings.NewReader(tc.body))
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		_, err := readRequest(r, []byte(tc.body), tc.rd)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// An agent's browser's unsafe request that no action gates and pass does
// not name: 403, a page or JSON, an Observer event, and a log line naming
// the config line to add. An ordinary browser's goes through.
func TestNotOpenToAgents(t *testing.T) {
	up := newShop(t)
	var newsletters atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /newsletter", func(w http.ResponseWriter, r *http.Request) { newsletters.Add(1) })
	mux.Handle("/", up.srv.Config.Handler)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	setKeys(t)
	var logs strings.Builder
	c, err := Parse("gateway.yaml", []byte(strings.ReplaceAll(shopConfig, "UPSTREAM", srv.URL)+"pass: [POST /cart/items]\n"))
	if err != nil {
		t.Fatal(err)
	}
	site := webkittest.New("https://shop.example")
	g, err := newGateway(c, slog.New(slog.NewTextHandler(&logs, nil)), options{Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	site.Handler = g

	if res := site.Browser().PostForm("/newsletter", url.Values{"email": {"a@example.com"}}); res.StatusCode != 200 || newsletters.Load() != 1 {
		t.Fatalf("an ordinary browser: %d, newsletters %d", res.StatusCode, newsletters.Load())
	}
	_, b := join(t, site)
	page := b.PostForm("/Newsletter/", url.Values{"email": {"a@example.com"}})
	if page.StatusCode != http.StatusForbidden || page.Ref != "" || !strings.Contains(string(page.Body), "does not allow this action from a browser an agent joined") ||
		!strings.Contains(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", page.StatusCode, page.Body)
	}
	script := b.PostJSON("/newsletter", `{}`)
	if script.StatusCode != http.StatusForbidden || !strings.Contains(string(script.Body), `"error":"forbidden"`) {
		t.Fatalf("script: %d %s", script.StatusCode, script.Body)
	}
	if newsletters.Load() != 1 {
		t.Fatal("an agent's browser subscribed")
	}
	if !strings.Contains(logs.String(), `add="pass: [\"POST /newsletter\"]"`) || !strings.Contains(logs.String(), "config=gateway.yaml") {
		t.Errorf("the log does not name the config line to add:\n%s", logs.String())
	}
	rec := httptest.NewRecorder()
	g.admin.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), `outcome="refused",reason="not_open_to_agents"`) {
		t.Errorf("the Observer did not see the refusal")
	}
}

// W142 An approved repeat whose upstream does not answer within
// timeouts.upstream: 503, and the operation stays performing (its outcome
// not known yet), never failed or not performed.
func TestUpstreamTimeoutNotKnownYet(t *testing.T) {
	var reached atomic.Int32
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		<-release
	}))
	defer slow.Close()
	defer close(release)
	site := startGateway(t, shopConfig+"timeouts: {upstream: 200ms}\n", slow.URL)
	s, b := join(t, site)
	res := b.PostForm("/orders/ord_1/exchange", url.Values{"size": {"L"}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("%d", res.StatusCode)
	}
	s.Approve(res.Ref)
	again := res.Continue()
	if again.StatusCode != http.StatusServiceUnavailable || again.Header.Get("Retry-After") == "" || reached.Load() != 1 {
		t.Fatalf("continue: %d %v, reached %d", again.StatusCode, again.Header, reached.Load())
	}
	if st := s.Lookup(res.Ref).OperationStatus; st != "performing" {
		t.Errorf("status %q, want performing: the outcome is not known", st)
	}
}

// The identity's signature is the HMAC the README describes.
func TestSignIdentity(t *testing.T) {
	got := signIdentity([]byte("0123456789abcdef0123456789abcdef"), "1700000000", "POST", "/orders/7/exchange",
		store.Owner{Agent: "https://agent.example/client", User: "usr_1", Account: "acct_42"})
	// printf 'v1\n1700000000\nPOST\n/orders/7/exchange\nhttps://agent.example/client\nusr_1\nacct_42' | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
	if got != "v1=6086cfb718a315fd6a99ab749a67c5f5a7f250284508284bbb7386931a51bc24" {
		t.Errorf("signature %q", got)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"node/opsgate-identity.js", "python/opsgate_identity.py", "ruby/opsgate_identity.rb", "php/opsgate_identity.php"} {
		src, err := os.ReadFile(upstreamsDir + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), string(src)) {
			t.Errorf("README.md does not show %s as it is", f)
		}
	}
}
