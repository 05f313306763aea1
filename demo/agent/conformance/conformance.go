package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Config says which website to check and how.
type Config struct {
	// Site is the Company's origin, such as "https://shop.example" or an
	// httptest.Server's URL. Required.
	Site string
	// TokenURL, when set, is a token endpoint that hands out access tokens
	// the way the opsgate demo's /demo/token does (POST client_id=…&
	// account=… answers {"access_token": "…"}): the checker then also
	// checks signed-in Sessions (the account's operation, the sign-in
	// challenge, declines). Without it those cases are skipped.
	TokenURL string
	// Account is the account TokenURL is asked for; "" is "acct_demo".
	Account string
	// Action, when set, names the gated action instead of crawling for
	// one: "METHOD /path" and, after a space, the body: a form
	// (a=1&b=2) or a JSON object. For example
	// `POST /orders/ord_1/exchange size=L`.
	Action string
	// Header goes with every request of Action (not with the waiting
	// page's Continue form, which a browser sends without a script's
	// headers): what the site's page script adds, such as a CSRF header
	// for a JSON body. Its values are never printed.
	Header http.Header
	// Cookies are the site's own cookies that every browser of the
	// checker starts with, such as the session of the site's own login
	// (-cookie). Login signs in through the site's login form first
	// instead (-login): "/path field=value&field=value", the first POST
	// form on that page with those fields, its other fields (a CSRF
	// token) kept; every browser starts with the cookies it got. Their
	// values are never printed. A site whose Kit.OwnLogin sees that login
	// gives such a browser its own approval flow, not an operation (W56).
	Cookies []*http.Cookie
	Login   string
	// StartPath is where the crawl for gated forms starts; "" is "/".
	StartPath string
	// MaxPages bounds the crawl; 0 is 40.
	MaxPages int
	// Listen is where the checker serves its agents' metadata documents
	// and key sets; "" is 127.0.0.1:0. The site fetches them to verify the
	// checker's Session JWTs, so it must reach this address.
	Listen string
	// AgentURL is the URL the site reaches Listen at, when that isn't
	// http://<Listen> (a tunnel, for a site that isn't local).
	AgentURL string
	// Performed, when set, counts how many times the site has performed
	// the checked action so far (a website's own test knows this from its
	// data). The checker then asserts exact counts; without it, it judges
	// from the site's answers and pages.
	Performed func() int
	// Concurrency is how many repeats the concurrent-repeat case sends at
	// once; 0 is 5.
	Concurrency int
	// Timeout bounds each request; 0 is 15 s.
	Timeout time.Duration
	// HTTPClient is the base client (its Transport is used); nil is
	// http.DefaultTransport.
	HTTPClient *http.Client
	// Via is the interface checked: "" or "web" (the website, its
	// endpoint and a joined browser), "api" (the JSON API: Action is
	// `METHOD /path {json}`, P rows) or "mcp" (the MCP server at mcp.url:
	// Action is `tool {json arguments}`, M rows).
	Via string
	// Log, when set, gets a line for each step and, for an answer a case
	// did not expect, its body (the first 2 KiB, CSRF tokens and access
	// tokens blanked out).
	Log io.Writer
}

// Status is a case's outcome.
type Status string

