package gateway

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/continueform"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// The matrix of real upstreams: the gateway in front of real websites
// written with real frameworks (testdata/upstreams: Express 4 with
// method-override, Hono, Flask, Sinatra on Rack, plain PHP), each as its
// framework routes and parses by default, each counting what it
// performed and whom for (the README's identity snippet, in its own
// language, decides the account). From an agent's joined browser every
// variant a website reads otherwise than the gateway (path case,
// trailing slash, encodings, method override headers and fields,
// repeated fields, a switched content type, underscore headers, a slow
// body) is gated or refused, and the upstream's own counters show
// nothing performed without an approval, nothing with other terms than
// approved, and nobody passing as another account (§3 "MUST NOT start
// the action before it receives an approval for it", "MUST perform only
// what the approved revision describes").
//
// A framework that is not installed skips, unless OPSGATE_REQUIRE names
// "upstreams" (.ci/run installs them all).

// upstreamSite is one real website of the matrix.
type upstreamSite struct {
	name string
	// start runs it and returns its base URL; it skips (or fails) when
	// its runtime is missing.
	start func(t *testing.T, env []string) string
	// honours are the method-override conventions it honours, for the
	// config that says so.
	honours []string
}

var upstreamSites = []upstreamSite{
	{"express", startNode("express-app.js"), []string{"X-HTTP-Method-Override", "_method"}},
	{"hono", startNode("hono-app.mjs"), []string{"_method"}},
	{"flask", startFlask, nil},
	{"sinatra", startSinatra, []string{"X-HTTP-Method-Override", "_method"}},
	{"php", startPHP, []string{"X-HTTP-Method-Override", "_method"}},
}

const upstreamsDir = "testdata/upstreams"

func startNode(script string) func(*testing.T, []string) string {
	return func(t *testing.T, env []string) string {
		if _, err := exec.LookPath("node"); err != nil {
			testenv.Missing(t, "upstreams", "node is not installed")
		}
		if _, err := os.Stat(filepath.Join(upstreamsDir, "node", "node_modules", "express")); err != nil {
			testenv.Missing(t, "upstreams", "the Node upstreams' packages are not installed (npm ci in "+upstreamsDir+"/node)")
		}
		return startPrintingPort(t, filepath.Join(upstreamsDir, "node"), env, "node", script)
	}
}

func startFlask(t *testing.T, env []string) string {
	// Debian's python3-flask is for the system's Python.
	if err := exec.Command("/usr/bin/python3", "-c", "import flask").Run(); err != nil {
		testenv.Missing(t, "upstreams", "/usr/bin/python3 has no flask (apt-get install python3-flask)")
	}
	return startPrintingPort(t, filepath.Join(upstreamsDir, "python"), env, "/usr/bin/python3", "flask_app.py")
}

func startSinatra(t *testing.T, env []string) string {
	if err := exec.Command("ruby", "-e", `require "sinatra/base"; require "webrick"`).Run(); err != nil {
		testenv.Missing(t, "upstreams", "ruby with sinatra and webrick is not installed (apt-get install ruby-sinatra ruby-webrick)")
	}
	return startPrintingPort(t, filepath.Join(upstreamsDir, "ruby"), env, "ruby", "sinatra_app.rb")
}

func startPHP(t *testing.T, env []string) string {
	if _, err := exec.LookPath("php"); err != nil {
		testenv.Missing(t, "upstreams", "php is not installed (apt-get install php-cli)")
	}
	addr := freeAddr(t)
	env = append(env, "OPSGATE_STATE="+filepath.Join(t.TempDir(), "performed.jsonl"), "PHP_CLI_SERVER_WORKERS=4")
	cmd := exec.Command("php", "-S", addr, "index.php")
	cmd.Dir = filepath.Join(upstreamsDir, "php")
	cmd.Env = append(os.Environ(), env...)
	run(t, cmd)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("php -S %s did not listen", addr)
		}
	}
}

// startPrintingPort runs a website that prints its port on its first
// line of output.
func startPrintingPort(t *testing.T, dir string, env []string, name string, args ...string) string {
	cmd := exec.Command(name, append(args, "0")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	run(t, cmd)
	port := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		port <- strings.TrimSpace(line)
		io.Copy(io.Discard, out)
	}()
	select {
	case p := <-port:
		if p == "" {
			t.Fatalf("%s %v printed no port", name, args)
		}
		return "http://127.0.0.1:" + p
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %v printed no port within 30s", name, args)
	}
	return ""
}

