// Package continueform reads a waiting page's Continue control as a
// browser submits it (§4 W62), and checks that it makes the original
// request again. webkittest's Response.Continue and the conformance
// checker press Continue with it.
package continueform

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// A browser that pressed the waiting page's Continue (W62) sends what the
// page's control says, not what it sent the first time. Parse reads the
// control from the page as a browser does, and Repeats checks that it
// makes the request it repeats, so that a waiting page whose Continue lost
// the request's fields (a middleware read the body before the Gate) is
// caught.

// ID is the id of a waiting page's Continue control: a form or a link.
// The kit's waiting page and its auto-continue (waiting.js) use it.
const ID = "opsgate-continue"

// Errors of Parse, for errors.Is.
var (
	// ErrNoContinue: the waiting page has no Continue control (no element
	// with id ID).
	ErrNoContinue = errors.New("the waiting page has no Continue control")
	// ErrNotRepeatable: the waiting page says its request can't be
	// repeated from the page (a body with files, a script's request, …):
	// the person goes back and sends it again.
	ErrNotRepeatable = errors.New("the waiting page says the request can't be repeated")
)

// Field is one entry of a form submission: a name and its value.
type Field struct{ Name, Value string }

// Control is a waiting page's Continue control as a browser
// submits it.
type Control struct {
	// Method is GET (a link, or a form with method get) or POST.
	Method string
	// URL is where the browser goes: the link's href, or the form's
	// action (for a GET form, with the fields as its query), resolved
	// against the page's URL.
	URL string
	// Enctype is how a POST form encodes its fields:
	// application/x-www-form-urlencoded, multipart/form-data or
	// text/plain; "" for a GET.
	Enctype string
	// Fields are a POST form's entries in document order, as a browser
	// builds its entry list: enabled, named controls; checked checkboxes
	// and radio buttons; each select's selected options; the pressed
	// submit button, when it has a name; line breaks as CR LF. A file
	// input is left out (a page can't fill one in). nil for a GET.
	Fields []Field
	// Link reports whether the control is a link rather than a form.
	Link bool
}

// Parse reads the Continue control of the waiting page page,
// loaded from pageURL. It returns ErrNoContinue when there is none, and
// ErrNotRepeatable, with the page's own words, when the page says the
// request can't be repeated.
func Parse(pageURL string, page []byte) (*Control, error) {
	base, err := url.Parse(pageURL)
	if err != nil || !base.IsAbs() {
		return nil, fmt.Errorf("continueform: the page's URL %q is not absolute", pageURL)
	}
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		return nil, fmt.Errorf("continueform: the waiting page is not HTML: %w", err)
	}
	if b := find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Base && has(n, "href") }); b != nil {
		if u, err := base.Parse(attr(b, "href")); err == nil {
			base = u
		}
	}
	ctl := find(doc, func(n *html.Node) bool { return attr(n, "id") == ID })
	if ctl == nil {
		if msg := notRepeatable(doc); msg != "" {
			return nil, fmt.Errorf("%w: %q", ErrNotRepeatable, msg)
		}
		return nil, fmt.Errorf("%w (an element with id %q)", ErrNoContinue, ID)
	}
	resolve := func(ref string) (*url.URL, error) {
		u, err := base.Parse(strings.TrimSpace(ref))
		if err != nil {
			return nil, fmt.Errorf("continueform: the Continue control's URL %q: %w", ref, err)
		}
		u.Fragment, u.RawFragment = "", ""
		return u, nil
	}
	switch ctl.DataAtom {
	case atom.A, atom.Area:
		if !has(ctl, "href") {
			return nil, fmt.Errorf("%w: the Continue link has no href", ErrNoContinue)
		}
		u, err := resolve(attr(ctl, "href"))
		if err != nil {
			return nil, err
		}
		return &Control{Method: http.MethodGet, URL: u.String(), Link: true}, nil
	case atom.Form:
	default:
		return nil, fmt.Errorf("%w: #%s is a <%s>, not a form or a link", ErrNoContinue, ID, ctl.Data)
	}

	submitter := firstSubmitter(doc, ctl)
	method, action, enctype := attr(ctl, "method"), attr(ctl, "action"), attr(ctl, "enctype")
	if submitter != nil { // a button's formmethod, formaction, formenctype win
		if has(submitter, "formmethod") {
			method = attr(submitter, "formmethod")
		}
		if has(submitter, "formaction") {
			action = attr(submitter, "formaction")
		}
		if has(submitter, "formenctype") {
			enctype = attr(submitter, "formenctype")
		}
	}
	c := &Control{}
	switch strings.ToLower(strings.TrimSpace(method)) {
	case "post":
		c.Method = http.MethodPost
	case "dialog":
		return nil, fmt.Errorf("%w: the Continue form's method is dialog: it closes a dialog and sends nothing", ErrNoContinue)
	default:
		c.Method = http.MethodGet
	}
	u := base
	if strings.TrimSpace(action) != "" {
		if u, err = resolve(action); err != nil {
			return nil, err
		}
	}
	if cs := strings.Fields(attr(ctl, "accept-charset")); len(cs) > 0 && !slices.ContainsFunc(cs, func(s string) bool { return strings.EqualFold(s, "utf-8") }) {
		return nil, fmt.Errorf("continueform: the Continue form's accept-charset is %q; only UTF-8 is sent", attr(ctl, "accept-charset"))
	}
	fields := entries(doc, ctl, submitter)
	if c.Method == http.MethodGet {
		q := *u
		q.RawQuery = urlencode(fields)
		c.URL = q.String()
		return c, nil
	}
	c.URL, c.Fields = u.String(), fields
	switch strings.ToLower(strings.TrimSpace(enctype)) {
	case "multipart/form-data":
		c.Enctype = "multipart/form-data"
	case "text/plain":
		c.Enctype = "text/plain"
	default:
		c.Enctype = "application/x-www-form-urlencoded"
	}
	return c, nil
}

