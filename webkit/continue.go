package webkit

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/view"
)

// Continue fidelity (§4 W62, §6): the waiting page's Continue control must
// make the original request again, so that the store's Take finds the
// approval for the same terms. A link repeats a GET exactly. A POST of a
// form (application/x-www-form-urlencoded, or multipart/form-data without
// files) is repeated by a form of hidden inputs with the same action, the
// same encoding and the same fields, order and repeated keys kept, every
// value escaped by templ. The fields are what the browser sent even when a
// middleware read the body before the Gate (see sentBody). What an HTML
// form can't send back is not offered as a form: the page says the request
// can't be repeated and links back. That covers bodies with files, other
// methods and JSON bodies (a script's request: opsgate.fetch repeats
// those), and fields a browser would change on the way (see formSafe).
// Gating an action whose request can't be repeated, such as a file
// upload, is unsuited to operations on the website (§4 W63). A request
// that carried its CSRF token in a header (tokenHeader) is not offered as
// a form either: a form would post without it, and the website's CSRF
// protection would refuse it. An htmx or Turbo request's card is repeated
// by the framework (the kit's card.js), with the page's headers: its
// Continue keeps the method (htmx sends PUT, PATCH and DELETE too) and the
// fields.

// continueOf returns the Continue control for r, whose body is body.
// framework is the front-end framework that sent r (respond.Framework):
// its card's Continue is that framework's request, so htmx's other
// methods and a CSRF token in a header are repeated too. A page of its
// own (framework "") never offers a plain form for a request whose CSRF
// token was in a header: the form would lose it (W62).
func continueOf(r *http.Request, body []byte, framework string) view.Continue {
	action := requestTarget(r)
	c := view.Continue{Action: action, Back: backOf(r), TokenHeader: tokenHeader(r.Header)}
	if c.TokenHeader != "" && framework == "" {
		c.Why = "it carried its CSRF token in the " + c.TokenHeader + " header, which a form can't send"
		return c
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		c.Method = http.MethodGet
		return c
	case http.MethodPost:
	case http.MethodPut, http.MethodPatch, http.MethodDelete:
		if framework != respond.HTMX {
			c.Why = "it was sent by a script"
			return c
		}
		if len(body) == 0 { // htmx sends a DELETE's values in its query
			c.Method = r.Method
			return c
		}
	default:
		c.Why = "it was sent by a script"
		return c
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(body) == 0 && framework != "":
		c.Method = r.Method // a framework's request with no values
	case err != nil:
		c.Why = "its form could not be read"
	case mt == "application/x-www-form-urlencoded":
		if cs := params["charset"]; cs != "" && !strings.EqualFold(cs, "utf-8") {
			c.Why = "its form is not UTF-8"
			return c
		}
		fields, err := parseFormOrdered(body)
		if err != nil {
			c.Why = "its form could not be read"
			return c
		}
		if why := formSafe(fields); why != "" {
			c.Why = why
			return c
		}
		c.Method, c.Fields = r.Method, fields
	case mt == "multipart/form-data":
		fields, why := multipartFields(body, params["boundary"])
		if why == "" {
			why = formSafe(fields)
		}
		if why == "" && !multipartNamesSafe(fields) {
			why = "it has a field name a form can't send back unchanged"
		}
		if why != "" {
			c.Why = why
			return c
		}
		c.Method, c.Fields, c.Multipart = r.Method, fields, true
	default:
		c.Why = "it was sent by a script"
	}
	return c
}

// tokenHeader returns the name of a header of h that carries a CSRF
// token, which an HTML form can't send (W62): X-CSRF-Token (Rails,
// gorilla/csrf, nosurf, Turbo), X-XSRF-Token (Angular, Laravel, Spring),
// X-CSRFToken (Django), RequestVerificationToken (ASP.NET), X-WP-Nonce
// (WordPress), and any other whose name says csrf or xsrf. "" for none.
func tokenHeader(h http.Header) string {
	name := ""
	for k := range h {
		l := strings.ToLower(k)
		if strings.Contains(l, "csrf") || strings.Contains(l, "xsrf") || l == "requestverificationtoken" ||
			l == "x-requestverificationtoken" || l == "x-wp-nonce" {
			if name == "" || k < name { // the same name whatever the map's order
				name = k
			}
		}
	}
	return name
}

