package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/continueform"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

// discovery is what the checker read in poppy.json (§2).
type discovery struct {
	endpoint, join string
}

var (
	refRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)      // §4 W59, with at most 2048 characters
	idRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`) // spec 8.2 IDs
)

// run plays the Personal Agent and its browser through every case, in an
// order that needs the site to perform the action once signed out (and,
// when the site accepts agent approvals of the signed-in action, once
// signed in).
func (c *checker) run(ctx context.Context) {
	if c.cfg.Via == "api" || c.cfg.Via == "mcp" {
		c.runCalls(ctx) // calls.go
		return
	}
	if !c.checkDiscovery(ctx) {
		return
	}
	if c.cfg.Login != "" {
		k := c.begin("sign in through the site's login form (Login)")
		cs, err := c.signIn(ctx)
		if k.check(err == nil, "%v", err) {
			c.mu.Lock()
			c.cookies = append(slices.Clone(c.cookies), cs...)
			c.mu.Unlock()
		}
		k.end()
		if err != nil {
			return
		}
	}
	fl := &flow{c: c}
	if !fl.setUp(ctx) {
		return
	}
	fl.the403(ctx)
	fl.lookupCases(ctx)
	fl.pageAndJSON(ctx)
	fl.refusals(ctx)
	fl.jwtAttacks(ctx)
	fl.othersCases(ctx)
	fl.check3(ctx)
	fl.undeclared(ctx)
	fl.approveAndPerform(ctx)
	fl.unjoined(ctx)
	fl.signedIn(ctx)
	c.no5xx()
}

// --- §2 discovery ---

func (c *checker) checkDiscovery(ctx context.Context) bool {
	k := c.begin("discovery: poppy.json lists operations v3 with an endpoint and a browser join", "W01", "W02", "W03", "W04")
	defer k.end()
	b := c.newBrowser()
	p := b.get(ctx, c.origin+"/.well-known/poppy.json")
	if !k.check(p.err == nil && p.status == http.StatusOK, "GET /.well-known/poppy.json: %s", p) {
		return false
	}
	var doc struct {
		Extensions struct {
			Operations []struct {
				Version  string `json:"version"`
				Endpoint string `json:"endpoint"`
			} `json:"operations"`
		} `json:"extensions"`
		Web struct {
			BrowserSessionEndpoint string `json:"browser_session_endpoint"`
		} `json:"web"`
	}
	if !k.check(json.Unmarshal(p.body, &doc) == nil, "poppy.json is not a JSON object") {
		return false
	}
	for _, e := range doc.Extensions.Operations {
		if major, _, _ := strings.Cut(e.Version, "."); major == "3" {
			c.disc.endpoint = e.Endpoint
		}
	}
	c.disc.join = doc.Web.BrowserSessionEndpoint
	c.loopbackOrigin(k)
	if !k.check(c.disc.endpoint != "", "W01 W02: extensions.operations has no entry with version \"3\" and an endpoint") {
		return false
	}
	k.check(c.disc.join != "", "W04: poppy.json lists an operations endpoint but no web.browser_session_endpoint")
	for name, u := range map[string]string{"endpoint": c.disc.endpoint, "web.browser_session_endpoint": c.disc.join} {
		pu, err := url.Parse(u)
		if !k.check(err == nil && pu.IsAbs(), "%s %q is not an absolute URL", name, u) {
			continue
		}
		if pu.Scheme != "https" {
			host := pu.Hostname()
			local := host == "localhost" || net.ParseIP(host).IsLoopback()
			k.check(local, "W03: %s %q is not HTTPS", name, u)
			if local {
				k.note("%s is plain http on a local address (allowed for development only)", name)
			}
		}
	}
	return len(k.fails) == 0
}

// loopbackOrigin: a site reached as localhost that calls itself 127.0.0.1
// (or the other way round) in poppy.json checks Session JWTs and return_to
// against the name it uses, so the checker uses that origin too.
func (c *checker) loopbackOrigin(k *kase) {
	ju, err := url.Parse(c.disc.join)
	su, err2 := url.Parse(c.origin)
	if err != nil || err2 != nil || ju.Host == su.Host || ju.Scheme != su.Scheme || ju.Port() != su.Port() {
		return
	}
	loop := func(h string) bool { return h == "localhost" || net.ParseIP(h).IsLoopback() }
	if loop(ju.Hostname()) && loop(su.Hostname()) {
		k.note("the site calls itself %s://%s in poppy.json: using that origin", ju.Scheme, ju.Host)
		c.origin = ju.Scheme + "://" + ju.Host
	}
}

// flow holds what the cases share: the browsers, Sessions, the gated
// action and its references.
type flow struct {
	c *checker

	sA, sA2 *session // the agent's User: the browser's Session, and another Session
	bA      *browser // joined to sA, declaring operations v3

	main      *action // the signed-out gated action
	secondary *action // another gated action, for the unjoined browser
	// gatedOut are the URLs of the forms that got a signed-out joined
	// browser an operation.
	gatedOut []string

	// from the first gated answers
	pHTML, pJSON page
	// wait is the latest waiting page of the main request, whose Continue
	// the browser presses once the agent has approved.
	wait     waiting
	ref, sid string
	op       store.Operation // the current revision of ref's operation
	haveOp   bool

	stable   bool   // the form's page reads the same twice: a change means an effect
	snapshot []byte // the form's page before anything was approved

	before    int // Performed() at the start
	performed int // performances the checker caused and saw
}

func (f *flow) performedCount() (int, bool) {
	if f.c.cfg.Performed == nil {
		return 0, false
	}
	return f.c.cfg.Performed() - f.before, true
}

// setUp joins the browser and finds the gated action.
func (f *flow) setUp(ctx context.Context) bool {
	c := f.c
	k := c.begin("join and find a gated action: a joined browser's request gets 403 with Poppy-Operation", "W10", "W53", "W55")
	defer k.end()
	f.sA, f.sA2 = c.a.session(false), c.a.session(false)
	f.bA = c.newBrowser()
	if err := f.bA.join(ctx, f.sA, joinOpts{declare: true}); !k.check(err == nil, "the browser join at %s: %v", c.disc.join, err) {
		return false
	}
	if c.cfg.Performed != nil {
		f.before = c.cfg.Performed()
	}
	var candidates []*action
	if c.cfg.Action != "" {
		a, _ := parseAction(c.cfg.Action)
		a.url = c.origin + a.url
		a.header = c.cfg.Header
		candidates = []*action{a}
	} else {
		candidates = f.bA.crawl(ctx)
		// Forms that offer other values first: they also let the checker
		// ask for new terms.
		slices.SortStableFunc(candidates, func(x, y *action) int {
			return boolRank(x.choice == "") - boolRank(y.choice == "")
		})
	}
	// Every form is tried, so that the signed-in part knows which actions
	// are gated only signed in.
	for _, a := range candidates {
		p := f.bA.do(ctx, a.request("", ""))
		if !p.gated() {
			if p.err == nil && p.first().status >= 400 {
				c.logBody("not gated: "+a.String(), p.first().header, p.body, p.String())
			}
			continue
		}
		f.gatedOut = append(f.gatedOut, a.url)
		switch {
		case f.main == nil:
			f.main = a
			f.pHTML = p
		case f.secondary == nil:
			f.secondary = a
		}
	}
	if f.main == nil {
		what := fmt.Sprintf("none of the %d POST forms and htmx or Turbo requests found from %s answered a joined browser with 403 and Poppy-Operation", len(candidates), c.cfg.StartPath)
		if c.cfg.Action != "" {
			what = fmt.Sprintf("%s did not answer a joined browser with 403 and Poppy-Operation", c.cfg.Action)
		}
		k.fail("%s (name one with -action)", what)
		return false
	}
	c.main = f.main
	k.note("gated: %s", f.main)
	// The page the form is on, to see whether anything changed, and the
	// request once more, now that the page is known (W33).
	if f.main.page != "" {
		one, two := f.bA.get(ctx, f.main.page), f.bA.get(ctx, f.main.page)
		f.stable = one.err == nil && bytes.Equal(one.body, two.body)
		f.snapshot = two.body
	}
	req := f.main.request("", "")
	p := f.bA.do(ctx, req)
	f.wait = waiting{p, req}
	if p.gated() {
		f.pHTML = p
	} else {
		k.fail("the gated action answered %s the second time, want 403 with Poppy-Operation again", p)
	}
	return true
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unchanged reports whether nothing the checker can see was performed
// since setUp: the site's count, when given, or the form's page.
func (f *flow) unchanged(ctx context.Context) (bool, string) {
	if n, ok := f.performedCount(); ok {
		return n == f.performed, fmt.Sprintf("the site performed the action %d time(s), the checker expected %d", n, f.performed)
	}
	if f.stable && f.performed == 0 {
		p := f.bA.get(ctx, f.main.page)
		return p.err == nil && bytes.Equal(p.body, f.snapshot), "the page " + f.main.page + " changed: the action seems to have been performed"
	}
	return true, ""
}

// --- §4 the browser's 403 ---

func (f *flow) the403(ctx context.Context) {
	k := f.c.begin("the 403 and its headers: nothing performed, Poppy-Operation with the Session's sid and a ref, no-store", "W33", "W52", "W53", "W57", "W58", "W59", "W68")
	defer k.end()
	p := f.pHTML
	k.check(p.first().status == http.StatusForbidden, "W53: status %d, want 403", p.first().status)
	sid, ref, err := headers.ParseOperation(p.opHeader())
	if !k.check(err == nil, "W57: Poppy-Operation %q is not a Dictionary with the Strings sid and ref: %v", p.opHeader(), err) {
		return
	}
	f.sid, f.ref = sid, ref
	k.check(sid == f.sA.sid, "W58: sid %q is not the Session the browser joined (%s)", sid, f.sA.sid)
	k.check(refRE.MatchString(ref) && len(ref) <= 2048, "W59: ref %q breaks 1–2048 characters of A–Z a–z 0–9 - _ .", ref)
	k.check(strings.Contains(p.first().header.Get("Cache-Control"), "no-store"), "W68: Cache-Control %q, want no-store", p.first().header.Get("Cache-Control"))
	if ok, why := f.unchanged(ctx); !ok {
		k.fail("W33 W52: %s after the 403", why)
	}
}

// lookup asks the endpoint for ref in Session s.
func (f *flow) lookup(ctx context.Context, s *session, ref string) answer {
	return f.c.endpoint(ctx, s, post{ref: ref})
}

// current looks up the ref's operation and remembers it.
func (f *flow) current(ctx context.Context) (store.Operation, bool) {
	a := f.lookup(ctx, f.sA, f.ref)
	op, ok := a.operation()
	if ok {
		f.op, f.haveOp = op, true
	}
	return op, ok
}

func (f *flow) lookupCases(ctx context.Context) {
	k := f.c.begin("lookup: the endpoint answers a ref with 403 approval_required and the operation", "W14", "W15", "W16", "W17", "W22", "W23", "W26", "W47", "W48", "W49", "W61", "W69", "W72", "W74")
	defer k.end()
	if f.ref == "" {
		k.skip("no ref to look up")
		return
	}
	a := f.lookup(ctx, f.sA, f.ref)
	k.check(a.status == http.StatusForbidden && a.errorCode() == "approval_required", "W47 W72: lookup answered %s, want 403 approval_required", a)
	k.check(strings.HasPrefix(a.header.Get("Content-Type"), "application/json"), "W47: Content-Type %q", a.header.Get("Content-Type"))
	k.check(a.header.Get("WWW-Authenticate") == "", "W49: approval_required carries WWW-Authenticate %q", a.header.Get("WWW-Authenticate"))
	op, ok := a.operation()
	if !k.check(ok, "W48: the answer has no operation: %s", a.raw) {
		return
	}
	f.op, f.haveOp = op, true
	var raw struct {
		Operation map[string]json.RawMessage `json:"operation"`
	}
	_ = json.Unmarshal(a.raw, &raw)
	for _, m := range []string{"operation_id", "revision", "terms", "expires_at"} {
		k.check(raw.Operation[m] != nil, "W15: the operation has no %s", m)
	}
	k.check(idRE.MatchString(op.ID), "W22: operation_id %q is not an ID", op.ID)
	k.check(idRE.MatchString(op.Revision), "W23: revision %q is not an ID", op.Revision)
	k.check(bytes.HasPrefix(bytes.TrimSpace(op.Terms), []byte("{")), "W16: terms is not an object: %s", op.Terms)
	var exp string
	_ = json.Unmarshal(raw.Operation["expires_at"], &exp)
	_, err := time.Parse(time.RFC3339, exp)
	k.check(err == nil, "W17: expires_at %q is not RFC 3339", exp)

	again := f.lookup(ctx, f.sA, f.ref)
	if op2, ok := again.operation(); k.check(ok, "W26: a second lookup answered %s", again) && op2.Revision == op.Revision {
		k.check(bytes.Equal(op2.Terms, op.Terms) && op2.ExpiresAt.Equal(op.ExpiresAt), "W26: revision %s came back with other terms or expires_at", op.Revision)
	}
	other := f.lookup(ctx, f.sA2, f.ref)
	if op2, ok := other.operation(); k.check(ok, "W61: the same agent and User in another Session got %s", other) {
		k.check(op2.ID == op.ID, "W61: another Session got operation %s, not %s", op2.ID, op.ID)
	}
	noExt := f.c.endpoint(ctx, f.sA, post{ref: f.ref, noExtension: true})
	_, has := noExt.body["operation"]
	k.check(!has && noExt.status >= 400 && noExt.status < 500, "W14: a lookup without Poppy-Extensions answered %s with an operation=%v", noExt, has)

	for _, bad := range []struct{ what, ref string }{
		{"a ref changed in its last character", mutate(f.ref)},
		{"a ref the site never returned", "zz" + randomID(20)},
		{"a ref with bad characters", "a b/c"},
		{"a ref of 2049 characters", strings.Repeat("a", 2049)},
	} {
		a := f.lookup(ctx, f.sA, bad.ref)
		_, has := a.body["operation"]
		k.check(a.status == http.StatusBadRequest && a.errorCode() == "invalid_request" && !has, "W74: %s answered %s, want 400 invalid_request", bad.what, a)
	}
}

func mutate(ref string) string {
	last := ref[len(ref)-1]
	c := byte('x')
	if last == 'x' {
		c = 'y'
	}
	return ref[:len(ref)-1] + string(c)
}

func (f *flow) pageAndJSON(ctx context.Context) {
	k := f.c.begin("page and JSON answers: a waiting page with Continue for a form, {\"error\":\"approval_required\"} for a script, neither with the operation", "W19", "W62", "W64", "W65", "W66", "W68")
	defer k.end()
	p := f.pHTML
	if f.main.json != nil {
		// A JSON body is a page script's request: the waiting page and its
		// Continue control are for page loads and form submissions.
		k.note("W62 W65 not checked: the action is a script's JSON request")
	} else {
		ct := p.first().header.Get("Content-Type")
		switch f.main.framework {
		case "":
			k.check(strings.HasPrefix(ct, "text/html"), "W65: the form submission's 403 has Content-Type %q, want a page", ct)
		case viaTurbo:
			k.check(strings.HasPrefix(ct, "text/html") || strings.HasPrefix(ct, "text/vnd.turbo-stream.html"), "W65: Turbo's 403 has Content-Type %q, want a Turbo Stream or a page", ct)
		default:
			k.check(strings.HasPrefix(ct, "text/html"), "W65: htmx's 403 has Content-Type %q, want HTML htmx swaps", ct)
		}
		if _, err := continueOf(f.wait); err != nil {
			k.fail("W62: %s", continueFailure(f.main, err))
		}
	}

	f.pJSON = f.bA.do(ctx, f.main.request("", "application/json"))
	j := f.pJSON
	k.check(j.gated(), "W66: a script's request (Accept: application/json) answered %s, want 403 with Poppy-Operation", j)
	var body map[string]json.RawMessage
	k.check(json.Unmarshal(j.body, &body) == nil, "W66: the script's 403 body is not a JSON object: %.80q", j.body)
	var e string
	_ = json.Unmarshal(body["error"], &e)
	k.check(e == "approval_required", "W66: the script's 403 body has error %q, want approval_required", e)
	_, has := body["operation"]
	k.check(!has, "W64: the script's 403 body carries the operation")
	k.check(strings.Contains(j.first().header.Get("Cache-Control"), "no-store"), "W68: the script's 403 has Cache-Control %q", j.first().header.Get("Cache-Control"))
	if _, ref, err := headers.ParseOperation(j.opHeader()); err == nil && f.haveOp {
		a := f.lookup(ctx, f.sA, ref)
		if op, ok := a.operation(); k.check(ok, "W19: the script's ref answered %s", a) {
			k.check(op.ID == f.op.ID, "W19: the same request again got operation %s, then %s", f.op.ID, op.ID)
		}
	}
	if f.haveOp {
		for _, b := range [][]byte{p.body, j.body} {
			k.check(!bytes.Contains(b, []byte(f.op.Revision)), "W64: the browser's 403 body contains the revision %s", f.op.Revision)
		}
	}
}

// --- endpoint refusals and Session JWT attacks (§4 W70, spec 5.3) ---

func (f *flow) refusals(ctx context.Context) {
	k := f.c.begin("endpoint refusals: no Session header, even with the browser's cookie, gets 401 with a challenge; bad bodies 400", "W70", "W148", "W74")
	defer k.end()
	if f.ref == "" {
		k.skip("no ref")
		return
	}
	unauth := func(what string, a answer) {
		_, has := a.body["operation"]
		k.check(a.status == http.StatusUnauthorized && !has, "W70: %s answered %s, want 401 invalid_session", what, a)
		if a.status == http.StatusUnauthorized {
			ch := a.header.Get("WWW-Authenticate")
			k.check(ch != "", "W70: %s: a 401 without WWW-Authenticate (every 401 carries a challenge)", what)
			k.check(strings.Contains(ch, "Poppy-Session") && strings.Contains(ch, "invalid_session") && a.errorCode() == "invalid_session",
				"W70: %s: want WWW-Authenticate: Poppy-Session error=\"invalid_session\" and {\"error\":\"invalid_session\"}, got %q %s", what, ch, a.raw)
		}
	}
	unauth("no Poppy-Session, with the browser's cookie", f.c.endpoint(ctx, nil, post{ref: f.ref, noSession: true, cookies: f.bA}))
	unauth("a Poppy-Session that is not a JWT", f.c.endpoint(ctx, f.sA, post{ref: f.ref, jwt: "not-a-jwt"}))
	unauth("the sid alone as Poppy-Session", f.c.endpoint(ctx, f.sA, post{ref: f.ref, jwt: f.sA.sid}))
	for _, bad := range []struct{ what, body string }{
		{"a body that is not JSON", "ref=" + f.ref},
		{"a body without ref", `{}`},
		{"a ref that is not a string", `{"ref": 7}`},
	} {
		a := f.c.endpoint(ctx, f.sA, post{body: []byte(bad.body)})
		_, has := a.body["operation"]
		k.check(a.status >= 400 && a.status < 500 && !has, "%s answered %s, want a 4xx such as 400 invalid_request", bad.what, a)
	}
}

func (f *flow) jwtAttacks(ctx context.Context) {
	c := f.c
	k := c.begin("Session JWT attacks: a forged, altered, expired, replayed or misdirected Session JWT gets 401 invalid_session", "W70", "W76")
	defer k.end()
	if f.ref == "" {
		k.skip("no ref")
		return
	}
	sign := func(edit func(*agentside.SessionClaims)) string {
		j, err := c.jwt(f.sA, "", edit)
		if err != nil {
			k.fail("the checker could not sign: %v", err)
		}
		return j
	}
	valid := sign(nil)
	replay := sign(nil)
	cases := []struct{ what, jwt string }{
		{"a JWT with its signature altered", tamper(valid)},
		{"a JWT with alg none", noneJWT(sign(nil))},
		{"a JWT for another site (aud)", sign(func(cl *agentside.SessionClaims) { cl.Audience = "https://other.example" })},
		{"an expired JWT", sign(func(cl *agentside.SessionClaims) { cl.IssuedAt = time.Now().Add(-10 * time.Minute) })},
		{"a JWT issued in the future", sign(func(cl *agentside.SessionClaims) { cl.IssuedAt = time.Now().Add(10 * time.Minute) })},
		{"a JWT living an hour", sign(func(cl *agentside.SessionClaims) { cl.Lifetime = time.Hour })},
	}
	for _, tc := range cases {
		a := c.endpoint(ctx, f.sA, post{ref: f.ref, jwt: tc.jwt})
		_, has := a.body["operation"]
		k.check(a.status == http.StatusUnauthorized && !has, "%s answered %s, want 401", tc.what, a)
		k.check(a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") != "", "%s: a 401 without WWW-Authenticate", tc.what)
	}
	first := c.endpoint(ctx, f.sA, post{ref: f.ref, jwt: replay})
	second := c.endpoint(ctx, f.sA, post{ref: f.ref, jwt: replay})
	k.check(first.status == http.StatusForbidden, "a fresh JWT answered %s, want 403 approval_required", first)
	_, has := second.body["operation"]
	k.check(second.status == http.StatusUnauthorized && !has, "the same JWT (its jti) sent again answered %s, want 401", second)
	if c.cfg.TokenURL != "" {
		tok, err := c.accessToken(ctx, c.a)
		if k.check(err == nil, "the access token: %v", err) {
			s := c.a.session(true)
			noAth, _ := c.jwt(s, "", nil) // no ath for the token it travels with
			a := c.endpoint(ctx, s, post{ref: f.ref, jwt: noAth, token: tok})
			k.check(a.status == http.StatusUnauthorized, "a JWT not bound to the access token it carries (no ath) answered %s, want 401", a)
			sb := c.b.session(true)
			a = c.endpoint(ctx, sb, post{ref: f.ref, token: tok})
			k.check(a.status == http.StatusUnauthorized, "another agent's Session with this agent's access token answered %s, want 401", a)
		}
	}
}

// --- §3 who can approve: another User, agent, Session ---

func (f *flow) othersCases(ctx context.Context) {
	c := f.c
	k := c.begin("another User and another Session: only the same agent and User, signed out, can see or approve the operation", "W40", "W42", "W45", "W61", "W76", "W77", "W112")
	defer k.end()
	if !f.haveOp {
		k.skip("no operation")
		return
	}
	refused := func(what string, a answer) {
		_, has := a.body["operation"]
		k.check(a.status == http.StatusBadRequest && a.errorCode() == "invalid_request" && !has, "%s answered %s, want 400 invalid_request and no operation", what, a)
	}
	refused("W45 W76 W77: another User's lookup", f.lookup(ctx, c.a.otherUser(), f.ref))
	refused("W45 W77: another agent's lookup", f.lookup(ctx, c.b.session(false), f.ref))
	refused("W112: another User's approval", c.endpoint(ctx, c.a.otherUser(), post{ref: f.ref, approval: approval(f.op.ID, f.op.Revision, "user")}))
	if c.cfg.TokenURL != "" {
		refused("W42: a signed-in Session of the same agent and User (a signed-out operation)", f.lookup(ctx, c.a.session(true), f.ref))
	} else {
		k.note("W42 not checked: it needs a signed-in Session (a token URL)")
	}
	a := f.lookup(ctx, f.sA, f.ref)
	k.check(a.status == http.StatusForbidden, "W112: after another User's approval the lookup answered %s: it was recorded", a)
	k.note("approval in another Session of the same agent and User (W40, W46) is checked when the flow approves")
}

// --- §6 check 3 at the endpoint ---

func (f *flow) check3(ctx context.Context) {
	c := f.c
	k := c.begin("check 3: an approval of a revision never returned, or of another operation, gets 403 with a new revision and records nothing", "W100", "W110", "W114", "W116", "W122")
	defer k.end()
	op, ok := f.current(ctx)
	if !ok {
		k.skip("no operation")
		return
	}
	invented := "r" + randomID(20)
	a := c.endpoint(ctx, f.sA, post{ref: f.ref, approval: approval(op.ID, invented, "user")})
	if got, ok := a.operation(); k.check(a.status == http.StatusForbidden && a.errorCode() == "approval_required" && ok, "W114 W100: an invented revision answered %s, want 403 approval_required with the operation", a) {
		k.check(got.Revision != invented, "W122: the answer names the approval's own revision")
		k.check(got.ID == op.ID, "W100: the answer is operation %s, not the ref's %s", got.ID, op.ID)
	}
	a = c.endpoint(ctx, f.sA, post{ref: f.ref, approval: approval("op_"+randomID(12), op.Revision, "user")})
	if got, ok := a.operation(); k.check(a.status == http.StatusForbidden && ok, "W116: an approval naming another operation_id with this ref answered %s, want 403 approval_required with the ref's operation", a) {
		// Check 1 may treat it as no approval at all (a lookup), whose
		// answer is the current revision: only noted.
		if got.Revision == op.Revision {
			k.note("W122: the answer to an approval naming another operation repeats the revision it named (%s)", op.Revision)
		}
	}
	a = f.lookup(ctx, f.sA, f.ref)
	k.check(a.status == http.StatusForbidden, "W110: after check-3 failures the lookup answered %s: something was recorded", a)
	f.current(ctx)
}

// --- §2 undeclared browsers ---

func (f *flow) undeclared(ctx context.Context) {
	c := f.c
	k := c.begin("undeclared browsers: a browser whose join declared no operations v3 never gets an operation", "W10", "W11", "W12", "W13")
	defer k.end()
	target := f.secondary
	if target == nil {
		target = f.main
	}
	for _, tc := range []struct{ what, ext string }{{"declaring nothing", ""}, {`declaring "operations";v="2"`, `"operations";v="2"`}} {
		b := c.newBrowser()
		if err := b.join(ctx, c.a.session(false), joinOpts{extensions: tc.ext}); !k.check(err == nil, "the join %s: %v", tc.what, err) {
			continue
		}
		p := b.do(ctx, target.request("", "application/json"))
		k.check(len(p.opHeader()) == 0, "W11: a browser %s got Poppy-Operation", tc.what)
		var body map[string]json.RawMessage
		_ = json.Unmarshal(p.body, &body)
		_, has := body["operation"]
		k.check(!has, "W11: a browser %s got an operation in the body", tc.what)
		if p.first().status == http.StatusForbidden {
			var e, ext string
			_ = json.Unmarshal(body["error"], &e)
			_ = json.Unmarshal(body["extension"], &ext)
			if e == "extension_required" {
				k.check(ext == "operations", "W12: extension_required names extension %q, want operations", ext)
			}
		}
		if p.performedLike() {
			k.note("a browser %s got the site's own flow (%s)", tc.what, p)
		}
	}
}

// --- §6 record, perform once, concurrent repeats, new terms ---

func (f *flow) approveAndPerform(ctx context.Context) {
	c := f.c
	syn := c.begin("Poppy-Approval syntax: malformed approvals record nothing; unknown members, an unknown input_type and an old approved_at are fine", "W78", "W79", "W82", "W83", "W84", "W85")
	br := c.begin("an approval through the browser: a browser's request carrying Poppy-Approval is answered as one without, and records nothing", "W86")
	nt := c.begin("new terms: other terms get the same operation_id and a new revision, and an approval of one revision never performs another", "W20", "W24", "W30", "W34", "W36", "W37", "W99", "W117")
	rec := c.begin("record and perform once: 204, status approved, the browser's repeat performs it, status performed, never again", "W40", "W46", "W89", "W90", "W91", "W92", "W94", "W104", "W105", "W106", "W108", "W113", "W121", "W136", "W141")
	con := c.begin("concurrent repeats: many repeats of the approved request perform it exactly once, and none answers as a failure", "W96", "W135", "W142", "W145")
	defer func() { syn.end(); br.end(); nt.end(); rec.end(); con.end() }()
	if !f.haveOp {
		for _, k := range []*kase{syn, br, nt, rec, con} {
			k.skip("no operation to approve")
		}
		return
	}

	// Malformed approvals: refused, nothing recorded.
	op := f.op
	for _, bad := range []struct{ what, header string }{
		{"not a Dictionary", `operation_id="` + op.ID + `", revision=(`},
		{"no approver", fmt.Sprintf("operation_id=%q, revision=%q", op.ID, op.Revision)},
		{`approver="robot"`, approval(op.ID, op.Revision, "robot")},
		{"operation_id as a Token", fmt.Sprintf(`operation_id=%s, revision=%q, approver="user"`, strings.ReplaceAll(op.ID, "-", "_"), op.Revision)},
		{"revision as an Integer", fmt.Sprintf(`operation_id=%q, revision=7, approver="user"`, op.ID)},
	} {
		a := c.endpoint(ctx, f.sA, post{ref: f.ref, approval: bad.header})
		syn.check(a.status >= 400 && a.status < 500 && a.status != http.StatusNoContent, "W78 W84: an approval with %s answered %s, want a 4xx that records nothing", bad.what, a)
	}
	if a := f.lookup(ctx, f.sA, f.ref); !syn.check(a.status == http.StatusForbidden, "W84: after malformed approvals the lookup answered %s: one was recorded", a) {
		return
	}

	// An approval through the browser (a page script could add any
	// header): not an approval.
	req := f.main.request("", "")
	if req.header == nil {
		req.header = http.Header{}
	}
	req.header[headers.Approval] = []string{approval(op.ID, op.Revision, "user", fmt.Sprintf("approved_at=%d", time.Now().Unix()), `input_type="tap"`)}
	pb := f.bA.do(ctx, req)
	br.check(!pb.performedLike() && pb.gated(), "W86: the browser's request with Poppy-Approval answered %s, want 403 with Poppy-Operation", pb)
	if ok, why := f.unchanged(ctx); !ok {
		br.fail("W86: %s after the browser's request with Poppy-Approval", why)
		f.performed++ // count it, so that later cases judge their own effect
	}
	if a := f.lookup(ctx, f.sA, f.ref); !br.check(a.status == http.StatusForbidden, "W86: after the browser's request with Poppy-Approval the lookup answered %s: it was recorded", a) {
		return
	}

	// New terms: another value of the form's choice.
	opB := store.Operation{}
	bothApproved := false
	if f.main.choice == "" || len(f.main.others) == 0 {
		nt.skip("the gated form offers no other value to ask for other terms")
	} else {
		pB := f.bA.do(ctx, f.main.request(f.main.others[0], ""))
		_, refB, err := headers.ParseOperation(pB.opHeader())
		if nt.check(pB.gated() && err == nil, "W34: other terms (%s=%s) answered %s, want 403 with Poppy-Operation", f.main.choice, f.main.others[0], pB) {
			a := f.lookup(ctx, f.sA, refB)
			if got, ok := a.operation(); nt.check(ok, "W34: the new ref answered %s", a) {
				opB = got
				nt.check(got.ID == op.ID, "W20 W34: other terms for the same action got operation %s, not %s", got.ID, op.ID)
				nt.check(got.Revision != op.Revision, "W24 W36: other terms (%s) got the same revision %s", got.Terms, op.Revision)
				nt.check(!bytes.Equal(got.Terms, op.Terms), "W30: other terms (%s=%s) have the same terms object %s", f.main.choice, f.main.others[0], got.Terms)
			}
		}
		// Ask for the first terms again: they are the ones approved.
		reqA := f.main.request("", "")
		pA := f.bA.do(ctx, reqA)
		if _, ref, err := headers.ParseOperation(pA.opHeader()); nt.check(pA.gated() && err == nil, "the first terms again answered %s", pA) {
			f.ref = ref
			f.wait = waiting{pA, reqA}
		}
		if got, ok := f.current(ctx); ok && opB.Revision != "" {
			nt.check(got.Revision != opB.Revision, "W36: the first terms came back with the other terms' revision %s", got.Revision)
		}
		op = f.op
	}

	// Record: a minimal approval from another Session of the same agent
	// and User (W40, W82).
	a := c.endpoint(ctx, f.sA2, post{ref: f.ref, approval: approval(op.ID, op.Revision, "user")})
	if !rec.check(a.status == http.StatusNoContent, "W82 W91 W40: a minimal user approval from another Session of the same agent and User answered %s, want 204", a) {
		syn.fail("W82: an approval with only operation_id, revision and approver answered %s", a)
		return
	}
	syn.check(true, "")
	rec.check(len(bytes.TrimSpace(a.raw)) == 0, "W91: the 204 has a body")
	a = c.endpoint(ctx, f.sA, post{ref: f.ref, approval: approval(op.ID, op.Revision, "user",
		fmt.Sprintf("approved_at=%d", time.Now().Add(-time.Hour).Unix()), `input_type="blink"`, `reference="apr_`+randomID(12)+`"`, `sig=:AAAA:`, `x-later="1";p=2`)})
	syn.check(a.status == http.StatusNoContent || (a.status == http.StatusOK && a.str("status") == "approved"),
		"W79 W83 W85: the same approval with unknown members, input_type=\"blink\" and an approved_at an hour old answered %s, want 204", a)
	st := f.lookup(ctx, f.sA, f.ref)
	rec.check(st.status == http.StatusOK && st.str("status") == "approved" && st.str("operation_id") == op.ID, "W90 W105 W106: after the 204 the lookup answered %s, want 200 {operation_id, status approved}", st)
	if ok, why := f.unchanged(ctx); !ok {
		rec.fail("W92: %s once the approval was recorded", why)
	}

	// The other terms with the approval recorded: not performed.
	if opB.Revision != "" {
		pB := f.bA.do(ctx, f.main.request(f.main.others[0], ""))
		nt.check(!pB.performedLike(), "W99 W117: a request for other terms (%s=%s) was performed under the approval of %s: %s", f.main.choice, f.main.others[0], op.Revision, pB)
		nt.check(pB.gated() || pB.first().status >= 400, "W99: a request for other terms answered %s, want 403 with a new ref", pB)
		if ok, why := f.unchanged(ctx); !ok {
			nt.fail("W99 W117: %s after a request for other terms", why)
		}
		// Approve the other terms too: whichever revision is approved,
		// the operation is performed at most once (W37).
		if _, refB2, err := headers.ParseOperation(pB.opHeader()); err == nil {
			if got, ok := f.lookup(ctx, f.sA, refB2).operation(); ok {
				a := c.endpoint(ctx, f.sA, post{ref: refB2, approval: approval(got.ID, got.Revision, "user")})
				if a.status == http.StatusNoContent {
					bothApproved = true
				} else {
					nt.note("W37 not checked: the approval of the other terms answered %s", a)
				}
			}
		}
	}

	// Another User's browser with the same request: never performed by
	// this User's approval (W104 in "another User" terms).
	other := c.newBrowser()
	if err := other.join(ctx, c.a.otherUser(), joinOpts{declare: true}); err == nil {
		p := other.do(ctx, f.main.request("", ""))
		rec.check(!p.performedLike(), "W104: another User's browser was performed under this User's approval: %s", p)
	}

	// Concurrent presses of the waiting page's Continue from the browser,
	// joined to the first Session (W46: the approval came from another
	// Session).
	approvedRef := f.ref
	performed, answers, next, err := f.repeat(ctx)
	if err != nil {
		rec.fail("W62 W94: the browser can't press the waiting page's Continue: %s", continueFailure(f.main, err))
		con.skip("the waiting page's Continue can't be pressed")
		return
	}
	if _, newRef, perr := headers.ParseOperation(next.p.opHeader()); performed == 0 && perr == nil && next.p.gated() {
		// The site may treat an approval of a revision it has since
		// replaced as failing check 3 (W120): approve the new one, and
		// press the new waiting page's Continue.
		f.ref = newRef
		if op2, ok := f.current(ctx); ok {
			a := c.endpoint(ctx, f.sA2, post{ref: f.ref, approval: approval(op2.ID, op2.Revision, "user")})
			if a.status == http.StatusNoContent {
				con.note("the site answered the repeat with a new revision (W120); approved it and repeated again")
				f.wait = next
				if performed, answers, _, err = f.repeat(ctx); err != nil {
					rec.fail("W62 W94: the browser can't press the new waiting page's Continue: %s", continueFailure(f.main, err))
				}
				approvedRef = f.ref
			}
		}
	}
	f.ref = approvedRef
	con.check(performed == 1, "W135: %d concurrent repeats performed the action %d times (%s), want exactly once", c.cfg.Concurrency, performed, strings.Join(answers, ", "))
	rec.check(performed >= 1, "W94 W46 W121: no repeat got the action's own answer (%s)", strings.Join(answers, ", "))
	if performed >= 1 {
		f.performed++
	}
	if n, ok := f.performedCount(); ok {
		con.check(n == 1, "W135: the site performed the action %d times", n)
	}
	for _, s := range answers {
		con.check(!strings.HasPrefix(s, "5") || strings.HasPrefix(s, "503"), "W142: a repeat answered %s", s)
	}
	st = f.lookup(ctx, f.sA, f.ref)
	rec.check(st.status == http.StatusOK && st.str("status") == "performed", "W108: after the repeat the lookup answered %s, want 200 status performed", st)
	if f.stable {
		p := f.bA.get(ctx, f.main.page)
		if !bytes.Equal(p.body, f.snapshot) {
			rec.note("the page %s shows the change", f.main.page)
		}
	}

	// Once performed: the approval again says the same, the request again
	// is a new one.
	a = c.endpoint(ctx, f.sA2, post{ref: f.ref, approval: approval(op.ID, op.Revision, "user")})
	_, has := a.operation()
	rec.check((a.status == http.StatusNoContent || (a.status == http.StatusOK && a.str("status") == "performed")) && !has,
		"W136: the same approval after the action answered %s, want 204 or 200 status performed", a)
	if a.status == http.StatusOK {
		rec.check(a.str("operation_id") == op.ID, "W113 W136: check 2's answer names operation %q, not the ref's %s", a.str("operation_id"), op.ID)
	}
	if bothApproved {
		pB := f.bA.do(ctx, f.main.request(f.main.others[0], ""))
		nt.check(!pB.performedLike(), "W37: the other terms, approved too, were performed after the operation was performed: %s", pB)
		if pB.performedLike() {
			f.performed++
		}
	}
	p := f.bA.do(ctx, f.main.request("", ""))
	rec.check(!p.performedLike(), "W141 W135: the request made again after the action was performed again: %s", p)
	if _, ref2, err := headers.ParseOperation(p.opHeader()); p.gated() && err == nil {
		a := f.lookup(ctx, f.sA, ref2)
		if got, ok := a.operation(); ok {
			rec.check(got.ID != op.ID, "W141: the request after the action got the performed operation %s again", got.ID)
		}
	}
	if n, ok := f.performedCount(); ok {
		rec.check(n == 1, "W135: the site performed the action %d times in all", n)
	}
}

// repeat presses the waiting page's Continue Concurrency times at once
// (for a script's request, sends it again: opsgate.fetch does), as tabs
// showing the page would, and counts those answered with the action's own
// answer. next is the last answer that was another waiting page, with the
// Continue request that got it. It fails when the page's Continue can't
// be pressed or would not make the request again (W62).
func (f *flow) repeat(ctx context.Context) (performed int, answers []string, next waiting, err error) {
	req, err := continueOf(f.wait)
	if err != nil {
		return 0, nil, waiting{}, err
	}
	req.once = true
	n := f.c.cfg.Concurrency
	pages := make([]page, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			pages[i] = f.bA.do(ctx, req)
		})
	}
	close(start)
	wg.Wait()
	logged := false
	for _, p := range pages {
		if p.performedLike() {
			performed++
		} else if !logged && p.err == nil && !p.gated() {
			logged = true
			f.c.logBody("a repeat of "+f.main.String(), p.first().header, p.body, p.String())
		}
		if p.gated() {
			next = waiting{p, req}
		}
		if p.first().status == http.StatusServiceUnavailable && p.first().header.Get("Retry-After") == "" {
			answers = append(answers, "5xx 503 without Retry-After")
			continue
		}
		answers = append(answers, p.String())
	}
	return performed, answers, next, nil
}

// continueFailure says why the browser could not press the waiting page's
// Continue for a: the control's request differs (the fields it lost or
// changed, never a token's value), there is none, or the page says the
// request can't be repeated.
func continueFailure(a *action, err error) string {
	var diff *continueform.DiffError
	switch {
	case errors.As(err, &diff):
		s := diff.Error()
		if len(diff.Missing) > 0 {
			s += ". If a middleware reads the form before the Gate (a CSRF library's r.PostFormValue, a logger's r.ParseForm), the Gate must repeat the form it parsed, not the spent body"
		}
		return s
	case errors.Is(err, continueform.ErrNotRepeatable):
		return fmt.Sprintf("the waiting page of %s %s offers no Continue: %v", a.method, a.url, err)
	case errors.Is(err, continueform.ErrNoContinue):
		return fmt.Sprintf("the waiting page of %s %s has no control that makes the same request again (#opsgate-continue, or a form or link with the same method and URL)", a.method, a.url)
	}
	return err.Error()
}

// --- §2 unjoined browsers ---

func (f *flow) unjoined(ctx context.Context) {
	c := f.c
	k := c.begin("unjoined browsers: a browser not joined to a Session never gets an operation", "W07")
	defer k.end()
	target := f.secondary
	if target == nil {
		// An unjoined browser's request goes to the site's own flow and
		// may perform the action; the main one is performed already.
		target = f.main
		k.note("only one gated action was found; the unjoined browser repeats it after it was performed")
	}
	b := c.newBrowser()
	p := b.do(ctx, target.request("", ""))
	k.check(len(p.opHeader()) == 0, "W07: a browser joined to no Session got Poppy-Operation for %s", target)
	p2 := c.newBrowser().do(ctx, target.request("", "application/json"))
	k.check(len(p2.opHeader()) == 0, "W07: a script of a browser joined to no Session got Poppy-Operation")
}

// --- signed in (§3, §6 declines) ---

func (f *flow) signedIn(ctx context.Context) {
	c := f.c
	acc := c.begin("signed in: an account's operation, and the sign-in challenge for a signed-out Session of the same agent and User", "W43", "W44", "W54", "W72", "W73")
	dec := c.begin("signed in: a declined approval performs nothing and is not recorded", "W80", "W123", "W124", "W125", "W126", "W127", "W128", "W131", "W133", "W134")
	defer func() { acc.end(); dec.end() }()
	if c.cfg.TokenURL == "" {
		acc.skip("no token URL: signed-in Sessions are not checked")
		dec.skip("no token URL: signed-in Sessions are not checked")
		return
	}
	s := c.a.session(true)
	b := c.newBrowser()
	if err := b.join(ctx, s, joinOpts{signedIn: true, declare: true}); !acc.check(err == nil, "W54: the signed-in join: %v", err) {
		dec.skip("no signed-in join")
		return
	}
	var cands []*action
	if c.cfg.Action != "" {
		cands = []*action{f.main}
	} else {
		cands = b.crawl(ctx)
		// Actions gated only for a signed-in browser first: they are the
		// account's own (and so the likeliest to be declined).
		slices.SortStableFunc(cands, func(x, y *action) int {
			return boolRank(slices.Contains(f.gatedOut, x.url)) - boolRank(slices.Contains(f.gatedOut, y.url))
		})
	}
	var act *action
	var p page
	var w waiting
	for _, a := range cands {
		if a.url == f.main.url && f.performed > 0 && a.fields.Encode() == f.main.fields.Encode() {
			continue
		}
		req := a.request("", "")
		if p = b.do(ctx, req); p.gated() {
			act, w = a, waiting{p, req}
			break
		}
	}
	if act == nil {
		acc.skip("no action answered a signed-in joined browser with 403 and Poppy-Operation")
		dec.skip("no signed-in action")
		return
	}
	acc.note("signed-in action: %s", act)
	sid, ref, err := headers.ParseOperation(p.opHeader())
	if !acc.check(err == nil && sid == s.sid, "W54: Poppy-Operation %q, want the signed-in Session's sid %s", p.opHeader(), s.sid) {
		return
	}
	a := f.lookup(ctx, s, ref)
	op, ok := a.operation()
	if !acc.check(a.status == http.StatusForbidden && ok, "W72: the signed-in lookup answered %s, want 403 approval_required with the operation", a) {
		return
	}
	out := f.lookup(ctx, c.a.session(false), ref)
	_, has := out.body["operation"]
	acc.check(out.status == http.StatusUnauthorized && out.header.Get("WWW-Authenticate") != "" && !has,
		"W44 W73: a signed-out Session of the same agent and User answered %s, want 401 with the sign-in challenge", out)
	acc.check(!strings.Contains(out.header.Get("WWW-Authenticate"), "Poppy-Session"), "W44: the challenge is %q, want one for the account (not invalid_session)", out.header.Get("WWW-Authenticate"))
	other := f.lookup(ctx, c.a.otherUser(), ref)
	acc.check(other.status == http.StatusBadRequest, "W43 W45: another User's signed-out lookup answered %s, want 400", other)

	// An agent approval, with an input_type the site must ignore (W80).
	ap := approval(op.ID, op.Revision, "agent", fmt.Sprintf("approved_at=%d", time.Now().Unix()), `input_type="tap"`)
	d := c.endpoint(ctx, s, post{ref: ref, approval: ap})
	switch {
	case d.status == http.StatusForbidden && d.errorCode() == "approval_declined":
		dec.check(d.str("operation_id") == op.ID && d.str("revision") == op.Revision, "W127: the decline names %q %q, want the approval's %s %s", d.str("operation_id"), d.str("revision"), op.ID, op.Revision)
		_, has := d.body["operation"]
		dec.check(!has, "W126: the decline returns an operation")
		for _, m := range []string{"code", "reason_code"} {
			_, has := d.body[m]
			dec.check(!has, "W131: the decline has a reason code (%s)", m)
		}
		if r, ok := d.body["reason"]; ok {
			var s string
			dec.check(json.Unmarshal(r, &s) == nil && len(s) < 500, "W128: reason is not a short string: %s", r)
		}
		if alt, ok := d.body["alternative"]; ok {
			var a struct {
				References []struct{ Type, URL string } `json:"references"`
			}
			dec.check(json.Unmarshal(alt, &a) == nil, "W129: alternative is not {instructions, references[]}: %s", alt)
		}
		l := f.lookup(ctx, s, ref)
		_, has = l.operation()
		dec.check(l.status == http.StatusForbidden && has, "W134: after the decline the lookup answered %s, want 403 approval_required: the decline was recorded", l)
		req, err := continueOf(w)
		if !dec.check(err == nil, "W62: the signed-in waiting page's Continue: %s", continueFailureOrNil(act, err)) {
			return
		}
		again := b.do(ctx, req)
		dec.check(!again.performedLike(), "W125 W134: the browser's Continue after a decline was performed: %s", again)
		dec.check(again.gated(), "W134: the browser's Continue after a decline answered %s, want 403 with a new ref", again)
	case d.status == http.StatusNoContent:
		dec.skip("the site accepted an agent approval of %s (declining is the site's choice, W123)", act)
		// Use the approval up, so that it doesn't linger: the account's
		// operation is performed (W54).
		req, err := continueOf(w)
		if !acc.check(err == nil, "W62: the signed-in waiting page's Continue: %s", continueFailureOrNil(act, err)) {
			return
		}
		again := b.do(ctx, req)
		acc.check(again.performedLike(), "W54 W94: the signed-in browser's Continue after the 204 answered %s, want the action's own answer", again)
	default:
		dec.fail("W80: an agent approval (with input_type, which the site must ignore) answered %s, want 204 or 403 approval_declined", d)
	}
}

func continueFailureOrNil(a *action, err error) string {
	if err == nil {
		return ""
	}
	return continueFailure(a, err)
}

// --- no 5xx ---

func (c *checker) no5xx() {
	k := c.begin("no 5xx: every answer of the site is below 500, except 503 with Retry-After", "W142", "W143")
	defer k.end()
	c.mu.Lock()
	defer c.mu.Unlock()
	bad := map[string]int{}
	var order []string
	busy := map[string]int{}
	for _, r := range c.responses {
		if r.status == http.StatusServiceUnavailable && r.retryAfter {
			busy[r.what]++ // allowed (§7), and retried; noted
			continue
		}
		if r.status < 500 {
			continue
		}
		key := fmt.Sprintf("%d to %s", r.status, r.what)
		if bad[key] == 0 {
			order = append(order, key)
		}
		bad[key]++
	}
	for _, key := range order {
		k.fail("%s (%d time(s))", key, bad[key])
	}
	k.check(len(c.responses) > 0, "no answers were seen")
	k.note("%d answers seen", len(c.responses))
	for what, n := range busy {
		k.note("503 with Retry-After to %s (%d time(s))", what, n)
	}
}
