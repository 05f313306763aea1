package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/html"

	"github.com/opsgate/opsgate/internal/continueform"
)

// htmx and Turbo (issue 35): the checker crawls the requests those
// frameworks send (elements with hx-post, hx-put, hx-patch, hx-delete;
// forms on a page that loads Turbo), sends them as the framework does
// (HX-Request, the element's hx-headers; Turbo's Accept, its
// X-CSRF-Token from the csrf-token <meta>, Turbo-Frame), and repeats them
// as the page's script does (the kit's card.js): the same request again,
// with the same headers. The waiting card's own Continue must make that
// request (W62).

// The frameworks an action is sent by.
const (
	viaHTMX  = "htmx"
	viaTurbo = "turbo"
)

// turboAccept is what Turbo accepts for a form's submission.
const turboAccept = "text/vnd.turbo-stream.html, text/html, application/xhtml+xml"

// htmxVerbs are htmx's request attributes, in the order htmx reads them.
var htmxVerbs = []string{"get", "post", "put", "patch", "delete"}

// hxAttr returns the value of htmx attribute name on n (hx-… or
// data-hx-…).
func hxAttr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name || a.Key == "data-"+name {
			return a.Val, true
		}
	}
	return "", false
}

// hxVerb returns the method and URL of an element htmx sends a request
// for (hx-post="/x"), or "" for none.
func hxVerb(n *html.Node) (method, target string) {
	for _, v := range htmxVerbs {
		if t, ok := hxAttr(n, "hx-"+v); ok {
			return strings.ToUpper(v), t
		}
	}
	return "", ""
}

// hxHeaders is what htmx adds from hx-headers: the element's own, and
// its ancestors' (htmx 2 inherits hx-headers; htmx 4 hx-headers:inherited),
// the nearest winning. A value that is not a JSON object (a js: value) is
// left out.
func hxHeaders(n *html.Node) http.Header {
	h := http.Header{}
	for e := n; e != nil; e = e.Parent {
		if e.Type != html.ElementNode {
			continue
		}
		for _, name := range []string{"hx-headers", "hx-headers:inherited"} {
			v, ok := hxAttr(e, name)
			if !ok {
				continue
			}
			var m map[string]any
			if json.Unmarshal([]byte(v), &m) != nil {
				continue
			}
			for k, val := range m {
				if s, ok := val.(string); ok && ValidHeaderName(k) && h.Get(k) == "" && !strings.HasPrefix(strings.ToLower(k), "poppy-") {
					h.Set(k, s)
				}
			}
		}
	}
	return h
}

// turboPage reports whether a page loads Turbo: a script whose URL names
// turbo, or a <turbo-frame>.
func turboPage(doc *html.Node) bool {
	return findNode(doc, func(n *html.Node) bool {
		if n.Data == "turbo-frame" {
			return true
		}
		src, _ := hxAttr(n, "src")
		return n.Data == "script" && strings.Contains(strings.ToLower(src), "turbo")
	}) != nil
}

func findNode(n *html.Node, ok func(*html.Node) bool) *html.Node {
	if n.Type == html.ElementNode && ok(n) {
		return n
	}
	for k := n.FirstChild; k != nil; k = k.NextSibling {
		if f := findNode(k, ok); f != nil {
			return f
		}
	}
	return nil
}

// metaContent is the content of <meta name=name>, or "".
func metaContent(doc *html.Node, name string) string {
	m := findNode(doc, func(n *html.Node) bool {
		v, _ := hxAttr(n, "name")
		return n.Data == "meta" && v == name
	})
	if m == nil {
		return ""
	}
	v, _ := hxAttr(m, "content")
	return v
}

// turboOff reports whether Turbo leaves form n to the browser
// (data-turbo="false" on it or an ancestor).
func turboOff(n *html.Node) bool {
	for e := n; e != nil; e = e.Parent {
		if v, ok := hxAttr(e, "data-turbo"); ok {
			return v == "false"
		}
	}
	return false
}

// turboFrame is the frame Turbo sends form n's request for: its
// data-turbo-frame, else its nearest <turbo-frame>; "" for the page.
func turboFrame(n *html.Node) string {
	if v, ok := hxAttr(n, "data-turbo-frame"); ok {
		if v == "_top" {
			return ""
		}
		return v
	}
	for e := n.Parent; e != nil; e = e.Parent {
		if e.Type == html.ElementNode && e.Data == "turbo-frame" {
			id, _ := hxAttr(e, "id")
			return id
		}
	}
	return ""
}

