package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A template is a string of the config with placeholders: {path.order},
// {query.page}, {form.size}, {json.date}, {json.items.0.sku}. "{{" and
// "}}" are a literal brace.
type template struct {
	parts []part
}

// part is a literal (src == "") or a placeholder.
type part struct {
	lit  string
	src  string   // "path", "query", "form" or "json"
	name []string // the field; for json, the path through the body
}

// sources are the places a placeholder reads from.
var sources = map[string]bool{"path": true, "query": true, "form": true, "json": true}

// parseTemplate reads s; wildcards are the path pattern's wildcards,
// which {path.x} must name.
func parseTemplate(s string, wildcards map[string]bool) (template, error) {
	var t template
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.parts = append(t.parts, part{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			lit.WriteByte('}')
			i++
		case c == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return template{}, fmt.Errorf("%q: a { with no closing }; write {{ for a literal brace", s)
			}
			ref := s[i+1 : i+end]
			src, field, ok := strings.Cut(ref, ".")
			if !ok || !sources[src] || field == "" {
				return template{}, fmt.Errorf("%q: placeholder {%s}: want {path.NAME}, {query.NAME}, {form.NAME} or {json.NAME}", s, ref)
			}
			p := part{src: src, name: []string{field}}
			if src == "json" {
				p.name = strings.Split(field, ".")
				for _, seg := range p.name {
					if seg == "" {
						return template{}, fmt.Errorf("%q: placeholder {%s}: an empty field name", s, ref)
					}
				}
			}
			if src == "path" && !wildcards[field] {
				return template{}, fmt.Errorf("%q: placeholder {%s}: the action's match pattern has no wildcard {%s}", s, ref, field)
			}
			flush()
			t.parts = append(t.parts, p)
			i += end
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, nil
}

// single reports whether t is one placeholder and nothing else: its value
// keeps its JSON type in terms.
func (t template) single() bool { return len(t.parts) == 1 && t.parts[0].src != "" }

// value is t's value for the request: a single placeholder's own value
// (nil when the request has no such field), or the text.
func (t template) value(d *requestData) any {
	if t.single() {
		return d.lookup(t.parts[0])
	}
	return t.text(d)
}

// text is t with each placeholder replaced by the request's value ("" for
// a missing field, a JSON value's text for numbers, objects and lists).
func (t template) text(d *requestData) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.src == "" {
			b.WriteString(p.lit)
			continue
		}
		switch v := d.lookup(p).(type) {
		case nil:
		case string:
			b.WriteString(v)
		case json.Number:
			b.WriteString(v.String())
		case bool:
			b.WriteString(strconv.FormatBool(v))
		default:
			j, _ := json.Marshal(v) // decoded JSON: always marshals
			b.Write(j)
		}
	}
	return b.String()
}

// requestData is what placeholders read from one request.
type requestData struct {
	r     *http.Request
	query url.Values
	form  url.Values
	json  any
}

// reads are the fields an action's placeholders read: by source, the
// names (for json, the top-level member each path starts with).
type reads map[string][]string

// readsOf collects what the templates and terms read.
func readsOf(ts []*template, terms *termsTree) reads {
	out := reads{}
	add := func(p part) {
		if p.src == "" || slices.Contains(out[p.src], p.name[0]) {
			return
		}
		out[p.src] = append(out[p.src], p.name[0])
	}
	for _, t := range ts {
		for _, p := range t.parts {
			add(p)
		}
	}
	if terms != nil {
		terms.each(add)
	}
	return out
}

// Content types the placeholders read (README.md "Placeholders").
const (
	formURLEncoded = "application/x-www-form-urlencoded"
	formMultipart  = "multipart/form-data"
)