// run starts cmd and stops it when the test ends.
func run(t *testing.T, cmd *exec.Cmd) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Its own process group, which the cleanup ends whole: php -S forks
	// its workers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if out := stderr.Bytes(); t.Failed() && len(out) > 0 {
			t.Logf("%s said:\n%s", filepath.Base(cmd.Path), out[max(0, len(out)-4000):])
		}
	})
}

const (
	matrixKeyEnv = "GW_TEST_IDENTITY"
	matrixKey    = "matrix-identity-secret-0123456789abcdef0123"
	bodyTimeout  = 300 * time.Millisecond
)

// matrixConfig is the gateway in front of each website: three gated
// actions, two unsafe routes open to agents, the rest refused.
const matrixConfig = `
origin: https://shop.example
upstream: UPSTREAM
store: memory
cookie_keys:
  - hash_env: GW_TEST_HASH
    encryption_env: GW_TEST_ENC
identity_key_env: GW_TEST_IDENTITY
timeouts: {body: 300ms, upstream: 10s}
pass:
  - POST /cart/items
  - POST /api/subscriptions/{id}
actions:
  - match: POST /orders/{order}/exchange
    key: "exchange:{path.order}"
    terms: {order: "{path.order}", size: "{form.size}"}
    summary: "Exchange order {path.order} for size {form.size}."
    kind: exchange
  - match: PATCH /api/deliveries/{order}
    key: "delivery:{path.order}"
    terms: {order: "{path.order}", date: "{json.date}"}
    summary: "Deliver order {path.order} on {json.date}."
    kind: delivery
  - match: DELETE /api/subscriptions/{id}
    key: "cancel:{path.id}"
    terms: {subscription: "{path.id}"}
    summary: "Cancel subscription {path.id}."
    kind: cancel
`

// matrixGateway is a gateway on a loopback port in front of one website,
// with an agent's browser joined to a signed-in Session (account acct_42).
type matrixGateway struct {
	t        *testing.T
	upstream string
	gw       *httptest.Server
	session  *webkittest.Session
	cookie   string // the joined browser's cookies
}

func newMatrixGateway(t *testing.T, upstream, extra string) *matrixGateway {
	t.Helper()
	setKeys(t)
	t.Setenv(matrixKeyEnv, matrixKey)
	c, err := Parse("gateway.yaml", []byte(strings.ReplaceAll(matrixConfig, "UPSTREAM", upstream)+extra))
	if err != nil {
		t.Fatal(err)
	}
	site := webkittest.New("https://shop.example")
	g, err := newGateway(c, slog.New(slog.DiscardHandler), options{Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	m := &matrixGateway{t: t, upstream: upstream, gw: httptest.NewServer(g)}
	t.Cleanup(m.gw.Close)
	// The join goes through the harness, in process; its cookie is then
	// the browser's on the loopback port.
	var mu sync.Mutex
	var joinCookies []string
	site.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.ServeHTTP(w, r)
		if r.URL.Path == "/poppy/join" {
			mu.Lock()
			joinCookies = w.Header().Values("Set-Cookie")
			mu.Unlock()
		}
	})
	m.session = site.NewAgent().SignedInSession("usr_m", "acct_42")
	if _, err := m.session.Join(); err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for _, sc := range joinCookies {
		pair, _, _ := strings.Cut(sc, ";")
		pairs = append(pairs, pair)
	}
	if len(pairs) == 0 {
		t.Fatal("the join set no cookie")
	}
	m.cookie = strings.Join(pairs, "; ")
	return m
}

// req is a browser's request: a page's form (Accept text/html) or a
// script's (JSON).
type req struct {
	method, path, contentType string
	body                      []byte
	header                    http.Header
	script                    bool
	ordinary                  bool // from an ordinary browser, not the joined one
}

type answer struct {
	status int
	header http.Header
	body   []byte
	ref    string
}

