package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/html"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/continueform"
)

// browser is the Personal Agent's browser without Chromium: an HTTP client
// with a cookie jar that loads pages, follows redirects and submits forms
// as a browser does. It runs no scripts.
type browser struct {
	c    *checker
	jar  *cookiejar.Jar
	sess *session // the Session it is joined to; nil when not joined
}

func (c *checker) newBrowser() *browser {
	jar, _ := cookiejar.New(nil)
	if cs := c.siteCookies(); len(cs) > 0 { // the site's own login (Config.Cookies, Config.Login)
		u, _ := url.Parse(c.origin + "/")
		jar.SetCookies(u, cs)
	}
	return &browser{c: c, jar: jar}
}

// hop is one response in a chain of redirects.
type hop struct {
	status int
	header http.Header
}

// page is what a browser got for one request, after following redirects.
type page struct {
	hops   []hop
	status int // the last response's
	url    string
	body   []byte
	err    error
}

// first is the response to the request itself (before any redirect).
func (p page) first() hop {
	if len(p.hops) == 0 {
		return hop{header: http.Header{}}
	}
	return p.hops[0]
}

// opHeader returns the Poppy-Operation header of the first response.
func (p page) opHeader() []string { return p.first().header.Values("Poppy-Operation") }

// gated reports whether the request got 403 with a Poppy-Operation header.
func (p page) gated() bool { return p.first().status == http.StatusForbidden && len(p.opHeader()) > 0 }

// performedLike reports whether the answer looks like the action's normal
// answer: no Poppy-Operation anywhere and a final status below 400.
func (p page) performedLike() bool {
	if p.err != nil || len(p.hops) == 0 {
		return false
	}
	for _, h := range p.hops {
		if len(h.header.Values("Poppy-Operation")) > 0 {
			return false
		}
	}
	return p.status < 400
}

func (p page) String() string {
	if p.err != nil {
		return "no answer: " + p.err.Error()
	}
	var s []string
	for _, h := range p.hops {
		s = append(s, fmt.Sprint(h.status))
	}
	out := strings.Join(s, "→")
	if p.gated() {
		out += " with Poppy-Operation"
	}
	return out
}

// request is a request a browser makes: a form submission, a page
// script's JSON request, or a page load.
type request struct {
	method, url string
	body        []byte
	ctype       string // Content-Type of body
	accept      string
	header      http.Header // more header fields, such as a page script would add
	// once: no retry of a 503 with Retry-After (the concurrent repeats,
	// where a busy 503 is an answer in itself).
	once bool
}

// do makes the request and follows redirects (a form POST answered 303 is
// followed by a GET, as browsers do). A 503 with Retry-After is retried a
// few times, as the kit's waiting page and an agent would (§7).
func (b *browser) do(ctx context.Context, r request) page {
	var p page
	for attempt := range 4 {
		if attempt > 0 && !retryLater(ctx, p.first().header) {
			break
		}
		p = b.doOnce(ctx, r)
		if r.once || p.err != nil || p.first().status != http.StatusServiceUnavailable || p.first().header.Get("Retry-After") == "" {
			break
		}
	}
	return p
}

func (b *browser) doOnce(ctx context.Context, r request) page {
	var p page
	client := b.c.client()
	client.Jar = b.jar
	method, target, body, ctype := r.method, r.url, r.body, r.ctype
	for range 6 {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, target, rd)
		if err != nil {
			p.err = err
			return p
		}
		if ctype != "" && body != nil {
			req.Header.Set("Content-Type", ctype)
		}
		accept := r.accept
		if accept == "" {
			accept = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"
		}
		req.Header.Set("Accept", accept)
		for k, v := range r.header {
			req.Header[k] = v
		}
		if method != http.MethodGet && method != http.MethodHead {
			// As a browser on the site's own page sends them (CSRF
			// protections such as net/http's CrossOriginProtection read
			// these).
			req.Header.Set("Origin", b.c.origin)
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		res, err := client.Do(req)
		if err != nil {
			p.err = err
			return p
		}
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 2<<20))
		res.Body.Close()
		p.hops = append(p.hops, hop{status: res.StatusCode, header: res.Header})
		p.status, p.url, p.body = res.StatusCode, target, raw
		loc := res.Header.Get("Location")
		if res.StatusCode < 300 || res.StatusCode > 399 || loc == "" {
			return p
		}
		next, err := req.URL.Parse(loc)
		if err != nil {
			return p
		}
		target = next.String()
		if res.StatusCode != http.StatusTemporaryRedirect && res.StatusCode != http.StatusPermanentRedirect {
			method, body, ctype = http.MethodGet, nil, ""
		}
	}
	return p
}

