package webkit

import (
	"bytes"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	xhtml "golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/pages"
)

// htmx and Turbo show a fragment of the page, not a page: the Gate
// answers their requests with the waiting card in their own terms, still
// 403 with Poppy-Operation and never stored (W53, W65, W68), and its
// Continue is the framework's request, which carries the page's headers
// (W62). Issue 35.

// frameworkRequest is a joined browser's gated POST as htmx 2 (no
// Accept: XHR's */*), htmx 4 (Accept: text/html) or Turbo sends it.
func frameworkRequest(t *testing.T, e *gateEnv, framework, form string) *http.Request {
	t.Helper()
	r := e.request(joinedOut, form, "")
	r.Header.Set("Sec-Fetch-Dest", "empty")
	r.Header.Set("Sec-Fetch-Mode", "cors")
	switch framework {
	case "htmx2":
		r.Header.Set("HX-Request", "true")
		r.Header.Set("HX-Target", "result")
		r.Header.Set("Accept", "*/*")
	case "htmx4":
		r.Header.Set("HX-Request", "true")
		r.Header.Set("HX-Source", "button#go")
		r.Header.Set("Accept", "text/html")
	case "turbo":
		r.Header.Set("Accept", "text/vnd.turbo-stream.html, text/html, application/xhtml+xml")
	default:
		t.Fatalf("framework %q", framework)
	}
	return r
}

// card parses a framework answer's card: the <section> (or the element
// the stream's template holds), its Continue and its fields.
type parsedCard struct {
	section  *xhtml.Node
	control  *xhtml.Node
	fields   [][2]string
	stream   *xhtml.Node // Turbo's <turbo-stream>
	overlaid bool
}

func parseCard(t *testing.T, body string) parsedCard {
	t.Helper()
	nodes, err := xhtml.ParseFragment(strings.NewReader(body), &xhtml.Node{Type: xhtml.ElementNode, Data: "body", DataAtom: atom.Body})
	if err != nil {
		t.Fatal(err)
	}
	var c parsedCard
	var walk func(n *xhtml.Node)
	walk = func(n *xhtml.Node) {
		if n.Type == xhtml.ElementNode {
			switch {
			case n.Data == "turbo-stream":
				c.stream = n
			case n.Data == "div" && attr(n, "class") == "opsgate-overlay":
				c.overlaid = true
			case n.Data == "section" && strings.Contains(attr(n, "class"), "opsgate-card"):
				c.section = n
			case hasAttr(n, "data-opsgate-continue"):
				c.control = n
			case n.Data == "input" && c.control != nil:
				c.fields = append(c.fields, [2]string{attr(n, "name"), attr(n, "value")})
			}
		}
		for k := n.FirstChild; k != nil; k = k.NextSibling {
			walk(k)
		}
	}
	for _, n := range nodes {
		walk(n)
	}
	return c
}

func hasAttr(n *xhtml.Node, key string) bool {
	for _, a := range n.Attr {
		if a.Key == key {
			return true
		}
	}
	return false
}