func (m *matrixGateway) send(r req) answer {
	m.t.Helper()
	hr, err := http.NewRequest(r.method, m.gw.URL+r.path, bytes.NewReader(r.body))
	if err != nil {
		m.t.Fatal(err)
	}
	if r.body == nil {
		hr.Body = http.NoBody
	}
	// What a page of the site sends.
	hr.Header.Set("Origin", "https://shop.example")
	hr.Header.Set("Sec-Fetch-Site", "same-origin")
	if r.script {
		hr.Header.Set("Accept", "application/json")
		hr.Header.Set("Sec-Fetch-Mode", "cors")
		hr.Header.Set("Sec-Fetch-Dest", "empty")
	} else {
		hr.Header.Set("Accept", "text/html")
		hr.Header.Set("Sec-Fetch-Mode", "navigate")
		hr.Header.Set("Sec-Fetch-Dest", "document")
	}
	if r.contentType != "" {
		hr.Header.Set("Content-Type", r.contentType)
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	if !r.ordinary {
		hr.Header.Set("Cookie", m.cookie)
	}
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(hr)
	if err != nil {
		m.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, header: res.Header, body: body}
	if ops := res.Header.Values("Poppy-Operation"); len(ops) > 0 {
		if sid, ref, err := headers.ParseOperation(ops); err == nil && sid == m.session.SID {
			a.ref = ref
		}
	}
	return a
}

// approveAndRepeat approves the operation as the person would, and
// repeats the request as the browser does: the waiting page's Continue
// for a page, the same request for a script (opsgate.fetch).
func (m *matrixGateway) approveAndRepeat(r req, a answer) answer {
	m.t.Helper()
	if ap := m.session.Approve(a.ref); ap.StatusCode != http.StatusNoContent {
		m.t.Fatalf("approve %s: %d %s", a.ref, ap.StatusCode, ap.Body)
	}
	if r.script {
		return m.send(r)
	}
	c, err := continueform.Parse("https://shop.example"+r.path, a.body)
	if err != nil {
		m.t.Fatalf("the waiting page's Continue: %v", err)
	}
	u, _ := url.Parse(c.URL)
	ct, body := c.Body()
	again := req{method: c.Method, path: u.RequestURI(), contentType: ct, body: body, header: r.header}
	return m.send(again)
}

// performed is one action a website performed, as it says.
type performed struct {
	Action         string `json:"action"`
	Order          string `json:"order"`
	Size           string `json:"size"`
	Date           string `json:"date"`
	Subscription   string `json:"subscription"`
	Method         string `json:"method"`
	Path           string `json:"path"`
	Account        any    `json:"account"`
	ClaimedAccount any    `json:"claimed_account"`
}

func (m *matrixGateway) performed() []performed {
	m.t.Helper()
	res, err := http.Get(m.upstream + "/__performed")
	if err != nil {
		m.t.Fatal(err)
	}
	defer res.Body.Close()
	var out []performed
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		m.t.Fatalf("/__performed: %v", err)
	}
	return out
}

// variant is one request of the matrix and what the gateway must do
// with it: gate it ("gated": 403 with an operation, then approved and
// repeated), refuse it (the status), or pass it ("passed").
type variant struct {
	name   string
	r      req
	expect string // "gated", "passed", or a refusal's status such as "400"
	// approved is what the approval covers, as the website records it:
	// the one action the repeat may perform.
	approved performed
	// mayPass are the actions that passing it may perform.
	mayPass []string
}

// tally is the matrix's count for one website.
type tally struct {
	variants, gated, refused, passed int
	performedApproved                int // approved actions the website performed
	withoutApproval                  int // performed with no approval: must be 0
	otherTerms                       int // performed with other terms than approved: must be 0
	asAnother                        int // performed for, or claimed as, another account: must be 0
}

func form(kv ...string) []byte {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return []byte(v.Encode())
}

const formType = "application/x-www-form-urlencoded"

func multipartBody(fields ...string) (string, []byte) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		w.WriteField(fields[i], fields[i+1])
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

func gzipped(s string) []byte {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	io.WriteString(z, s)
	z.Close()
	return b.Bytes()
}