func (b *browser) get(ctx context.Context, u string) page {
	return b.do(ctx, request{method: http.MethodGet, url: u})
}

// joinOpts say how to join a browser to a Session.
type joinOpts struct {
	signedIn   bool
	extensions string // the join's declaration; see declare
	declare    bool   // declare `"operations";v="3"` (the default for the checker's agent)
}

// join joins the browser to a new Session of a's User: the agent signs a
// join assertion and the browser POSTs it to the site's
// browser_session_endpoint (the kit's join), which answers 303 to
// return_to with the join cookie.
func (b *browser) join(ctx context.Context, s *session, o joinOpts) error {
	c := b.c
	if c.disc.join == "" {
		return fmt.Errorf("poppy.json lists no web.browser_session_endpoint")
	}
	token := ""
	if s.signedIn {
		var err error
		if token, err = c.accessToken(ctx, s.agent); err != nil {
			return err
		}
	}
	ext := o.extensions
	if o.declare {
		ext = `"operations";v="3"`
	}
	assertion, err := s.agent.dlg.BrowserAssertion(agentside.BrowserClaims{
		SessionClaims: agentside.SessionClaims{Audience: c.disc.join, SID: s.sid, User: s.user, AccessToken: token},
		ReturnTo:      c.origin + c.cfg.StartPath,
		Extensions:    ext,
	})
	if err != nil {
		return err
	}
	form := url.Values{"assertion": {assertion}}
	if token != "" {
		form.Set("access_token", token)
	}
	// The join form is posted from the agent's own page, so it carries no
	// same-origin headers: a plain POST.
	client := c.client()
	client.Jar = b.jar
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.disc.join, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("the join: %w", err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 3 && res.StatusCode != http.StatusOK {
		return fmt.Errorf("the join was refused: %s", res.Status)
	}
	b.sess = s
	return nil
}

// --- Forms (the crawl for gated actions) ---

// action is one request the checker can make as a browser: a form of the
// site, or the one named in Config.Action.
type action struct {
	method, url string
	page        string // the page the form is on; "" for Config.Action
	fields      url.Values
	json        []byte // a JSON body instead of fields
	// choice is a field with other values the form offers (a select or
	// radio group), for asking for other terms; "" when there is none.
	choice string
	others []string
	// header goes with each request of the action (Config.Header, for
	// Config.Action): what a page script adds, such as a CSRF header; for
	// an htmx element its hx-headers, for a Turbo form Turbo's
	// X-CSRF-Token.
	header http.Header
	// framework is the front-end framework that sends the request
	// ("htmx", "turbo"), or "" for a form's own submission; frame is the
	// Turbo frame it is sent for.
	framework, frame string
}

// String is the action in a line. The value of a field named like a CSRF
// token is never shown.
func (a *action) String() string {
	s := a.method + " " + a.url
	if a.json != nil {
		s += " " + string(a.json)
	} else {
		s += " " + redactedFields(a.fields)
	}
	if a.framework != "" {
		s += " (" + a.framework + ")"
	}
	return s
}

// redactedFields is fields encoded, each token-like field's value
// replaced by "…".
func redactedFields(fields url.Values) string {
	f := url.Values{}
	for k, vs := range fields {
		f[k] = slices.Clone(vs)
		if continueform.LooksLikeToken(k) {
			for i := range f[k] {
				f[k][i] = "…"
			}
		}
	}
	return strings.ReplaceAll(f.Encode(), url.QueryEscape("…"), "…")
}

// request returns the request for the action, with the choice set to v
// ("" keeps the form's own value). A JSON body is a page script's
// request: it accepts JSON unless accept says otherwise.
func (a *action) request(v, accept string) request {
	h := a.header.Clone()
	if a.json != nil {
		if accept == "" {
			accept = "application/json"
		}
		return a.frameworkRequest(request{method: a.method, url: a.url, body: a.json, ctype: "application/json", accept: accept, header: h})
	}
	f := url.Values{}
	for k, vs := range a.fields {
		f[k] = slices.Clone(vs)
	}
	if v != "" && a.choice != "" {
		f.Set(a.choice, v)
	}
	return a.frameworkRequest(request{method: a.method, url: a.url, body: []byte(f.Encode()), ctype: "application/x-www-form-urlencoded", accept: accept, header: h})
}

// --- the waiting page's Continue ---

// waiting is a gated answer and the request that got it.
type waiting struct {
	p   page
	req request
}

// script reports whether the page's script repeats the request: a JSON
// request or a JSON answer (opsgate.fetch), an htmx or Turbo request (the
// kit's card.js, the framework), or a request whose CSRF token was in a
// header a form can't send. The checker then sends it again, as the
// script does.
func (w waiting) script() bool {
	mt, _, _ := mime.ParseMediaType(w.p.first().header.Get("Content-Type"))
	return scriptRepeats(w.req) || mt == "application/json"
}

// continueOf is the request the browser makes once the agent approved:
// for a page, pressing its Continue control, which must make the request
// again (W62); for a script's JSON 403, the same request again. The
// control is the element with id opsgate-continue (the kit's), else a
// form or a link on the page making the same method and URL. It fails
// when there is no such control, the page says the request can't be
// repeated, or the control's fields differ from the request's
// (*continueform.DiffError, which never shows a token's value).
func continueOf(w waiting) (request, error) {
	if w.script() {
		if err := cardRepeats(w); err != nil {
			return request{}, err
		}
		return w.req, nil
	}
	c, err := continueform.Parse(w.p.url, w.p.body)
	if errors.Is(err, continueform.ErrNoContinue) {
		if own := sameRequestControl(w); own != nil {
			c, err = own, nil
		}
	}
	if err != nil {
		return request{}, err
	}
	if err := c.Repeats(w.req.method, w.req.url, w.req.ctype, w.req.body); err != nil {
		return request{}, err
	}
	ctype, body := c.Body()
	return request{method: c.Method, url: c.URL, body: body, ctype: ctype, header: http.Header{"Referer": {w.p.url}}}, nil
}

// sameRequestControl is a site's own Continue without the kit's id: a
// form on the page posting to the request's URL with its method, or, for
// a GET, a link to it; nil when there is none.
func sameRequestControl(w waiting) *continueform.Control {
	links, forms := parseHTML(w.p.url, w.p.body)
	for _, f := range forms {
		if f.method != w.req.method || f.url != w.req.url {
			continue
		}
		c := &continueform.Control{Method: f.method, URL: f.url}
		if f.method == http.MethodPost {
			c.Enctype = "application/x-www-form-urlencoded"
			for _, k := range slices.Sorted(maps.Keys(f.fields)) {
				for _, v := range f.fields[k] {
					c.Fields = append(c.Fields, continueform.Field{Name: k, Value: v})
				}
			}
		}
		return c
	}
	if w.req.method == http.MethodGet && slices.Contains(links, w.req.url) {
		return &continueform.Control{Method: http.MethodGet, URL: w.req.url, Link: true}
	}
	return nil
}

// parseAction reads Config.Action: "METHOD /path [body]".
func parseAction(s string) (*action, error) {
	parts := strings.SplitN(strings.TrimSpace(s), " ", 3)
	if len(parts) < 2 || !strings.HasPrefix(parts[1], "/") {
		return nil, fmt.Errorf("%w: Action %q: write METHOD /path [body], such as `POST /orders/ord_1/exchange size=L`", ErrConfig, s)
	}
	a := &action{method: strings.ToUpper(parts[0]), url: parts[1], fields: url.Values{}}
	if len(parts) == 3 {
		body := strings.TrimSpace(parts[2])
		if strings.HasPrefix(body, "{") {
			if !json.Valid([]byte(body)) {
				return nil, fmt.Errorf("%w: Action's JSON body is not valid JSON", ErrConfig)
			}
			a.json = []byte(body)
		} else {
			f, err := url.ParseQuery(body)
			if err != nil {
				return nil, fmt.Errorf("%w: Action's form body: %v", ErrConfig, err)
			}
			a.fields = f
		}
	}
	return a, nil
}

// skipForm: forms the crawl never submits, because submitting them would
// change the browser's login or the site's data outside any action.
var skipForm = []string{"signin", "sign-in", "signout", "sign-out", "login", "logout", "log-in", "log-out", "signup", "register", "reset", "search", "join", "session", "leave", "unbind"}

// crawl loads pages of the site from StartPath (same origin, breadth
// first, at most MaxPages) and returns the POST forms it finds.
func (b *browser) crawl(ctx context.Context) []*action {
	forms, _ := b.crawlAll(ctx)
	return forms
}

// crawlAll is crawl that also returns the forms it leaves alone (skipForm,
// the join), which it never submits. It only loads pages.
func (b *browser) crawlAll(ctx context.Context) (forms, skipped []*action) {
	c := b.c
	start := c.origin + c.cfg.StartPath
	queue, visited := []string{start}, map[string]bool{start: true}
	have := map[string]bool{}
	for len(queue) > 0 && len(visited) <= c.cfg.MaxPages {
		u := queue[0]
		queue = queue[1:]
		p := b.get(ctx, u)
		if p.err != nil || p.status != http.StatusOK || !strings.Contains(p.first().header.Get("Content-Type"), "html") {
			continue
		}
		links, found := parseHTML(p.url, p.body)
		for _, f := range found {
			fu, err := url.Parse(f.url)
			if err != nil || fu.Scheme+"://"+fu.Host != c.origin || !sendsEffect(f) {
				continue
			}
			low := strings.ToLower(fu.Path)
			skip := slices.ContainsFunc(skipForm, func(w string) bool { return strings.Contains(low, w) }) || fu.String() == c.disc.join
			key := f.method + " " + f.url + " " + f.fields.Encode()
			if skip {
				key = "skip " + f.method + " " + f.url
			}
			if have[key] {
				continue
			}
			have[key] = true
			if skip {
				skipped = append(skipped, f)
			} else {
				forms = append(forms, f)
			}
		}
		for _, l := range links {
			lu, err := url.Parse(l)
			if err != nil || lu.Scheme+"://"+lu.Host != c.origin {
				continue
			}
			lu.Fragment = ""
			if ext := strings.ToLower(lu.Path); strings.HasSuffix(ext, ".css") || strings.HasSuffix(ext, ".js") || strings.HasSuffix(ext, ".png") || strings.HasSuffix(ext, ".svg") {
				continue
			}
			if !visited[lu.String()] && len(visited) < c.cfg.MaxPages {
				visited[lu.String()] = true
				queue = append(queue, lu.String())
			}
		}
	}
	return forms, skipped
}

// sendsEffect reports whether the crawl takes f for an action that may
// be gated: a POST form, or a PUT, PATCH or DELETE that htmx sends.
func sendsEffect(f *action) bool {
	switch f.method {
	case http.MethodPost:
		return true
	case http.MethodPut, http.MethodPatch, http.MethodDelete:
		return f.framework == viaHTMX
	}
	return false
}

// parseHTML returns a page's links and its forms, and the requests htmx
// and Turbo send from it (frameworkActions).
func parseHTML(base string, body []byte) (links []string, forms []*action) {
	doc, err := html.Parse(bytes.NewReader(body))
	if err != nil {
		return nil, nil
	}
	bu, _ := url.Parse(base)
	attr := func(n *html.Node, k string) (string, bool) {
		for _, a := range n.Attr {
			if a.Key == k {
				return a.Val, true
			}
		}
		return "", false
	}
	resolve := func(ref string) string {
		u, err := bu.Parse(ref)
		if err != nil {
			return ""
		}
		return u.String()
	}
	formOf := map[*html.Node]*action{}
	var walk func(n *html.Node, f *action, choices map[string][]string)
	walk = func(n *html.Node, f *action, choices map[string][]string) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "a":
				if h, ok := attr(n, "href"); ok {
					links = append(links, resolve(h))
				}
			case "form":
				method, _ := attr(n, "method")
				act, _ := attr(n, "action")
				nf := &action{method: strings.ToUpper(method), url: resolve(act), page: base, fields: url.Values{}}
				formOf[n] = nf
				if nf.method == "" {
					nf.method = http.MethodGet
				}
				ch := map[string][]string{}
				for k := n.FirstChild; k != nil; k = k.NextSibling {
					walk(k, nf, ch)
				}
				for name, vs := range ch {
					if len(vs) > 1 && nf.choice == "" {
						nf.choice = name
						for _, v := range vs {
							if v != nf.fields.Get(name) {
								nf.others = append(nf.others, v)
							}
						}
					}
				}
				forms = append(forms, nf)
				return
			case "input":
				if f == nil {
					break
				}
				name, _ := attr(n, "name")
				typ, _ := attr(n, "type")
				val, _ := attr(n, "value")
				_, checked := attr(n, "checked")
				switch strings.ToLower(typ) {
				case "submit", "button", "image", "reset", "file":
				case "radio":
					if name != "" {
						choices[name] = append(choices[name], val)
						if checked || !f.fields.Has(name) {
							f.fields.Set(name, val)
						}
					}
				case "checkbox":
					if name != "" && checked {
						f.fields.Add(name, val)
					}
				default:
					if name != "" {
						f.fields.Add(name, val)
					}
				}
			case "select":
				if f == nil {
					break
				}
				name, _ := attr(n, "name")
				var vals []string
				selected := ""
				var opt func(*html.Node)
				opt = func(o *html.Node) {
					if o.Type == html.ElementNode && o.Data == "option" {
						if _, dis := attr(o, "disabled"); !dis {
							v, ok := attr(o, "value")
							if !ok && o.FirstChild != nil {
								v = strings.TrimSpace(o.FirstChild.Data)
							}
							vals = append(vals, v)
							if _, sel := attr(o, "selected"); sel && selected == "" {
								selected = v
							}
						}
					}
					for k := o.FirstChild; k != nil; k = k.NextSibling {
						opt(k)
					}
				}
				opt(n)
				if name != "" && len(vals) > 0 {
					if selected == "" {
						selected = vals[0]
					}
					f.fields.Set(name, selected)
					choices[name] = vals
				}
				return
			case "textarea":
				if f != nil {
					if name, _ := attr(n, "name"); name != "" {
						v := ""
						if n.FirstChild != nil {
							v = n.FirstChild.Data
						}
						f.fields.Add(name, v)
					}
				}
				return
			case "button":
				if f != nil {
					name, _ := attr(n, "name")
					typ, _ := attr(n, "type")
					if name != "" && (typ == "" || typ == "submit") && !f.fields.Has(name) {
						v, _ := attr(n, "value")
						f.fields.Set(name, v)
					}
				}
			}
		}
		for k := n.FirstChild; k != nil; k = k.NextSibling {
			walk(k, f, choices)
		}
	}
	walk(doc, nil, nil)
	forms = append(forms, frameworkActions(doc, base, formOf)...)
	return links, forms
}