// Body encodes the control's fields as its form would: the Content-Type
// and the body. A GET has neither.
func (c *Control) Body() (contentType string, body []byte) {
	if c.Method == http.MethodGet {
		return "", nil
	}
	switch c.Enctype {
	case "multipart/form-data":
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for _, f := range c.Fields {
			// As browsers write a name: CR, LF and '"' percent-encoded.
			name := strings.NewReplacer("\r", "%0D", "\n", "%0A", `"`, "%22").Replace(f.Name)
			w, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Disposition": {`form-data; name="` + name + `"`}})
			io.WriteString(w, f.Value)
		}
		mw.Close()
		return mw.FormDataContentType(), buf.Bytes()
	case "text/plain":
		var b strings.Builder
		for _, f := range c.Fields {
			b.WriteString(f.Name + "=" + f.Value + "\r\n")
		}
		return "text/plain", []byte(b.String())
	default:
		return "application/x-www-form-urlencoded", []byte(urlencode(c.Fields))
	}
}

// String is the control in a line: the method, the URL and, for a form,
// the field names (never their values: one may be a CSRF token).
func (c *Control) String() string {
	s := c.Method + " " + c.URL
	if c.Method == http.MethodPost {
		names := make([]string, len(c.Fields))
		for i, f := range c.Fields {
			names[i] = f.Name
		}
		if len(names) == 0 {
			names = []string{"no fields"}
		}
		s += " (" + c.Enctype + ": " + strings.Join(names, ", ") + ")"
	}
	return s
}

// DiffError says how a Continue control's request differs from the
// request it should repeat.
type DiffError struct {
	// Control is the Continue control.
	Control *Control
	// Differences say what differs, one each: the method, the URL, the
	// encoding, or a field missing, added or changed. Values are quoted,
	// except those of fields named like a CSRF token, which are never
	// shown.
	Differences []string
	// Missing, Added and Changed name the fields sent but not on the
	// form, on the form but not sent, and sent with other values.
	Missing, Added, Changed []string
}

func (e *DiffError) Error() string {
	return "the waiting page's Continue (" + e.Control.String() + ") does not make the request again: " + strings.Join(e.Differences, "; ")
}

// Repeats checks that the control makes the request again: the same
// method (HEAD is repeated as GET), the same URL, and, for a POST, the
// same fields encoded the same way, as many and with the same values
// under each name (the order of different names may change: a Gate that
// repeats a form a middleware parsed repeats url.Values). A field named
// like a CSRF token may get a fresh value, or be added, since it checks
// the submission rather than describes the action; but one that is
// missing is a difference. It returns nil or a *DiffError.
func (c *Control) Repeats(method, target, contentType string, body []byte) error {
	e := &DiffError{Control: c}
	if method == http.MethodHead {
		method = http.MethodGet
	}
	if method != c.Method {
		e.Differences = append(e.Differences, fmt.Sprintf("the request was a %s, Continue sends a %s", method, c.Method))
	}
	if want, got := sameURL(target), sameURL(c.URL); want != got {
		e.Differences = append(e.Differences, fmt.Sprintf("the request went to %s, Continue goes to %s", want, got))
	}
	if method == c.Method && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch) { // htmx sends PUT and PATCH with a body
		sent, enc, err := decodeBody(contentType, body)
		switch {
		case err != nil:
			e.Differences = append(e.Differences, err.Error())
		case enc != c.Enctype:
			e.Differences = append(e.Differences, fmt.Sprintf("the request's body was %s, Continue sends %s", enc, c.Enctype))
		}
		if err == nil {
			e.compare(sent, c.Fields)
		}
	}
	if len(e.Differences) == 0 {
		return nil
	}
	return e
}