// variants are the requests of the matrix, each for its own order or
// subscription, so that every approval is of its own action.
func variants() []variant {
	ex := func(order, size string) performed { return performed{Action: "exchange", Order: order, Size: size} }
	dl := func(order, date string) performed { return performed{Action: "delivery", Order: order, Date: date} }
	cancel := func(id string) performed { return performed{Action: "cancel", Subscription: id} }
	mp1ct, mp1 := multipartBody("size", "L")
	mp2ct, mp2 := multipartBody("_method", "DELETE")
	forged := http.Header{"X_Opsgate_Account": {"acct_victim"}, "X-OPSGATE-ACCOUNT": {"acct_victim"}, "X_OPSGATE_AGENT": {"https://evil.example/agent"},
		"X_Opsgate_Signature": {"v1=00"}, "X_Opsgate_Timestamp": {"1"}, "X-Real-IP": {"10.9.9.9"}, "X_Forwarded_Host": {"evil.example"}, "X-Original-URL": {"/admin"}}
	return []variant{
		// What the config names, as it names it: gated, approved, performed once.
		{name: "form action", r: req{method: "POST", path: "/orders/1001/exchange", contentType: formType, body: form("size", "M")}, expect: "gated", approved: ex("1001", "M")},
		{name: "multipart form", r: req{method: "POST", path: "/orders/1020/exchange", contentType: mp1ct, body: mp1}, expect: "gated", approved: ex("1020", "L")},
		{name: "JSON action", r: req{method: "PATCH", path: "/api/deliveries/2001", contentType: "application/json", body: []byte(`{"date":"2026-12-24"}`), script: true}, expect: "gated", approved: dl("2001", "2026-12-24")},
		{name: "DELETE action", r: req{method: "DELETE", path: "/api/subscriptions/3001", script: true}, expect: "gated", approved: cancel("3001")},
		// Paths websites route to the same handler.
		{name: "path case", r: req{method: "POST", path: "/Orders/1002/exchange", contentType: formType, body: form("size", "S")}, expect: "gated", approved: ex("1002", "S")},
		{name: "path case of the last segment", r: req{method: "POST", path: "/orders/1003/EXCHANGE", contentType: formType, body: form("size", "S")}, expect: "gated", approved: ex("1003", "S")},
		{name: "trailing slash", r: req{method: "POST", path: "/orders/1004/exchange/", contentType: formType, body: form("size", "L")}, expect: "gated", approved: ex("1004", "L")},
		{name: "percent-encoded letter", r: req{method: "POST", path: "/orders/1005/%65xchange", contentType: formType, body: form("size", "L")}, expect: "gated", approved: ex("1005", "L")},
		{name: "encoded slashes", r: req{method: "POST", path: "/orders%2F1011%2Fexchange", contentType: formType, body: form("size", "L")}, expect: "gated", approved: ex("1011", "L")},
		{name: "dot segments", r: req{method: "POST", path: "/orders/x/../1006/./exchange", contentType: formType, body: form("size", "L")}, expect: "gated", approved: ex("1006", "L")},
		{name: "encoded dot segments", r: req{method: "POST", path: "/orders/x/%2e%2e/1012/exchange", contentType: formType, body: form("size", "L")}, expect: "gated", approved: ex("1012", "L")},
		{name: "empty segment", r: req{method: "POST", path: "/orders//1007/exchange", contentType: formType, body: form("size", "L")}, expect: "gated", approved: ex("1007", "L")},
		{name: "JSON path case", r: req{method: "PATCH", path: "/API/deliveries/2002", contentType: "application/json", body: []byte(`{"date":"2026-12-25"}`), script: true}, expect: "gated", approved: dl("2002", "2026-12-25")},
		{name: "JSON trailing slash", r: req{method: "PATCH", path: "/api/deliveries/2003/", contentType: "application/json", body: []byte(`{"date":"2026-12-26"}`), script: true}, expect: "gated", approved: dl("2003", "2026-12-26")},
		{name: "DELETE path case and slash", r: req{method: "DELETE", path: "/API/Subscriptions/3003/", script: true}, expect: "gated", approved: cancel("3003")},
		// Paths read once here, twice or otherwise there: refused.
		{name: "double-encoded path", r: req{method: "POST", path: "/orders/1008/%2565xchange", contentType: formType, body: form("size", "XL")}, expect: "400"},
		{name: "backslash", r: req{method: "POST", path: "/orders/1009%5Cexchange", contentType: formType, body: form("size", "XL")}, expect: "400"},
		{name: "path parameter", r: req{method: "POST", path: "/orders/1010/exchange;jsessionid=1", contentType: formType, body: form("size", "XL")}, expect: "400"},
		// Method override: the headers never reach the website, _method is refused.
		{name: "X-HTTP-Method-Override header", r: req{method: "POST", path: "/api/subscriptions/3101", header: http.Header{"X-Http-Method-Override": {"DELETE"}}, script: true}, expect: "passed", mayPass: []string{"renew"}},
		{name: "X-HTTP-Method header", r: req{method: "POST", path: "/api/subscriptions/3102", header: http.Header{"X-Http-Method": {"DELETE"}}, script: true}, expect: "passed", mayPass: []string{"renew"}},
		{name: "X-Method-Override header", r: req{method: "POST", path: "/api/subscriptions/3103", header: http.Header{"X-Method-Override": {"DELETE"}}, script: true}, expect: "passed", mayPass: []string{"renew"}},
		{name: "override header with underscores", r: req{method: "POST", path: "/api/subscriptions/3104", header: http.Header{"X_Http_Method_Override": {"DELETE"}}, script: true}, expect: "passed", mayPass: []string{"renew"}},
		{name: "_method form field", r: req{method: "POST", path: "/api/subscriptions/3105", contentType: formType, body: form("_method", "DELETE")}, expect: "400"},
		{name: "_method JSON member", r: req{method: "POST", path: "/api/subscriptions/3106", contentType: "application/json", body: []byte(`{"_method":"DELETE"}`), script: true}, expect: "400"},
		{name: "_method multipart field", r: req{method: "POST", path: "/api/subscriptions/3107", contentType: mp2ct, body: mp2}, expect: "400"},
		{name: "_method in the query", r: req{method: "POST", path: "/api/subscriptions/3108?_method=DELETE", script: true}, expect: "400"},
		{name: "_method with no Content-Type (Rack reads a form)", r: req{method: "POST", path: "/api/subscriptions/3109", body: []byte("_method=DELETE")}, expect: "400"},
		{name: "_method on the exchange", r: req{method: "POST", path: "/orders/1013/exchange", contentType: formType, body: form("size", "M", "_method", "DELETE")}, expect: "400"},
		// Repeated fields and switched content types: 400 before any operation.
		{name: "repeated field", r: req{method: "POST", path: "/orders/1014/exchange", contentType: formType, body: []byte("size=M&size=XL")}, expect: "400"},
		{name: "field and field[]", r: req{method: "POST", path: "/orders/1015/exchange", contentType: formType, body: []byte("size=M&size[]=XL")}, expect: "400"},
		{name: "field in the query and the body", r: req{method: "POST", path: "/orders/1016/exchange?size=XL", contentType: formType, body: form("size", "M")}, expect: "400"},
		{name: "field spelled PHP's way", r: req{method: "POST", path: "/orders/1021/exchange", contentType: formType, body: []byte("size=M&+size=XL")}, expect: "400"},
		{name: "repeated multipart field", r: req{method: "POST", path: "/orders/1022/exchange", contentType: mp1ct, body: bytes.Replace(mp1, []byte("\r\nL\r\n"), []byte("\r\nL\r\n--"+strings.TrimPrefix(mp1ct, "multipart/form-data; boundary=")+"\r\nContent-Disposition: form-data; name=\"size\"\r\n\r\nXL\r\n"), 1)}, expect: "400"},
		{name: "JSON to a form action", r: req{method: "POST", path: "/orders/1017/exchange", contentType: "application/json", body: []byte(`{"size":"XL"}`), script: true}, expect: "400"},
		{name: "no Content-Type to a form action", r: req{method: "POST", path: "/orders/1018/exchange", body: []byte("size=XL")}, expect: "400"},
		{name: "text/plain to a form action", r: req{method: "POST", path: "/orders/1019/exchange", contentType: "text/plain", body: []byte("size=XL")}, expect: "400"},
		{name: "form to a JSON action", r: req{method: "PATCH", path: "/api/deliveries/2004", contentType: formType, body: form("date", "2027-01-01"), script: true}, expect: "400"},
		{name: "JSON member given twice", r: req{method: "PATCH", path: "/api/deliveries/2005", contentType: "application/json", body: []byte(`{"date":"2027-01-01","date":"2027-02-02"}`), script: true}, expect: "400"},
		{name: "JSON that doesn't parse", r: req{method: "PATCH", path: "/api/deliveries/2006", contentType: "application/json", body: []byte(`{"date":"2027-01-01"`), script: true}, expect: "400"},
		{name: "two JSON values", r: req{method: "PATCH", path: "/api/deliveries/2007", contentType: "application/json", body: []byte(`{"date":"2027-01-01"} {"date":"2027-02-02"}`), script: true}, expect: "400"},
		{name: "gzip body", r: req{method: "PATCH", path: "/api/deliveries/2008", contentType: "application/json", body: gzipped(`{"date":"2027-01-01"}`), header: http.Header{"Content-Encoding": {"gzip"}}, script: true}, expect: "415"},
		// Unsafe requests no action gates: open only when pass names them.
		{name: "pass-listed POST", r: req{method: "POST", path: "/cart/items", contentType: formType, body: form("item", "socks")}, expect: "passed", mayPass: []string{"cart"}},
		{name: "POST not open to agents (page)", r: req{method: "POST", path: "/newsletter", contentType: formType, body: form("email", "a@example.com")}, expect: "403"},
		{name: "POST not open to agents (script)", r: req{method: "POST", path: "/Newsletter/", contentType: "application/json", body: []byte(`{}`), script: true}, expect: "403"},
		{name: "PUT not open to agents", r: req{method: "PUT", path: "/orders/1001/exchange", contentType: formType, body: form("size", "XL")}, expect: "403"},
		{name: "an ordinary browser is unaffected", r: req{method: "POST", path: "/newsletter", contentType: formType, body: form("email", "a@example.com"), ordinary: true}, expect: "passed", mayPass: []string{"newsletter"}},
		// Forged identity, every spelling: never the website's identity.
		{name: "underscore identity headers, joined", r: req{method: "POST", path: "/cart/items", contentType: formType, body: form("item", "hat"), header: forged}, expect: "passed", mayPass: []string{"cart"}},
		{name: "underscore identity headers, ordinary", r: req{method: "POST", path: "/newsletter", contentType: formType, body: form("email", "b@example.com"), header: forged, ordinary: true}, expect: "passed", mayPass: []string{"newsletter"}},
		{name: "underscore identity headers on the approved repeat", r: req{method: "POST", path: "/orders/1030/exchange", contentType: formType, body: form("size", "M"), header: forged}, expect: "gated", approved: ex("1030", "M")},
	}
}

