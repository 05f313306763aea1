package conformance

import (
	"bytes"
	"encoding/json"
	"mime"
	"regexp"
	"strings"

	"golang.org/x/net/html"

	"github.com/opsgate/opsgate/internal/continueform"
)

// redacted stands for a value the checker never prints.
const redacted = "…"

// tokenText finds "name=value" and "name: value" where the name looks
// like a token's, in text the structure of which the checker doesn't know.
var tokenText = regexp.MustCompile(`(?i)([\w.\-]*(?:csrf|xsrf|token|authenticity|nonce)[\w.\-]*"?\s*[=:]\s*)("[^"]*"|'[^']*'|[^\s&;,"'<>]+)`)

// redactBody is a body fit for the log: the value of every input, meta
// tag or attribute of an HTML page, and every member of a JSON object,
// named like a CSRF token or another token (continueform.LooksLikeToken),
// blanked out, and any name=value of that kind left in the text too.
func redactBody(contentType string, body []byte) string {
	mt, _, _ := mime.ParseMediaType(contentType)
	out := string(body)
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		if doc, err := html.Parse(bytes.NewReader(body)); err == nil {
			redactHTML(doc)
			var b strings.Builder
			if html.Render(&b, doc) == nil {
				out = b.String()
			}
		}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		var v any
		if json.Unmarshal(body, &v) == nil {
			if b, err := json.Marshal(redactJSON(v)); err == nil {
				out = string(b)
			}
		}
	}
	return tokenText.ReplaceAllString(out, "${1}"+redacted)
}

func redactHTML(n *html.Node) {
	if n.Type == html.ElementNode {
		named := ""
		for _, a := range n.Attr {
			if a.Key == "name" || a.Key == "property" || a.Key == "id" {
				if continueform.LooksLikeToken(a.Val) {
					named = a.Val
				}
			}
		}
		for i, a := range n.Attr {
			switch {
			case named != "" && (a.Key == "value" || a.Key == "content"):
				n.Attr[i].Val = redacted
			case continueform.LooksLikeToken(a.Key):
				n.Attr[i].Val = redacted
			}
		}
	}
	for k := n.FirstChild; k != nil; k = k.NextSibling {
		redactHTML(k)
	}
}

func redactJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if continueform.LooksLikeToken(k) {
				t[k] = redacted
			} else {
				t[k] = redactJSON(x)
			}
		}
	case []any:
		for i, x := range t {
			t[i] = redactJSON(x)
		}
	}
	return v
}