// compare adds the differences between the sent fields and the form's.
func (e *DiffError) compare(sent, form []Field) {
	byName := func(fs []Field) (map[string][]string, []string) {
		m := map[string][]string{}
		var order []string
		for _, f := range fs {
			if _, ok := m[f.Name]; !ok {
				order = append(order, f.Name)
			}
			m[f.Name] = append(m[f.Name], f.Value)
		}
		return m, order
	}
	s, sOrder := byName(sent)
	f, fOrder := byName(form)
	var missing, changed, added []string
	for _, name := range sOrder {
		fv, ok := f[name]
		switch {
		case !ok:
			e.Missing = append(e.Missing, name)
			missing = append(missing, name+showValues(name, s[name]))
		case slices.Equal(s[name], fv) || (IsCSRFField(name) && len(fv) == len(s[name])):
		default:
			e.Changed = append(e.Changed, name)
			if LooksLikeToken(name) {
				changed = append(changed, fmt.Sprintf("%s sent %d time(s), Continue sends it %d time(s)", name, len(s[name]), len(fv)))
			} else {
				changed = append(changed, fmt.Sprintf("%s sent as %s, Continue sends %s", name, quoted(s[name]), quoted(fv)))
			}
		}
	}
	for _, name := range fOrder {
		if _, ok := s[name]; !ok && !IsCSRFField(name) {
			e.Added = append(e.Added, name)
			added = append(added, name+showValues(name, f[name]))
		}
	}
	if len(missing) > 0 {
		e.Differences = append(e.Differences, "fields the request sent that Continue does not: "+strings.Join(missing, ", "))
	}
	if len(changed) > 0 {
		e.Differences = append(e.Differences, "fields Continue sends with other values: "+strings.Join(changed, ", "))
	}
	if len(added) > 0 {
		e.Differences = append(e.Differences, "fields Continue sends that the request did not: "+strings.Join(added, ", "))
	}
}

func showValues(name string, vs []string) string {
	if LooksLikeToken(name) {
		return " (a token: value not shown)"
	}
	return "=" + quoted(vs)
}

func quoted(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		if len(v) > 60 {
			v = v[:57] + "..."
		}
		q[i] = fmt.Sprintf("%q", v)
	}
	if len(q) == 1 {
		return q[0]
	}
	return "[" + strings.Join(q, " ") + "]"
}

// LooksLikeToken reports whether a field's name says it carries a CSRF
// token or another secret (csrf_token, _csrf, gorilla.csrf.Token,
// authenticity_token, __RequestVerificationToken, access_token, nonce,
// …): its value is never printed. It is broad on purpose; what may
// change between the request and its Continue is narrower (IsCSRFField).
func LooksLikeToken(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"csrf", "xsrf", "token", "authenticity", "nonce"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// sameURL is u as compared: scheme, host, escaped path and query.
func sameURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	v := url.URL{Scheme: strings.ToLower(u.Scheme), Host: strings.ToLower(u.Host), Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}
	if v.Path == "" {
		v.Path = "/"
	}
	return v.String()
}

// decodeBody reads a POST body as fields, in order, and names its
// encoding.
func decodeBody(contentType string, body []byte) ([]Field, string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		if len(body) == 0 {
			return nil, "application/x-www-form-urlencoded", nil // an empty form
		}
		return nil, "", fmt.Errorf("the request's Content-Type %q can't be read", contentType)
	}
	switch mt {
	case "application/x-www-form-urlencoded":
		var fs []Field
		for part := range strings.SplitSeq(string(body), "&") {
			if part == "" {
				continue
			}
			k, v, _ := strings.Cut(part, "=")
			k, err1 := url.QueryUnescape(k)
			v, err2 := url.QueryUnescape(v)
			if err1 != nil || err2 != nil {
				return nil, "", errors.New("the request's form body can't be read")
			}
			fs = append(fs, Field{k, v})
		}
		return fs, mt, nil
	case "multipart/form-data":
		var fs []Field
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return fs, mt, nil
			}
			if err != nil {
				return nil, "", fmt.Errorf("the request's multipart body can't be read: %v", err)
			}
			v, _ := io.ReadAll(p)
			if p.FileName() != "" {
				return nil, "", fmt.Errorf("the request sent the file %q in %s, which no page can send again", p.FileName(), p.FormName())
			}
			fs = append(fs, Field{p.FormName(), string(v)})
		}
	case "text/plain":
		var fs []Field
		for line := range strings.SplitSeq(strings.TrimSuffix(string(body), "\r\n"), "\r\n") {
			if line == "" {
				continue
			}
			k, v, _ := strings.Cut(line, "=")
			fs = append(fs, Field{k, v})
		}
		return fs, mt, nil
	}
	return nil, "", fmt.Errorf("the request's body was %s, which a form can't send", mt)
}