// TestUpstreamMatrix runs every variant in front of every website of the
// matrix, and then, with the config saying which method override each
// honours, a POST that overrides to a gated DELETE.
func TestUpstreamMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real upstreams")
	}
	start := time.Now()
	var mu sync.Mutex
	totals := map[string]tally{}
	for _, site := range upstreamSites {
		t.Run(site.name, func(t *testing.T) {
			base := site.start(t, []string{"OPSGATE_IDENTITY_KEY=" + matrixKey})
			m := newMatrixGateway(t, base, "")
			tl := m.runVariants(t, variants())
			m.slowBodies(t, &tl)
			m.identityOnRequest(t, false)
			if len(site.honours) > 0 {
				h := newMatrixGateway(t, base, "identity_on: joined\nmethod_override: ["+strings.Join(site.honours, ", ")+"]\n")
				h.honoured(t, site.honours, &tl)
				h.identityOnRequest(t, true)
			}
			mu.Lock()
			totals[site.name] = tl
			mu.Unlock()
			t.Logf("%s: %d variants: %d gated, %d refused, %d passed; %d approved actions performed; performed without approval %d, with other terms %d, as another account %d",
				site.name, tl.variants, tl.gated, tl.refused, tl.passed, tl.performedApproved, tl.withoutApproval, tl.otherTerms, tl.asAnother)
			if tl.withoutApproval+tl.otherTerms+tl.asAnother != 0 {
				t.Errorf("%s: performed without approval %d, with other terms %d, as another account %d: want 0", site.name, tl.withoutApproval, tl.otherTerms, tl.asAnother)
			}
		})
	}
	t.Logf("the matrix took %s", time.Since(start).Round(time.Millisecond))
}

