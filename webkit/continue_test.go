package webkit

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
)

// ---- Continue fidelity (§4 W62) ----

// browserResubmit parses the waiting page as a browser does and returns the
// Continue form's method, action and the body the browser would send
// (HTML "constructing the entry list", application/x-www-form-urlencoded).
func browserResubmit(t *testing.T, page string) (method, action string, fields [][2]string, ok bool) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var form *html.Node
	var scripts int
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data == "form" && attr(n, "id") == "opsgate-continue" {
				form = n
			}
			if n.Data == "script" {
				scripts++
				if attr(n, "src") == "" {
					t.Errorf("inline script in the page")
				}
			}
			if n.Parent != nil && form != nil && isIn(n, form) && n.Data != "input" && n.Data != "button" {
				t.Errorf("unexpected element <%s> inside the form: a value broke out", n.Data)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if scripts != 1 {
		t.Errorf("%d script elements, want 1 (waiting.js)", scripts)
	}
	if form == nil {
		return "", "", nil, false
	}
	for c := form.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode || c.Data != "input" {
			continue
		}
		name, value := attr(c, "name"), attr(c, "value")
		// Submission turns every line break into CR LF.
		fields = append(fields, [2]string{crlf(name), crlf(value)})
	}
	return attr(form, "method"), attr(form, "action"), fields, true
}

func isIn(n, ancestor *html.Node) bool {
	for p := n.Parent; p != nil; p = p.Parent {
		if p == ancestor {
			return true
		}
	}
	return false
}