// urlencode is the application/x-www-form-urlencoded serializer browsers
// use (WHATWG URL): fields in order, space as '+', every byte but ASCII
// letters, digits and *-._ percent-encoded.
func urlencode(fields []Field) string {
	var b strings.Builder
	enc := func(s string) {
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '*', c == '-', c == '.', c == '_':
				b.WriteByte(c)
			case c == ' ':
				b.WriteByte('+')
			default:
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
	}
	for i, f := range fields {
		if i > 0 {
			b.WriteByte('&')
		}
		enc(f.Name)
		b.WriteByte('=')
		enc(f.Value)
	}
	return b.String()
}

// --- the HTML of the page ---

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

func has(n *html.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return true
		}
	}
	return false
}

// find returns the first element in tree order for which ok is true.
func find(n *html.Node, ok func(*html.Node) bool) *html.Node {
	if n.Type == html.ElementNode && ok(n) {
		return n
	}
	for k := n.FirstChild; k != nil; k = k.NextSibling {
		if f := find(k, ok); f != nil {
			return f
		}
	}
	return nil
}

// each calls fn for every element in tree order.
func each(n *html.Node, fn func(*html.Node)) {
	if n.Type == html.ElementNode {
		fn(n)
	}
	for k := n.FirstChild; k != nil; k = k.NextSibling {
		each(k, fn)
	}
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for k := n.FirstChild; k != nil; k = k.NextSibling {
			walk(k)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// notRepeatable is the page's sentence saying the request can't be
// repeated, or "".
func notRepeatable(doc *html.Node) string {
	p := find(doc, func(n *html.Node) bool {
		t := strings.ToLower(text(n))
		return n.DataAtom == atom.P && (strings.Contains(t, "can't be repeated") || strings.Contains(t, "can’t be repeated") || strings.Contains(t, "cannot be repeated"))
	})
	if p == nil {
		return ""
	}
	return text(p)
}

// owner is the form a listed element belongs to (HTML "form owner"): the
// form its form attribute names, else its nearest form ancestor.
func owner(doc, n *html.Node) *html.Node {
	if has(n, "form") {
		id := attr(n, "form")
		return find(doc, func(f *html.Node) bool { return f.DataAtom == atom.Form && attr(f, "id") == id })
	}
	for p := n.Parent; p != nil; p = p.Parent {
		if p.DataAtom == atom.Form {
			return p
		}
	}
	return nil
}

// disabled reports whether a control is disabled: its own attribute, or a
// disabled fieldset around it (unless it is in that fieldset's first
// legend).
func disabled(n *html.Node) bool {
	if has(n, "disabled") {
		return true
	}
	child := n
	for p := n.Parent; p != nil; child, p = p, p.Parent {
		if p.DataAtom != atom.Fieldset || !has(p, "disabled") {
			continue
		}
		var legend *html.Node
		for k := p.FirstChild; k != nil; k = k.NextSibling {
			if k.Type == html.ElementNode && k.DataAtom == atom.Legend {
				legend = k
				break
			}
		}
		if legend == nil || child != legend {
			return true
		}
	}
	return false
}

func inputType(n *html.Node) string { return strings.ToLower(strings.TrimSpace(attr(n, "type"))) }

func isSubmit(n *html.Node) bool {
	switch n.DataAtom {
	case atom.Button:
		t := inputType(n) // a missing or unknown type is submit
		return t != "button" && t != "reset"
	case atom.Input:
		t := inputType(n)
		return t == "submit" || t == "image"
	}
	return false
}

// firstSubmitter is the form's default button: the one a person presses
// to continue (HTML "default button"), or nil.
func firstSubmitter(doc, form *html.Node) *html.Node {
	return find(doc, func(n *html.Node) bool { return isSubmit(n) && !disabled(n) && owner(doc, n) == form })
}

// entries builds the form's entry list (HTML "constructing the entry
// list"), then normalizes line breaks to CR LF as the encodings do.
func entries(doc, form, submitter *html.Node) []Field {
	var out []Field
	add := func(name, value string) { out = append(out, Field{crlf(name), crlf(value)}) }
	each(doc, func(n *html.Node) {
		switch n.DataAtom {
		case atom.Input, atom.Select, atom.Textarea, atom.Button:
		default:
			return
		}
		if owner(doc, n) != form || disabled(n) || inDatalist(n) {
			return
		}
		name := attr(n, "name")
		if isSubmit(n) && n != submitter {
			return
		}
		switch n.DataAtom {
		case atom.Button:
			if name != "" {
				add(name, attr(n, "value"))
			}
			return
		case atom.Select:
			if name == "" {
				return
			}
			for _, v := range selected(n) {
				add(name, v)
			}
			return
		case atom.Textarea:
			if name != "" {
				add(name, textareaValue(n))
			}
			return
		}
		t := inputType(n)
		switch t {
		case "image":
			if name != "" {
				add(name+".x", "0")
				add(name+".y", "0")
			}
			return
		case "button", "reset", "file":
			return
		case "checkbox", "radio":
			if !has(n, "checked") || name == "" {
				return
			}
			v := "on"
			if has(n, "value") {
				v = attr(n, "value")
			}
			add(name, v)
			return
		}
		if name == "" {
			return
		}
		v := attr(n, "value")
		switch t {
		case "hidden":
			if strings.EqualFold(name, "_charset_") && v == "" {
				v = "UTF-8"
			}
		case "submit":
		case "url", "email":
			v = strings.TrimSpace(strings.NewReplacer("\r", "", "\n", "").Replace(v))
		case "text", "search", "tel", "password", "":
			v = strings.NewReplacer("\r", "", "\n", "").Replace(v)
		}
		add(name, v)
	})
	return out
}

func inDatalist(n *html.Node) bool {
	for p := n.Parent; p != nil; p = p.Parent {
		if p.DataAtom == atom.Datalist {
			return true
		}
	}
	return false
}

// selected is a select's selected, enabled options' values (HTML "the
// selectedness setting algorithm": a single select with none selected
// selects its first enabled option; with several, the last).
func selected(sel *html.Node) []string {
	var opts []*html.Node
	each(sel, func(n *html.Node) {
		if n.DataAtom == atom.Option {
			opts = append(opts, n)
		}
	})
	optDisabled := func(o *html.Node) bool {
		if has(o, "disabled") {
			return true
		}
		for p := o.Parent; p != nil && p != sel; p = p.Parent {
			if p.DataAtom == atom.Optgroup && has(p, "disabled") {
				return true
			}
		}
		return false
	}
	value := func(o *html.Node) string {
		if has(o, "value") {
			return attr(o, "value")
		}
		return text(o)
	}
	var out []string
	if has(sel, "multiple") {
		for _, o := range opts {
			if has(o, "selected") && !optDisabled(o) {
				out = append(out, value(o))
			}
		}
		return out
	}
	var pick *html.Node
	for _, o := range opts {
		if has(o, "selected") {
			pick = o
		}
	}
	if pick == nil {
		for _, o := range opts {
			if !optDisabled(o) {
				pick = o
				break
			}
		}
	}
	if pick == nil || optDisabled(pick) {
		return nil
	}
	return []string{value(pick)}
}

func textareaValue(n *html.Node) string {
	var b strings.Builder
	for k := n.FirstChild; k != nil; k = k.NextSibling {
		if k.Type == html.TextNode {
			b.WriteString(k.Data)
		}
	}
	return b.String()
}

// crlf turns every line break into CR LF, as a form's encodings do.
func crlf(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

// csrfFieldRE matches the names of CSRF token fields, whatever their case:
// any name with "csrf" or "xsrf" in it (csrf_token, _csrf,
// gorilla.csrf.Token, csrfmiddlewaretoken, X-XSRF-TOKEN, _xsrf, …), and
// the names other libraries use: authenticity_token, _token,
// __RequestVerificationToken, _wpnonce, form_token.
var csrfFieldRE = regexp.MustCompile(`(?i)csrf|xsrf|^authenticity_token$|^_token$|^_*requestverificationtoken$|^_wpnonce$|^form_token$`)

// IsCSRFField reports whether a form or JSON field is a CSRF library's
// token: a site's protection, not part of what is asked for. Repeats lets
// such a field take another value or be added by the page, and the
// reference agent leaves it out of its comparison with an operation's
// terms (A27). For a JSON member, name may be a dotted path
// ("meta.csrf_token"); its last part is judged too.
func IsCSRFField(name string) bool {
	if csrfFieldRE.MatchString(name) {
		return true
	}
	i := strings.LastIndexByte(name, '.')
	return i >= 0 && csrfFieldRE.MatchString(name[i+1:])
}