// frameworkActions finds, on a parsed page, the requests htmx and Turbo
// send: htmx elements that are not forms (a form with hx-post is one
// already, from parseHTML), whose values are their form's (for a request
// with a body) and their own name and hx-vals; and marks the forms htmx
// or Turbo sends. forms maps each <form> to its action.
func frameworkActions(doc *html.Node, base string, forms map[*html.Node]*action) []*action {
	bu, _ := url.Parse(base)
	resolve := func(ref string) string {
		u, err := bu.Parse(strings.TrimSpace(ref))
		if err != nil {
			return ""
		}
		return u.String()
	}
	turbo := turboPage(doc)
	token := metaContent(doc, "csrf-token")
	for n, f := range forms {
		if m, t := hxVerb(n); m != "" {
			f.method, f.url, f.framework = m, resolve(t), viaHTMX
			f.header = hxHeaders(n)
			continue
		}
		if turbo && f.method != http.MethodGet && !turboOff(n) {
			f.framework, f.frame = viaTurbo, turboFrame(n)
			if token != "" { // Turbo's own header (FormSubmission.prepareRequest)
				f.header = http.Header{"X-Csrf-Token": {token}}
			}
		}
	}
	var out []*action
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data != "form" {
			if m, t := hxVerb(n); m != "" {
				a := &action{method: m, url: resolve(t), page: base, fields: url.Values{}, framework: viaHTMX, header: hxHeaders(n)}
				if m != http.MethodGet && m != http.MethodDelete {
					for e := n.Parent; e != nil; e = e.Parent {
						if f := forms[e]; f != nil {
							for k, vs := range f.fields {
								a.fields[k] = slices.Clone(vs)
							}
							a.choice, a.others = f.choice, f.others
							break
						}
					}
				}
				if name, _ := hxAttr(n, "name"); name != "" {
					v, _ := hxAttr(n, "value")
					a.fields.Set(name, v)
				}
				if v, ok := hxAttr(n, "hx-vals"); ok {
					var m map[string]any
					if json.Unmarshal([]byte(v), &m) == nil {
						for k, val := range m {
							a.fields.Set(k, fmt.Sprint(val))
						}
					}
				}
				out = append(out, a)
			}
		}
		for k := n.FirstChild; k != nil; k = k.NextSibling {
			walk(k)
		}
	}
	walk(doc)
	return out
}

// frameworkRequest adds to r what the action's framework sends: htmx its
// HX-Request (and a GET's or DELETE's values in the URL, as htmx sends
// them), Turbo its Accept and Turbo-Frame. A request that accepts JSON is
// a page script's own (the W66 case): no framework.
func (a *action) frameworkRequest(r request) request {
	if a.framework == "" || r.accept == "application/json" {
		return r
	}
	if r.header == nil {
		r.header = http.Header{}
	}
	switch a.framework {
	case viaHTMX:
		r.header.Set("HX-Request", "true")
		if a.page != "" {
			r.header.Set("HX-Current-URL", a.page)
		}
		if r.accept == "" {
			r.accept = "text/html" // htmx 4's; htmx 2 sends XHR's */*
		}
		if r.method == http.MethodGet || r.method == http.MethodDelete {
			if u, err := url.Parse(r.url); err == nil && len(r.body) > 0 {
				q := u.Query()
				f, _ := url.ParseQuery(string(r.body))
				for k, vs := range f {
					q[k] = append(q[k], vs...)
				}
				u.RawQuery = q.Encode()
				r.url = u.String()
			}
			r.body, r.ctype = nil, ""
		}
	case viaTurbo:
		r.accept = turboAccept
		if a.frame != "" {
			r.header.Set("Turbo-Frame", a.frame)
		}
	}
	return r
}

// scriptRepeats reports whether the page's script repeats req, not a
// form's own submission: a JSON request (opsgate.fetch), an htmx or Turbo
// request (the kit's card.js, or the framework), or one that carried a
// CSRF token in a header, which a form can't send (W62).
func scriptRepeats(req request) bool {
	if req.ctype == "application/json" || req.header.Get("HX-Request") == "true" || strings.Contains(req.accept, "turbo-stream") {
		return true
	}
	for k := range req.header {
		l := strings.ToLower(k)
		if strings.Contains(l, "csrf") || strings.Contains(l, "xsrf") || l == "requestverificationtoken" || l == "x-wp-nonce" {
			return true
		}
	}
	return false
}