// runVariants sends each variant from the joined browser (or an ordinary
// one) and checks the gateway's answer and what the website performed.
func (m *matrixGateway) runVariants(t *testing.T, vs []variant) tally {
	var tl tally
	for _, v := range vs {
		tl.variants++
		before := len(m.performed())
		a := m.send(v.r)
		var approved []performed
		switch v.expect {
		case "gated":
			if a.status != http.StatusForbidden || a.ref == "" {
				t.Errorf("%s: %s %s answered %d (ref %q), want 403 with an operation: %.300s", v.name, v.r.method, v.r.path, a.status, a.ref, a.body)
				break
			}
			tl.gated++
			if got := m.performed(); len(got) != before {
				t.Errorf("%s: performed before approval: %+v", v.name, got[before:])
			}
			m.approveAndRepeat(v.r, a)
			approved = append(approved, v.approved)
		case "passed":
			if a.status == http.StatusForbidden || a.ref != "" || a.status >= 500 {
				t.Errorf("%s: %s %s answered %d, want it passed to the website: %.300s", v.name, v.r.method, v.r.path, a.status, a.body)
			}
			tl.passed++
		default:
			if fmt.Sprint(a.status) != v.expect || a.ref != "" {
				t.Errorf("%s: %s %s answered %d, want %s: %.300s", v.name, v.r.method, v.r.path, a.status, v.expect, a.body)
			}
			wantJSON := v.r.script
			if isJSON := strings.HasPrefix(a.header.Get("Content-Type"), "application/json"); isJSON != wantJSON {
				t.Errorf("%s: the refusal is %q for Accept %v", v.name, a.header.Get("Content-Type"), v.r.script)
			}
			tl.refused++
		}
		m.check(t, v, m.performed()[before:], approved, &tl)
	}
	return tl
}