func TestFrameworkAnswers(t *testing.T) {
	for _, fw := range []string{"htmx2", "htmx4", "turbo"} {
		t.Run("W53 W65 W68 "+fw+" gets the card in its own terms", func(t *testing.T) {
			e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
			r := frameworkRequest(t, e, fw, "order=ord_7&size=L&csrf_token=tok")
			r.Header.Set("X-CSRF-Token", "header-secret")
			rec := e.do(r)
			body := rec.Body.String()
			if rec.Code != http.StatusForbidden || len(rec.Header().Values("Poppy-Operation")) != 1 {
				t.Fatalf("%d, Poppy-Operation %q\n%s", rec.Code, rec.Header().Values("Poppy-Operation"), body)
			}
			if rec.Header().Get("Cache-Control") != "no-store" {
				t.Errorf("W68: Cache-Control %q", rec.Header().Get("Cache-Control"))
			}
			if e.runs.Load() != 0 {
				t.Fatalf("W33: the handler ran")
			}
			for _, not := range []string{"<html", "<head", "<body", "<main", ` id="`, "header-secret", "ses_", "opr_"} {
				if strings.Contains(body, not) {
					t.Errorf("the card contains %q: a fragment of the page has no page, no ids (two cards can share a page), no token, no operation (W64)\n%s", not, body)
				}
			}
			c := parseCard(t, body)
			if c.section == nil || c.control == nil {
				t.Fatalf("no card or no Continue:\n%s", body)
			}
			status := rec.Header().Get(statusHeader)
			if status == "" || attr(c.section, "data-opsgate-status") != status {
				t.Errorf("W93: %s %q, the card's status route %q: card.js finds the card by it", statusHeader, status, attr(c.section, "data-opsgate-status"))
			}
			want := [][2]string{{"order", "ord_7"}, {"size", "L"}, {"csrf_token", "tok"}}
			if len(c.fields) != len(want) {
				t.Fatalf("W62: the Continue's fields %q, want %q", c.fields, want)
			}
			for i := range want {
				if c.fields[i] != want[i] {
					t.Errorf("W62: field %d is %q, want %q", i, c.fields[i], want[i])
				}
			}
			switch fw {
			case "htmx2", "htmx4":
				if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
					t.Errorf("Content-Type %q", ct)
				}
				if rec.Header().Get("HX-Reselect") != ".opsgate-card" {
					t.Errorf("HX-Reselect %q: an element's hx-select would drop the card", rec.Header().Get("HX-Reselect"))
				}
				if !strings.HasPrefix(body, `<section class="opsgate-card`) || c.stream != nil {
					t.Errorf("htmx gets the card itself:\n%s", body)
				}
				if attr(c.section, "data-opsgate-via") != "htmx" || attr(c.control, "hx-post") != "/exchange" ||
					attr(c.control, "hx-target") != "closest .opsgate-card" || attr(c.control, "hx-swap") != "outerHTML" || hasAttr(c.control, "action") {
					t.Errorf("W62: the htmx card's Continue must be htmx's own request, never a plain form: %s", body)
				}
			case "turbo":
				if ct := rec.Header().Get("Content-Type"); ct != "text/vnd.turbo-stream.html; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				if c.stream == nil || attr(c.stream, "action") != "append" || attr(c.stream, "targets") != "body" || !c.overlaid {
					t.Errorf("a Turbo request from no frame gets the card appended over the page:\n%s", body)
				}
				if attr(c.section, "data-opsgate-via") != "turbo" || attr(c.control, "method") != "post" || attr(c.control, "action") != "/exchange" {
					t.Errorf("W62: the Turbo card's Continue is a form Turbo submits: %s", body)
				}
			}

			// Once approved, the same request again (what card.js sends)
			// performs once.
			e.approve(sesOut, "ord_7", "L")
			r2 := frameworkRequest(t, e, fw, "order=ord_7&size=L&csrf_token=tok")
			if rec := e.do(r2); rec.Code != 200 || e.runs.Load() != 1 {
				t.Errorf("W97: the repeat got %d, the handler ran %d times", rec.Code, e.runs.Load())
			}
		})
	}

	t.Run("W62 Turbo frame: the card replaces the frame's content", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		r := frameworkRequest(t, e, "turbo", "order=ord_7&size=L")
		r.Header.Set("Turbo-Frame", `exchange"><script>x</script>`)
		rec := e.do(r)
		body := rec.Body.String()
		c := parseCard(t, body)
		if c.stream == nil || attr(c.stream, "action") != "update" || attr(c.stream, "target") != `exchange"><script>x</script>` || c.overlaid {
			t.Errorf("a frame's request: update the frame:\n%s", body)
		}
		if strings.Contains(body, "<script>") {
			t.Errorf("the frame's id is not escaped:\n%s", body)
		}
	})

	t.Run("W62 htmx DELETE and PUT repeat with their method", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		h := e.kit.Gate(func(r *http.Request) (Action, error) {
			r.ParseForm()
			return Action{Key: "k:" + r.Form.Get("id"), Terms: map[string]any{"id": r.Form.Get("id"), "m": r.Method}}, nil
		})(http.NotFoundHandler())
		for _, tc := range []struct{ method, target, body, attr, action string }{
			{"DELETE", "/items?id=it_1", "", "hx-delete", "/items?id=it_1"},
			{"PUT", "/items", "id=it_2", "hx-put", "/items"},
		} {
			r := httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("HX-Request", "true")
			r.AddCookie(joinCookie(t, e.kit, sesOut))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			c := parseCard(t, rec.Body.String())
			if rec.Code != 403 || c.control == nil || attr(c.control, tc.attr) != tc.action {
				t.Errorf("%s: %d %s", tc.method, rec.Code, rec.Body)
			}
		}
	})

	t.Run("W62 a CSRF token in a header: no plain form, and the log names the fix", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		var logs bytes.Buffer
		e.kit.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		for _, h := range []string{"X-CSRF-Token", "X-XSRF-TOKEN", "X-CSRFToken", "RequestVerificationToken"} {
			logs.Reset()
			r := e.request(joinedOut, "order=ord_7&size=L", "text/html")
			r.Header.Set(h, "header-secret")
			rec := e.do(r)
			page := rec.Body.String()
			if rec.Code != 403 || strings.Contains(page, `id="opsgate-continue"`) {
				t.Errorf("%s: a plain Continue form would lose the header: %d\n%s", h, rec.Code, page)
			}
			if want := "carried its CSRF token in the " + http.CanonicalHeaderKey(h) + " header, which a form can't send"; !strings.Contains(html.UnescapeString(page), want) {
				t.Errorf("%s: the page doesn't say %q", h, want)
			}
			log := logs.String()
			for _, want := range []string{"level=WARN", "opsgate.fetch", "/_opsgate/card.js", "put the token in the form's fields", "path=/exchange"} {
				if !strings.Contains(log, want) {
					t.Errorf("%s: the log lacks %q: %s", h, want, log)
				}
			}
			if strings.Contains(log, "header-secret") {
				t.Errorf("the log carries the token: %s", log)
			}
		}
		// A script that accepts JSON gets JSON, and no warning: opsgate.fetch repeats it.
		logs.Reset()
		r := e.request(joinedOut, "order=ord_8&size=L", "application/json")
		r.Header.Set("X-CSRF-Token", "header-secret")
		if rec := e.do(r); rec.Code != 403 || !strings.Contains(rec.Body.String(), "approval_required") || logs.Len() != 0 {
			t.Errorf("JSON: %d %s; log %s", rec.Code, rec.Body, logs.String())
		}
	})

	t.Run("W143 htmx and Turbo get a notice as a card", func(t *testing.T) {
		e := newGateEnv(t, storedriver.AsStore(failingStore{memstore.New(memstore.Config{}).Steps()}), newClock())
		for _, fw := range []string{"htmx2", "turbo"} {
			rec := e.do(frameworkRequest(t, e, fw, "order=ord_7&size=L"))
			body := rec.Body.String()
			if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || !strings.Contains(body, `<section class="opsgate-card opsgate-fragment" data-opsgate-notice>`) || strings.Contains(body, "<html") {
				t.Errorf("%s: %d %q\n%s", fw, rec.Code, rec.Header(), body)
			}
		}
	})

	t.Run("a website's own Refused gets the framework in the view", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		var got string
		e.kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, _ := pages.WaitingOf(r)
			got = v.Framework
			e.kit.Refuse(w, r)
		})
		e.h = e.kit.Gate(exchangeDescribe)(http.NotFoundHandler())
		rec := e.do(frameworkRequest(t, e, "htmx2", "order=ord_7&size=L"))
		if got != "htmx" || rec.Code != 403 || !strings.HasPrefix(rec.Body.String(), `<section class="opsgate-card`) {
			t.Errorf("framework %q, %d %s", got, rec.Code, rec.Body)
		}
	})
}