// cardRepeats checks the waiting card a framework's request got (the
// kit's: a .opsgate-card with a data-opsgate-continue control) against
// the request: its Continue must make the same request (W62). A page
// with no such card passes: its script repeats the request.
func cardRepeats(w waiting) error {
	doc, err := html.Parse(bytes.NewReader(w.p.body))
	if err != nil {
		return nil
	}
	ctl := findNode(doc, func(n *html.Node) bool { _, ok := hxAttr(n, "data-opsgate-continue"); return ok })
	if ctl == nil {
		if findNode(doc, func(n *html.Node) bool { _, ok := hxAttr(n, "data-opsgate-via"); return ok }) != nil &&
			!bytes.Contains(bytes.ToLower(w.p.body), []byte("be repeated")) {
			return continueform.ErrNoContinue
		}
		return nil
	}
	base, err := url.Parse(w.p.url)
	if err != nil {
		return nil
	}
	c := &continueform.Control{}
	resolve := func(ref string) string {
		u, err := base.Parse(strings.TrimSpace(ref))
		if err != nil {
			return ref
		}
		u.Fragment = ""
		return u.String()
	}
	if m, t := hxVerb(ctl); m != "" {
		c.Method, c.URL = m, resolve(t)
	} else if href, ok := hxAttr(ctl, "href"); ok && ctl.Data == "a" {
		c.Method, c.URL, c.Link = http.MethodGet, resolve(href), true
	} else {
		m, _ := hxAttr(ctl, "method")
		act, _ := hxAttr(ctl, "action")
		c.Method, c.URL = strings.ToUpper(m), resolve(act)
	}
	c.Enctype = "application/x-www-form-urlencoded"
	if enc, _ := hxAttr(ctl, "enctype"); enc == "multipart/form-data" {
		c.Enctype = enc
	}
	if enc, _ := hxAttr(ctl, "hx-encoding"); enc == "multipart/form-data" {
		c.Enctype = enc
	}
	var inputs func(n *html.Node)
	inputs = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "input" {
			name, _ := hxAttr(n, "name")
			v, _ := hxAttr(n, "value")
			if name != "" {
				c.Fields = append(c.Fields, continueform.Field{Name: name, Value: v})
			}
		}
		for k := n.FirstChild; k != nil; k = k.NextSibling {
			inputs(k)
		}
	}
	inputs(ctl)
	method, ctype, body := w.req.method, w.req.ctype, w.req.body
	if method == http.MethodPut || method == http.MethodPatch || method == http.MethodPost {
		if mt, _, _ := mime.ParseMediaType(ctype); mt == "" && len(body) == 0 {
			ctype = c.Enctype
		}
	}
	return c.Repeats(method, w.req.url, ctype, body)
}

// --- the site's own cookies and login ---

// signIn signs a browser in through the site's login form (Config.Login:
// "/path field=value&…") and returns the cookies it got. The form is the
// first POST form on the page whose fields include every field named;
// its other fields (a CSRF token) are kept. No value is ever printed.
func (c *checker) signIn(ctx context.Context) ([]*http.Cookie, error) {
	path, values, _ := strings.Cut(strings.TrimSpace(c.cfg.Login), " ")
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("%w: Login %q: write '/path field=value&field=value'", ErrConfig, path)
	}
	want, err := url.ParseQuery(strings.TrimSpace(values))
	if err != nil || len(want) == 0 {
		return nil, fmt.Errorf("%w: Login: the fields after the path: field=value&field=value", ErrConfig)
	}
	b := c.newBrowser()
	p := b.get(ctx, c.origin+path)
	if p.err != nil || p.status != http.StatusOK {
		return nil, fmt.Errorf("the login page %s answered %s", path, p)
	}
	_, forms := parseHTML(p.url, p.body)
	var form *action
	for _, f := range forms {
		has := f.method == http.MethodPost
		for k := range want {
			has = has && f.fields.Has(k)
		}
		if has {
			form = f
			break
		}
	}
	if form == nil {
		names := make([]string, 0, len(want))
		for k := range want {
			names = append(names, k)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("the login page %s has no POST form with the fields %s", path, strings.Join(names, ", "))
	}
	for k, vs := range want {
		form.fields[k] = vs
	}
	res := b.do(ctx, request{method: form.method, url: form.url, body: []byte(form.fields.Encode()), ctype: "application/x-www-form-urlencoded"})
	if res.err != nil || res.status >= 400 {
		return nil, fmt.Errorf("the login form at %s answered %s", form.url, res)
	}
	u, _ := url.Parse(c.origin + "/")
	cookies := b.jar.Cookies(u)
	if len(cookies) == 0 {
		return nil, errors.New("the login set no cookie")
	}
	c.logf("signed in through %s: %d cookie(s), values not shown", path, len(cookies))
	return cookies, nil
}