// check counts what the website performed for one variant against what
// was approved: each approval performs at most its own action, with its
// terms, for the Session's account; nothing else but what may pass.
func (m *matrixGateway) check(t *testing.T, v variant, got []performed, approved []performed, tl *tally) {
	for _, p := range got {
		if p.ClaimedAccount == "acct_victim" || p.Account == "acct_victim" {
			tl.asAnother++
			t.Errorf("%s: the website took a forged account: %+v", v.name, p)
		}
		if slices.Contains(v.mayPass, p.Action) {
			continue
		}
		i := slices.IndexFunc(approved, func(a performed) bool { return a.Action == p.Action })
		switch {
		case i < 0:
			tl.withoutApproval++
			t.Errorf("%s: performed without approval: %+v", v.name, p)
			continue
		case approved[i].Order != p.Order || approved[i].Size != p.Size || approved[i].Date != p.Date || approved[i].Subscription != p.Subscription:
			tl.otherTerms++
			t.Errorf("%s: performed %+v, approved %+v", v.name, p, approved[i])
		case p.Account != "acct_42":
			tl.asAnother++
			t.Errorf("%s: performed for account %v, want acct_42 (the website's snippet checks the gateway's signature)", v.name, p.Account)
		default:
			tl.performedApproved++
		}
		approved = slices.Delete(approved, i, i+1) // used up
	}
	// What every website routes as the config names it is performed.
	if strings.HasSuffix(v.name, "action") && v.expect == "gated" && len(got) != 1 {
		t.Errorf("%s: the website performed %d actions after the approval, want 1", v.name, len(got))
	}
}