// isJSONType reports whether a media type is JSON: application/json or
// any …/…+json.
func isJSONType(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

// readRequest reads what an action's placeholders need from r and its
// body, refusing (the Gate answers 400, before any operation) a request
// whose terms a website could read otherwise than the gateway (§3 "MUST
// perform only what the approved revision describes"):
//
//   - a field read by the key, terms or summary that appears more than
//     once, in the query and the body together (frameworks merge them),
//     or spelled so that a framework reads it as the field (size[],
//     PHP's si.ze for si_ze): repeated fields are read first by some,
//     last by others, as a list by others;
//   - form fields asked of a body that is not a form, or JSON members of
//     a body that is not JSON;
//   - a body or query that does not parse as what it says it is, or JSON
//     with a member given twice.
func readRequest(r *http.Request, body []byte, rd reads) (*requestData, error) {
	d := &requestData{r: r}
	needForm, needJSON := len(rd["form"]) > 0, len(rd["json"]) > 0
	if len(rd["query"]) == 0 && !needForm && !needJSON {
		return d, nil // the path alone
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query string could not be read: %v", err)
	}
	d.query = q
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		return nil, errors.New("the request has more than one Content-Type")
	}
	var mt string
	var params map[string]string
	if len(cts) == 1 {
		if mt, params, err = mime.ParseMediaType(cts[0]); err != nil && (needForm || needJSON || len(body) > 0) {
			return nil, fmt.Errorf("the Content-Type %q could not be read", cts[0])
		}
	}
	isForm := mt == formURLEncoded || mt == formMultipart
	switch {
	case needForm && !isForm:
		return nil, fmt.Errorf("this action reads form fields (%s): send %s or %s, not %s", strings.Join(rd["form"], ", "), formURLEncoded, formMultipart, contentTypeName(mt))
	case needJSON && !isJSONType(mt):
		return nil, fmt.Errorf("this action reads JSON members (%s): send application/json, not %s", strings.Join(rd["json"], ", "), contentTypeName(mt))
	}
	switch {
	case mt == formURLEncoded:
		if d.form, err = url.ParseQuery(string(body)); err != nil {
			return nil, fmt.Errorf("the form body could not be read: %v", err)
		}
	case mt == formMultipart:
		if d.form, err = multipartValues(body, params["boundary"]); err != nil {
			return nil, fmt.Errorf("the multipart form body could not be read: %v", err)
		}
	case isJSONType(mt) && (needJSON || len(bytes.TrimSpace(body)) > 0):
		if d.json, err = strictJSON(body); err != nil {
			return nil, fmt.Errorf("the JSON body could not be read: %v", err)
		}
	}
	// Each field read appears once, spelled as it is read, in the query
	// and the body together.
	top, _ := d.json.(map[string]any)
	for _, src := range []string{"query", "form", "json"} {
		for _, name := range rd[src] {
			n, spelled := occurrences(d.query, name)
			m, spelled2 := occurrences(d.form, name)
			if _, ok := top[name]; ok && src != "json" {
				m++
			}
			if src == "json" {
				if n+m > 0 {
					return nil, fmt.Errorf("the field %q is both in the query and the JSON body (websites read one or the other)", name)
				}
				continue
			}
			if spelled == "" {
				spelled = spelled2
			}
			switch {
			case n+m > 1:
				return nil, fmt.Errorf("the field %q is sent more than once (websites read repeated fields differently: the first, the last, or all)", name)
			case spelled != "":
				return nil, fmt.Errorf("the field %q is sent as %q, which websites read differently", name, spelled)
			}
		}
	}
	return d, nil
}

func contentTypeName(mt string) string {
	if mt == "" {
		return "no Content-Type"
	}
	return mt
}

// occurrences counts the values of v whose key a website reads as the
// field name: the name itself, the name with brackets (size[], size[0]:
// PHP, Rack and qs read a list or a map), or a name PHP reads as it (a
// dot or a space for an underscore). spelled is one key that is not name,
// if any.
func occurrences(v url.Values, name string) (n int, spelled string) {
	want := phpName(name)
	for k, vs := range v {
		pk := phpName(k)
		if pk == want || strings.HasPrefix(pk, want+"[") {
			n += len(vs)
			if k != name {
				spelled = k
			}
		}
	}
	return n, spelled
}