// The outcomes of a case.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Result is one case of the report.
type Result struct {
	// Name says what the case checks.
	Name string `json:"name"`
	// IDs are the rules the case proves (W… for a website).
	IDs    []string `json:"ids"`
	Status Status   `json:"status"`
	// Reasons say what failed, or why it was skipped; for a pass, what was
	// seen.
	Reasons []string `json:"reasons,omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	Site string `json:"site"`
	// Via is the interface checked: "web", "api" or "mcp".
	Via     string   `json:"via,omitempty"`
	Action  string   `json:"action,omitempty"`
	Results []Result `json:"results"`
}

// Failed reports whether any case failed.
func (r Report) Failed() bool {
	return slices.ContainsFunc(r.Results, func(x Result) bool { return x.Status == Fail })
}

// Result returns the case whose Name starts with prefix.
func (r Report) Result(prefix string) (Result, bool) {
	for _, x := range r.Results {
		if strings.HasPrefix(x.Name, prefix) {
			return x, true
		}
	}
	return Result{}, false
}

// Counts returns how many cases passed, failed and were skipped.
func (r Report) Counts() (pass, fail, skip int) {
	for _, x := range r.Results {
		switch x.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		}
	}
	return
}

// WriteText writes the report for a person: one line per case, with its
// reasons indented under it.
func (r Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "conformance of %s to operations v3 (%s)\n", r.Site, map[string]string{"": "websites", "web": "websites", "api": "its API", "mcp": "its MCP server"}[r.Via])
	if r.Action != "" {
		fmt.Fprintf(w, "gated action: %s\n", r.Action)
	}
	for _, x := range r.Results {
		fmt.Fprintf(w, "%-4s %s [%s]\n", x.Status, x.Name, strings.Join(x.IDs, " "))
		if x.Status != Pass {
			for _, why := range x.Reasons {
				fmt.Fprintf(w, "       %s\n", why)
			}
		}
	}
	p, f, s := r.Counts()
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", p, f, s)
}

// WriteJSON writes the report as one JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Test runs the checker against cfg.Site and reports each case as a
// subtest of t: a website's own `go test` can check itself against an
// httptest.Server.
func Test(t *testing.T, cfg Config) Report {
	t.Helper()
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	for _, x := range rep.Results {
		t.Run(strings.Join(x.IDs, " ")+" "+x.Name, func(t *testing.T) {
			switch x.Status {
			case Fail:
				t.Errorf("%v: %s", x.IDs, strings.Join(x.Reasons, "; "))
			case Skip:
				t.Skip(strings.Join(x.Reasons, "; "))
			}
		})
	}
	return rep
}

// ErrConfig is a Config the checker can't work with.
var ErrConfig = errors.New("conformance: bad configuration")

// Run checks the site and returns the report. An error means the checker
// could not run at all (a bad Config, its own server); everything the site
// does wrong, including not answering, is a failing case in the report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	c, err := newChecker(cfg)
	if err != nil {
		return Report{}, err
	}
	if err := c.startAgents(); err != nil {
		return Report{}, err
	}
	defer c.stopAgents()
	c.run(ctx)
	rep := Report{Site: c.origin, Via: c.cfg.Via, Results: c.results}
	if c.main != nil {
		rep.Action = c.main.String()
	}
	return rep, nil
}

// newChecker checks cfg and fills in its defaults.
func newChecker(cfg Config) (*checker, error) {
	u, err := url.Parse(cfg.Site)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: Site must be an origin such as https://shop.example, got %q", ErrConfig, cfg.Site)
	}
	switch cfg.Via {
	case "", "web", "api", "mcp":
	default:
		return nil, fmt.Errorf("%w: Via %q: web, api or mcp", ErrConfig, cfg.Via)
	}
	if (cfg.Via == "api" || cfg.Via == "mcp") && cfg.Action == "" {
		return nil, fmt.Errorf("%w: Via %s needs Action", ErrConfig, cfg.Via)
	}
	if cfg.Action != "" && cfg.Via != "mcp" {
		if _, err := parseAction(cfg.Action); err != nil {
			return nil, err
		}
	}
	for name := range cfg.Header {
		if !ValidHeaderName(name) {
			return nil, fmt.Errorf("%w: Header %q is not a header field name", ErrConfig, name)
		}
		if strings.HasPrefix(http.CanonicalHeaderKey(name), "Poppy-") {
			return nil, fmt.Errorf("%w: Header %s: the checker sends the protocol's own headers itself", ErrConfig, name)
		}
	}
	if cfg.Account == "" {
		cfg.Account = "acct_demo"
	}
	if cfg.MaxPages <= 0 {
		cfg.MaxPages = 40
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 5
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 15 * time.Second
	}
	if cfg.StartPath == "" {
		cfg.StartPath = "/"
	}
	if cfg.Login != "" {
		if path, _, _ := strings.Cut(strings.TrimSpace(cfg.Login), " "); !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("%w: Login %q: write '/path field=value&field=value'", ErrConfig, path)
		}
	}
	return &checker{cfg: cfg, origin: u.Scheme + "://" + u.Host, cookies: cfg.Cookies}, nil
}

// checker is one run.
type checker struct {
	cfg    Config
	origin string
	disc   discovery

	agents agentServer
	// the checker's Personal Agents: a and its User; b, another agent
	a, b *agent

	logMu     sync.Mutex
	mu        sync.Mutex
	responses []seen // every response the site gave, for "no 5xx"
	results   []Result

	main *action // the signed-out gated action the flow uses

	cookies []*http.Cookie // every browser's first cookies: Config.Cookies and Login's
}

// siteCookies are the cookies every new browser starts with.
func (c *checker) siteCookies() []*http.Cookie {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cookies
}

// seen is one response of the site.
type seen struct {
	what       string // METHOD URL
	status     int
	retryAfter bool
}

// logf writes one step to Config.Log. Steps name methods, URLs and
// statuses only: never a Session JWT, an access token or a cookie.
func (c *checker) logf(format string, args ...any) {
	if c.cfg.Log != nil {
		c.logMu.Lock()
		defer c.logMu.Unlock()
		fmt.Fprintf(c.cfg.Log, "check: "+format+"\n", args...)
	}
}

// bodyLimit bounds the body of an unexpected answer in the log.
const bodyLimit = 2 << 10

// logBody writes the body of an answer the checker did not expect to
// Config.Log: its first 2 KiB, with the values of CSRF tokens and other
// token-like fields blanked out.
func (c *checker) logBody(what string, h http.Header, body []byte, status string) {
	if c.cfg.Log == nil {
		return
	}
	b := redactBody(h.Get("Content-Type"), body)
	more := ""
	if len(b) > bodyLimit {
		b, more = b[:bodyLimit], fmt.Sprintf("\n  … (%d bytes in all)", len(b))
	}
	if strings.TrimSpace(b) == "" {
		b = "(empty)"
	}
	c.logf("  the body of %s (%s, %s):\n%s%s", what, status, h.Get("Content-Type"), indent(b), more)
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    | " + l
	}
	return strings.Join(lines, "\n")
}

// kase is a case being checked.
type kase struct {
	c       *checker
	name    string
	ids     []string
	fails   []string
	skips   []string
	notes   []string
	checked int
}

func (c *checker) begin(name string, ids ...string) *kase {
	return &kase{c: c, name: name, ids: ids}
}

// check records one assertion of the case. When it fails, the bodies of
// the pages and answers it names go to Config.Log.
func (k *kase) check(ok bool, format string, args ...any) bool {
	k.checked++
	if !ok {
		msg := fmt.Sprintf(format, args...)
		k.fails = append(k.fails, msg)
		for _, a := range args {
			switch v := a.(type) {
			case page:
				if v.err == nil && len(v.hops) > 0 {
					k.c.logBody(v.url, v.hops[len(v.hops)-1].header, v.body, v.String())
				}
			case answer:
				if v.err == nil {
					k.c.logBody("the operations endpoint", v.header, v.raw, v.String())
				}
			}
		}
	}
	return ok
}

func (k *kase) fail(format string, args ...any) { k.check(false, format, args...) }

// skip marks the whole case skipped, unless something in it failed; a
// part left unchecked is a note.
func (k *kase) skip(format string, args ...any) {
	k.skips = append(k.skips, fmt.Sprintf(format, args...))
}

func (k *kase) note(format string, args ...any) {
	k.notes = append(k.notes, fmt.Sprintf(format, args...))
}

func (k *kase) end() {
	r := Result{Name: k.name, IDs: k.ids}
	switch {
	case len(k.fails) > 0:
		r.Status, r.Reasons = Fail, k.fails
	case len(k.skips) > 0:
		r.Status, r.Reasons = Skip, k.skips
	default:
		r.Status, r.Reasons = Pass, append(k.notes, k.skips...)
	}
	k.c.mu.Lock()
	k.c.results = append(k.c.results, r)
	k.c.mu.Unlock()
	k.c.logf("%s %s", r.Status, r.Name)
}

// ValidHeaderName reports whether name is a header field name: one or more
// RFC 9110 token characters.
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
