package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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

// uses reports whether t reads from src.
func (t template) uses(src string) bool {
	for _, p := range t.parts {
		if p.src == src {
			return true
		}
	}
	return false
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

// readRequest reads what an action's placeholders need from r and its
// body. An unreadable body of the kind the placeholders read is an error
// (the Gate answers 400).
func readRequest(r *http.Request, body []byte, needForm, needJSON bool) (*requestData, error) {
	d := &requestData{r: r, query: r.URL.Query()}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if needForm {
		switch mt {
		case "application/x-www-form-urlencoded":
			v, err := url.ParseQuery(string(body))
			if err != nil {
				return nil, fmt.Errorf("the form body could not be read: %v", err)
			}
			d.form = v
		case "multipart/form-data":
			v, err := multipartValues(body, params["boundary"])
			if err != nil {
				return nil, fmt.Errorf("the multipart form body could not be read: %v", err)
			}
			d.form = v
		}
	}
	if needJSON && (mt == "application/json" || strings.HasSuffix(mt, "+json")) && len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&d.json); err != nil {
			return nil, fmt.Errorf("the JSON body could not be read: %v", err)
		}
	}
	return d, nil
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
		p, err := mr.NextPart()
		if err == io.EOF {
			return v, nil
		}
		if err != nil {
			return nil, err
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

func (t *termsTree) uses(src string) bool {
	switch t.kind {
	case treeTemplate:
		return t.tmpl.uses(src)
	case treeObject:
		for _, v := range t.object {
			if v.uses(src) {
				return true
			}
		}
	case treeList:
		for _, v := range t.list {
			if v.uses(src) {
				return true
			}
		}
	}
	return false
}