// phpName is the name PHP gives a field: leading spaces dropped, and in
// the name before its first [ (all of it, when no ] closes that [), each
// space, dot and [ an underscore.
func phpName(s string) string {
	s = strings.TrimLeft(s, " ")
	i := strings.IndexByte(s, '[')
	if i < 0 || !strings.Contains(s[i:], "]") {
		return strings.NewReplacer(" ", "_", ".", "_", "[", "_").Replace(s)
	}
	return strings.NewReplacer(" ", "_", ".", "_").Replace(s[:i]) + s[i:]
}

// maxJSONDepth bounds how deep a JSON body nests.
const maxJSONDepth = 128

// strictJSON decodes one JSON value, refusing what websites read in
// different ways: a member given twice in an object (the first wins
// here, the last in most languages), text that is not UTF-8, more than
// one value, nothing at all.
func strictJSON(body []byte) (any, error) {
	if !utf8.Valid(body) {
		return nil, errors.New("it is not UTF-8")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("the body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	v, err := jsonValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func jsonValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string) // an object's key is a string: Token checks
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("the member %q is given twice", k)
			}
			if m[k], err = jsonValue(dec, depth+1); err != nil {
				return nil, err
			}
		}
		_, err := dec.Token() // }
		return m, err
	case json.Delim('['):
		l := []any{}
		for dec.More() {
			v, err := jsonValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := dec.Token() // ]
		return l, err
	}
	return tok, nil
}

// multipartValues returns the fields of a multipart form (its files are
// left out: no placeholder reads a file).
func multipartValues(body []byte, boundary string) (url.Values, error) {
	if boundary == "" {
		return nil, fmt.Errorf("no boundary")
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	v := url.Values{}
	for {
		p, err := mr.NextRawPart() // raw: a website decodes no Content-Transfer-Encoding
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return nil, err
		}
		if p.Header.Get("Content-Transfer-Encoding") != "" {
			return nil, fmt.Errorf("a part with a Content-Transfer-Encoding")
		}
		if p.FileName() == "" && p.FormName() != "" {
			b, err := io.ReadAll(p)
			if err != nil {
				return nil, err
			}
			v.Add(p.FormName(), string(b))
		}
		p.Close()
	}
}

// lookup returns p's value in the request: a string for path, query and
// form (the first value), a decoded JSON value for json; nil when absent.
func (d *requestData) lookup(p part) any {
	switch p.src {
	case "path":
		if v := d.r.PathValue(p.name[0]); v != "" {
			return v
		}
	case "query":
		if vs, ok := d.query[p.name[0]]; ok && len(vs) > 0 {
			return vs[0]
		}
	case "form":
		if vs, ok := d.form[p.name[0]]; ok && len(vs) > 0 {
			return vs[0]
		}
	case "json":
		v := d.json
		for _, seg := range p.name {
			switch c := v.(type) {
			case map[string]any:
				v = c[seg]
			case []any:
				i, err := strconv.Atoi(seg)
				if err != nil || i < 0 || i >= len(c) {
					return nil
				}
				v = c[i]
			default:
				return nil
			}
		}
		return v
	}
	return nil
}

// each calls f with every placeholder of t.
func (t *termsTree) each(f func(part)) {
	switch t.kind {
	case treeTemplate:
		for _, p := range t.tmpl.parts {
			f(p)
		}
	case treeObject:
		for _, v := range t.object {
			v.each(f)
		}
	case treeList:
		for _, v := range t.list {
			v.each(f)
		}
	}
}

// termsTree is the terms of the config: objects, lists, literals and
// templates, built into a JSON object for each request.
type termsTree struct {
	object map[string]*termsTree
	list   []*termsTree
	lit    any // a literal scalar, when tmpl is nil and it is no object or list
	tmpl   *template
	kind   int // one of the tree kinds below
}

const (
	treeLiteral = iota
	treeTemplate
	treeObject
	treeList
)

func (t *termsTree) build(d *requestData) any {
	switch t.kind {
	case treeTemplate:
		return t.tmpl.value(d)
	case treeObject:
		m := make(map[string]any, len(t.object))
		for k, v := range t.object {
			m[k] = v.build(d)
		}
		return m
	case treeList:
		l := make([]any, len(t.list))
		for i, v := range t.list {
			l[i] = v.build(d)
		}
		return l
	}
	return t.lit
}