func crlf(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func TestContinueFidelity(t *testing.T) {
	tests := []struct {
		name string
		form [][2]string
	}{
		{"plain", [][2]string{{"order", "ord_7"}, {"size", "M"}}},
		{"unicode", [][2]string{{"order", "ord_7"}, {"size", "M"}, {"note", "Größe 😀 日本語 \u202ertl"}, {"名前", "値"}}},
		{"repeated keys keep their order", [][2]string{{"order", "ord_7"}, {"tag", "b"}, {"size", "M"}, {"tag", "a"}, {"tag", "b"}}},
		{"hostile values stay inert", [][2]string{{"order", "ord_7"}, {"size", `"><script>alert(1)</script>`}, {`"><img src=x onerror=alert(1)>`, `'&amp;<!--`}, {"x", "</form><form action=//evil>"}}},
		{"reserved characters", [][2]string{{"order", "ord_7"}, {"a&b=c", "1+1=2 & 50% ?#/"}, {"empty", ""}, {"sp ace", "  lead and trail  "}}},
		{"CR LF line breaks", [][2]string{{"order", "ord_7"}, {"note", "line 1\r\nline 2\r\n"}}},
		{"control characters", [][2]string{{"order", "ord_7"}, {"ctl", "a\tb\x01c\x7f"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
			var sent strings.Builder
			for i, f := range tt.form {
				if i > 0 {
					sent.WriteByte('&')
				}
				sent.WriteString(url.QueryEscape(f[0]) + "=" + url.QueryEscape(f[1]))
			}
			r := e.request(joinedOut, sent.String(), "text/html")
			r.URL.RawQuery = "from=list&x=%2F"
			r.RequestURI = "/exchange?from=list&x=%2F"
			rec := e.do(r)
			if rec.Code != 403 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			method, action, fields, ok := browserResubmit(t, rec.Body.String())
			if !ok {
				t.Fatalf("no Continue form:\n%s", rec.Body)
			}
			if method != "post" || action != "/exchange?from=list&x=%2F" {
				t.Errorf("form %s %s", method, action)
			}
			if fmt.Sprint(fields) != fmt.Sprint(tt.form) {
				t.Errorf("fields\n got %q\nwant %q", fields, tt.form)
			}
			// The resubmitted body means exactly what the first did.
			var again strings.Builder
			for i, f := range fields {
				if i > 0 {
					again.WriteByte('&')
				}
				again.WriteString(url.QueryEscape(f[0]) + "=" + url.QueryEscape(f[1]))
			}
			v1, _ := url.ParseQuery(sent.String())
			v2, _ := url.ParseQuery(again.String())
			if fmt.Sprint(v1) != fmt.Sprint(v2) {
				t.Errorf("parsed back %v, want %v", v2, v1)
			}
			// And the store agrees: approve, then press Continue.
			cookie, _ := r.Cookie(e.kit.Sessions.(*CookieSessions).name())
			e.record(sesOut, e.issueForm(sesOut, sent.String()))
			r2 := httptest.NewRequest("POST", action, strings.NewReader(again.String()))
			r2.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r2.AddCookie(cookie)
			if rec := e.do(r2); rec.Code != 200 || e.runs.Load() != 1 {
				t.Errorf("Continue after approval: %d runs %d", rec.Code, e.runs.Load())
			}
		})
	}
}

func (e *gateEnv) issueForm(s Session, form string) storedriver.TakeResult {
	iss, err := storetest.Issue(context.Background(), storedriver.Steps(e.kit.Store), s.Owner(), mustAction(e.t, e.kit, form), e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return iss
}

func TestContinueNotRepeatable(t *testing.T) {
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("order", "ord_7")
	fw, _ := mw.CreateFormFile("photo", "jacket.jpg")
	fw.Write([]byte("\xff\xd8 not really a jpeg"))
	mw.Close()

	tests := []struct {
		name, ctype, body, why string
	}{
		{"W63 multipart with a file", mw.FormDataContentType(), mp.String(), "it sent files"},
		{"bare LF would come back as CR LF", "application/x-www-form-urlencoded", "order=ord_7&note=a%0Ab", "unchanged"},
		{"invalid UTF-8", "application/x-www-form-urlencoded", "order=ord_7&note=%FF", "unchanged"},
		{"_charset_ is rewritten by browsers", "application/x-www-form-urlencoded", "order=ord_7&_charset_=x", "_charset_"},
		{"field without a name", "application/x-www-form-urlencoded", "order=ord_7&=x", "without a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
			r := e.request(joinedOut, tt.body, "text/html")
			r.Header.Set("Content-Type", tt.ctype)
			r.Header.Set("Referer", "http://example.com/orders/7?tab=1")
			rec := e.do(r)
			if rec.Code != 403 {
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			page := rec.Body.String()
			if _, _, _, ok := browserResubmit(t, page); ok {
				t.Errorf("offers a Continue form")
			}
			if !strings.Contains(page, "can&#39;t be repeated") && !strings.Contains(page, "can't be repeated") {
				t.Errorf("doesn't say it can't be repeated")
			}
			if !strings.Contains(html.UnescapeString(page), tt.why) {
				t.Errorf("reason %q missing", tt.why)
			}
			if !strings.Contains(page, `href="/orders/7?tab=1"`) {
				t.Errorf("no link back to the referring page")
			}
		})
	}
	t.Run("W62 GET gets a link", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		h := e.kit.Gate(func(r *http.Request) (Action, error) {
			return Action{Key: "k", Terms: map[string]any{"q": r.URL.Query().Get("q")}}, nil
		})(http.NotFoundHandler())
		r := httptest.NewRequest("GET", "//evil.example/x?q=%22%3E", nil)
		r.AddCookie(joinCookie(t, e.kit, sesOut))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), `id="opsgate-continue" href="/.//evil.example/x?q=%22%3E"`) {
			t.Errorf("%d %s", rec.Code, rec.Body)
		}
	})
	t.Run("foreign Referer links home", func(t *testing.T) {
		r := httptest.NewRequest("PUT", "/x", nil)
		r.Header.Set("Referer", "https://evil.example/phish")
		if c := continueOf(r, nil, ""); c.Back != "/" || c.Method != "" {
			t.Errorf("%+v", c)
		}
	})
}