// requestTarget is r's path and query, as a relative reference that stays
// on this website: a path starting "//" would be read as another host.
func requestTarget(r *http.Request) string {
	p := r.URL.EscapedPath()
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	if strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		p = "/." + p
	}
	if r.URL.RawQuery != "" {
		p += "?" + r.URL.RawQuery
	}
	return p
}

// backOf is where the page links back to: the Referer's path when it is on
// this website, else "/".
func backOf(r *http.Request) string {
	ref, err := url.Parse(r.Referer())
	if err != nil || ref.Host == "" || !strings.EqualFold(ref.Host, r.Host) || (ref.Scheme != "http" && ref.Scheme != "https") {
		return "/"
	}
	u := &url.URL{Path: ref.Path, RawPath: ref.RawPath, RawQuery: ref.RawQuery}
	p := u.RequestURI()
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return "/"
	}
	return p
}

var errFormSyntax = errors.New("webkit: form: malformed field")

// parseFormOrdered parses an application/x-www-form-urlencoded body as
// net/url does (ParseQuery), keeping the order and repeats of its fields.
func parseFormOrdered(body []byte) ([]view.Field, error) {
	var fields []view.Field
	s := string(body)
	for s != "" {
		var part string
		part, s, _ = strings.Cut(s, "&")
		if part == "" {
			continue
		}
		if strings.Contains(part, ";") { // as url.ParseQuery, Go 1.17+
			return nil, errFormSyntax
		}
		k, v, _ := strings.Cut(part, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			return nil, errFormSyntax
		}
		v, err = url.QueryUnescape(v)
		if err != nil {
			return nil, errFormSyntax
		}
		fields = append(fields, view.Field{Name: k, Value: v})
	}
	return fields, nil
}

// formSafe returns "" when a browser would submit fields from hidden inputs
// exactly as they are, else why it would not (HTML "constructing the entry
// list" and "converting an entry list to a list of name-value pairs"):
// a field with no name is skipped; _charset_ gets the charset's name;
// text that is not UTF-8, or has NUL, can't be in the page; a line break
// that is not CR LF comes back as CR LF.
func formSafe(fields []view.Field) string {
	for _, f := range fields {
		if f.Name == "" {
			return "it has a field without a name"
		}
		if strings.EqualFold(f.Name, "_charset_") {
			return "it has a _charset_ field"
		}
		if !textSafe(f.Name) || !textSafe(f.Value) {
			return "it has text a form can't send back unchanged"
		}
	}
	return ""
}

func textSafe(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 0:
			return false
		case '\r':
			if i+1 >= len(s) || s[i+1] != '\n' {
				return false
			}
			i++
		case '\n':
			return false
		}
	}
	return true
}

// multipartFields returns a multipart body's fields in order, or why the
// page can't post it again: a browser's form can send fields as
// multipart/form-data, never a file it was not given (§4 W63).
func multipartFields(body []byte, boundary string) ([]view.Field, string) {
	if boundary == "" {
		return nil, "its form could not be read"
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var fields []view.Field
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return fields, ""
		}
		if err != nil {
			return nil, "its form could not be read"
		}
		if p.FileName() != "" {
			return nil, "it sent files"
		}
		if p.FormName() == "" {
			return nil, "its form could not be read"
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return nil, "its form could not be read"
		}
		fields = append(fields, view.Field{Name: p.FormName(), Value: string(v)})
	}
}

// multipartNamesSafe: a browser escapes '"', CR and LF in a multipart
// field's name (HTML "multipart/form-data encoding algorithm"), so such a
// name would not come back as it was sent.
func multipartNamesSafe(fields []view.Field) bool {
	for _, f := range fields {
		if strings.ContainsAny(f.Name, "\"\r\n") {
			return false
		}
	}
	return true
}