// slowBodies: a body held back past timeouts.body gets 408 from the
// gateway for an agent's browser, gated or open, and nothing is
// performed; an ordinary browser's is cut off just the same, without
// holding the website.
func (m *matrixGateway) slowBodies(t *testing.T, tl *tally) {
	for _, c := range []struct {
		name, path, cookie string
		want               string // "" for any answer: the website may answer before it reads the body
	}{
		{"slow body to a gated action", "/orders/1040/exchange", m.cookie, "408"},
		{"slow body to a route open to agents", "/cart/items", m.cookie, "408"},
		{"slow body from an ordinary browser", "/cart/items", "", ""},
	} {
		tl.variants++
		tl.refused++
		before := len(m.performed())
		conn, err := net.Dial("tcp", m.gw.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		body := "size=M&item=gloves"
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: shop.example\r\nContent-Type: %s\r\nContent-Length: %d\r\nAccept: text/html\r\nCookie: %s\r\n\r\n%s",
			c.path, formType, len(body)+10, c.cookie, body) // 10 bytes never sent
		conn.SetReadDeadline(time.Now().Add(bodyTimeout + 10*time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		switch {
		case err != nil:
			t.Errorf("%s: no answer: %v", c.name, err)
		case c.want != "" && fmt.Sprint(res.StatusCode) != c.want:
			t.Errorf("%s: %d, want %s", c.name, res.StatusCode, c.want)
		}
		conn.Close()
		got := m.performed()[before:]
		v := variant{name: c.name}
		if c.cookie == "" {
			v.mayPass = []string{"cart"} // an ordinary browser's: never gated
		}
		m.check(t, v, got, nil, tl)
	}
}

// identityOnRequest: GET /whoami from the joined browser. By default the
// website learns nothing but on the approved repeat; with identity_on:
// joined it learns the Session's account, and its snippet verifies the
// gateway's signature. Forged headers never count.
func (m *matrixGateway) identityOnRequest(t *testing.T, on bool) {
	forged := http.Header{"X_Opsgate_Account": {"acct_victim"}, "X-Opsgate-Account": {"acct_victim"}}
	for _, ordinary := range []bool{false, true} {
		a := m.send(req{method: "GET", path: "/whoami", header: forged, script: true, ordinary: ordinary})
		var who struct {
			Identity *struct {
				Agent, User string
				Account     *string
			}
			ClaimedAccount *string `json:"claimed_account"`
		}
		if err := json.Unmarshal(a.body, &who); err != nil {
			t.Fatalf("/whoami: %d %s", a.status, a.body)
		}
		if who.ClaimedAccount != nil && *who.ClaimedAccount == "acct_victim" {
			t.Errorf("/whoami (ordinary %v): the website read the forged account", ordinary)
		}
		switch {
		case on && !ordinary:
			if who.Identity == nil || who.Identity.Account == nil || *who.Identity.Account != "acct_42" || who.Identity.User != "usr_m" {
				t.Errorf("identity_on: joined: the website's snippet verified %+v, want acct_42 and usr_m: %s", who.Identity, a.body)
			}
		case who.Identity != nil:
			t.Errorf("/whoami (identity_on: joined %v, ordinary %v): the website verified an identity: %s", on, ordinary, a.body)
		}
	}
}

// honoured: with method_override naming the conventions the website
// honours, a POST that overrides to DELETE is the gated cancel, and once
// approved the website performs that cancel once.
func (m *matrixGateway) honoured(t *testing.T, conventions []string, tl *tally) {
	for i, conv := range conventions {
		id := fmt.Sprint(3200 + i)
		r := req{method: "POST", path: "/api/subscriptions/" + id, script: true}
		if conv == overrideField {
			r.contentType, r.body, r.script = formType, form("_method", "DELETE"), false
		} else {
			r.header = http.Header{conv: {"DELETE"}}
		}
		v := variant{name: "honoured " + conv, r: r, expect: "gated", approved: performed{Action: "cancel", Subscription: id}}
		tl.variants++
		before := len(m.performed())
		a := m.send(r)
		if a.status != http.StatusForbidden || a.ref == "" {
			t.Errorf("%s: %d, want the gated cancel: %s", v.name, a.status, a.body)
			continue
		}
		tl.gated++
		m.approveAndRepeat(r, a)
		got := m.performed()[before:]
		m.check(t, v, got, []performed{v.approved}, tl)
		if len(got) != 1 || got[0].Action != "cancel" {
			t.Errorf("%s: the website performed %+v, want the approved cancel", v.name, got)
		}
		// The same override in a PUT: websites disagree, refused.
		if r.header != nil {
			r.method = "PUT"
			if a := m.send(r); a.status != http.StatusBadRequest {
				t.Errorf("%s in a PUT: %d, want 400", v.name, a.status)
			}
		}
	}
	// An override the website does not honour is still removed or refused.
	if !slices.Contains(conventions, "X-Method-Override") {
		r := req{method: "POST", path: "/api/subscriptions/3299", header: http.Header{"X-Method-Override": {"DELETE"}}, script: true}
		before := len(m.performed())
		m.send(r)
		m.check(t, variant{name: "unhonoured header", mayPass: []string{"renew"}}, m.performed()[before:], nil, tl)
	}
}
