package gateway

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/webkit/webkittest"
)

// shop is an upstream that imports nothing of the kit: a plain net/http
// website that counts what its handlers did.
type shop struct {
	srv        *httptest.Server
	exchanges  atomic.Int32 // exchanges performed
	deliveries atomic.Int32 // delivery dates moved
	attempts   atomic.Int32 // exchange requests that reached the handler

	mu   sync.Mutex
	seen []http.Header // the headers of each request the shop got
}

func newShop(t *testing.T) *shop {
	s := &shop{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{order}/exchange", func(w http.ResponseWriter, r *http.Request) {
		s.attempts.Add(1)
		switch size := r.PostFormValue("size"); size {
		case "XXL":
			http.Error(w, "we have no XXL", http.StatusUnprocessableEntity)
		case "BOOM":
			http.Error(w, "database on fire", http.StatusInternalServerError)
		default:
			s.exchanges.Add(1)
			http.SetCookie(w, &http.Cookie{Name: "flash", Value: "exchanged", Path: "/"})
			fmt.Fprintf(w, "exchanged order %s for size %s", r.PathValue("order"), size)
		}
	})
	mux.HandleFunc("POST /api/deliveries/{order}", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Date string }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Date == "" {
			http.Error(w, `{"error":"date is required"}`, http.StatusBadRequest)
			return
		}
		s.deliveries.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"delivery":%q}`, req.Date)
	})
	mux.HandleFunc("GET /orders", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "your orders")
	})
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "_shop_session", Value: "staff-7", Path: "/"})
		fmt.Fprint(w, "signed in")
	})
	mux.HandleFunc("GET /.well-known/poppy.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"Upstream's name","apis":[{"url":"https://shop.example/api"}],"extensions":{"loyalty":[{"version":"1"}]},"web":{"login":"https://shop.example/login"}}`)
	})
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Header.Clone())
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// lastHeader is the headers of the last request the shop got.
func (s *shop) lastHeader() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		return nil
	}
	return s.seen[len(s.seen)-1]
}

const shopConfig = `
origin: https://shop.example
upstream: UPSTREAM
name: Ridgeline Outfitters
store: memory
cookie_keys:
  - hash_env: GW_TEST_HASH
    encryption_env: GW_TEST_ENC
own_login_cookies: [_shop_session]
chrome:
  stylesheets: [/assets/site.css]
  header: '<header class="site-header">Ridgeline masthead</header>'
  footer: '<footer class="site-footer">Ridgeline footer</footer>'
actions:
  - match: POST /orders/{order}/exchange
    key: "exchange:{path.order}"
    terms:
      order_id: "{path.order}"
      size: "{form.size}"
      price_difference: {amount: "0.00", currency: USD}
    summary: "Exchange the jacket on order {path.order} for size {form.size}."
    lifetime: 5m
    kind: exchange
  - match: POST /api/deliveries/{order}
    key: "delivery:{path.order}"
    terms:
      order_id: "{path.order}"
      date: "{json.date}"
      window: "{json.slot.window}"
      guests: "{json.guests}"
    summary: "Move the delivery of order {path.order} to {json.date} ({json.slot.window})."
    kind: delivery
`

// setKeys puts cookie keys in the environment variables the configs name.
func setKeys(t testing.TB) {
	t.Setenv("GW_TEST_HASH", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("h", 32))))
	t.Setenv("GW_TEST_ENC", base64.StdEncoding.EncodeToString([]byte(strings.Repeat("e", 32))))
}

// startGateway runs the gateway for config (UPSTREAM replaced by up's URL) in
// front of up, as webkittest's site: its agents and browsers reach the
// gateway in-process, and the gateway reaches the upstream over TCP.
func startGateway(t *testing.T, config, upstream string) *webkittest.Site {
	t.Helper()
	setKeys(t)
	c, err := Parse("gateway.yaml", []byte(strings.ReplaceAll(config, "UPSTREAM", upstream)))
	if err != nil {
		t.Fatal(err)
	}
	site := webkittest.New("https://shop.example")
	g, err := newGateway(c, slog.New(slog.DiscardHandler), options{
		Resolver:     site.Resolver(),
		AccessTokens: site.AccessTokens(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	site.Handler = g
	return site
}

func join(t *testing.T, site *webkittest.Site) (*webkittest.Session, *webkittest.Browser) {
	t.Helper()
	s := site.NewAgent().Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// The whole flow through the gateway in front of a website that knows
// nothing of it: 403 and the waiting page, approval, Continue performs once.
func TestGatewayFlow(t *testing.T) {
	up := newShop(t)
	site := startGateway(t, shopConfig, up.srv.URL)

	t.Run("W07 an ordinary browser goes straight to the upstream", func(t *testing.T) {
		res := site.Browser().PostForm("/orders/ord_1/exchange", url.Values{"size": {"M"}})
		if res.Err != nil || res.StatusCode != 200 || string(res.Body) != "exchanged order ord_1 for size M" {
			t.Fatalf("%d %q %v", res.StatusCode, res.Body, res.Err)
		}
		if up.exchanges.Load() != 1 {
			t.Fatalf("exchanges = %d, want 1", up.exchanges.Load())
		}
	})

	t.Run("routes no action matches are proxied untouched", func(t *testing.T) {
		_, b := join(t, site)
		res := b.Get("/orders")
		if res.StatusCode != 200 || string(res.Body) != "your orders" {
			t.Fatalf("%d %q", res.StatusCode, res.Body)
		}
		h := up.lastHeader()
		if got := h.Get("X-Forwarded-Host"); got != "shop.example" {
			t.Errorf("X-Forwarded-Host = %q", got)
		}
		if got := h.Get("X-Forwarded-Proto"); got != "https" {
			t.Errorf("X-Forwarded-Proto = %q", got)
		}
		// The join's cookie is the gateway's credential, never the upstream's.
		if c := h.Get("Cookie"); strings.Contains(c, "opsgate_") {
			t.Errorf("the upstream got the gateway's cookie: %q", c)
		}
	})

	t.Run("W53 W62 W96 a joined browser waits, then Continue performs once", func(t *testing.T) {
		before := up.exchanges.Load()
		s, b := join(t, site)
		res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
		if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Ref == "" {
			t.Fatalf("%d ref %q %v", res.StatusCode, res.Ref, res.Err)
		}
		if up.exchanges.Load() != before || up.attempts.Load() != 1 {
			t.Fatal("the upstream was reached before approval")
		}
		// W65 the waiting page, in the site's own chrome.
		page := string(res.Body)
		for _, want := range []string{"Ridgeline masthead", "Ridgeline footer", `href="/assets/site.css"`, `/_opsgate/opsgate.css`} {
			if !strings.Contains(page, want) {
				t.Errorf("the waiting page lacks %q", want)
			}
		}
		look := s.Lookup(res.Ref)
		if look.Operation == nil || look.Operation.Summary != "Exchange the jacket on order ord_7 for size L." {
			t.Fatalf("lookup: %+v", look)
		}
		var terms map[string]any
		json.Unmarshal(look.Operation.Terms, &terms)
		if terms["order_id"] != "ord_7" || terms["size"] != "L" || terms["price_difference"].(map[string]any)["currency"] != "USD" {
			t.Errorf("terms = %s", look.Operation.Terms)
		}
		if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
			t.Fatalf("approve: %d %s", a.StatusCode, a.Body)
		}
		again := res.Continue()
		if again.Err != nil || again.StatusCode != 200 || string(again.Body) != "exchanged order ord_7 for size L" {
			t.Fatalf("continue: %d %q %v", again.StatusCode, again.Body, again.Err)
		}
		if !strings.Contains(strings.Join(again.Header.Values("Set-Cookie"), "\n"), "flash=exchanged") {
			t.Errorf("the upstream's Set-Cookie did not reach the browser: %v", again.Header)
		}
		for _, r := range res.ContinueConcurrently(4) {
			if r.StatusCode == 200 {
				t.Error("performed again")
			}
		}
		if got := up.exchanges.Load() - before; got != 1 {
			t.Fatalf("performed %d times, want 1", got)
		}
		if st := s.Lookup(res.Ref).OperationStatus; st != "performed" {
			t.Errorf("status %q, want performed", st)
		}
	})

	t.Run("W98 a 4xx from the upstream is not performed", func(t *testing.T) {
		s, b := join(t, site)
		res := b.PostForm("/orders/ord_8/exchange", url.Values{"size": {"XXL"}})
		s.Approve(res.Ref)
		attempts := up.attempts.Load()
		again := res.Continue()
		if again.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(again.Body), "no XXL") {
			t.Fatalf("continue: %d %q", again.StatusCode, again.Body)
		}
		if up.attempts.Load() != attempts+1 {
			t.Fatal("the approved repeat did not reach the upstream once")
		}
		// The approval is used up: repeating asks for approval again.
		if r := res.Continue(); r.StatusCode != http.StatusForbidden || up.attempts.Load() != attempts+1 {
			t.Fatalf("repeat after a 4xx: %d, attempts %d", r.StatusCode, up.attempts.Load()-attempts)
		}
	})

	t.Run("W142 W143 a 5xx from the upstream is an unknown outcome, never a failure", func(t *testing.T) {
		s, b := join(t, site)
		res := b.PostForm("/orders/ord_9/exchange", url.Values{"size": {"BOOM"}})
		s.Approve(res.Ref)
		again := res.Continue()
		if again.StatusCode != http.StatusServiceUnavailable || again.Header.Get("Retry-After") == "" {
			t.Fatalf("continue: %d %v", again.StatusCode, again.Header)
		}
		if strings.Contains(string(again.Body), "database on fire") {
			t.Error("the upstream's failure reached the browser as if the action failed")
		}
	})

	t.Run("W56 a browser with the site's own login performs no gated action by default", func(t *testing.T) {
		_, b := join(t, site)
		if r := b.Get("/login"); r.StatusCode != 200 { // the upstream's Set-Cookie passes through
			t.Fatalf("login: %d", r.StatusCode)
		}
		before := up.exchanges.Load()
		res := b.PostForm("/orders/ord_10/exchange", url.Values{"size": {"S"}})
		if res.StatusCode != http.StatusForbidden || res.Ref != "" || up.exchanges.Load() != before {
			t.Fatalf("%d ref %q, upstream exchanges %d → %d", res.StatusCode, res.Ref, before, up.exchanges.Load())
		}
		if !strings.Contains(string(res.Body), "Confirm on the site") {
			t.Errorf("the page doesn't say to confirm on the website: %.300s", res.Body)
		}
	})

	t.Run("JSON body fields build the terms, and a script gets JSON", func(t *testing.T) {
		s, b := join(t, site)
		res := b.PostJSON("/api/deliveries/ord_11", `{"date":"2026-12-24","slot":{"window":"9-12"},"guests":2}`)
		if res.StatusCode != http.StatusForbidden || res.Ref == "" || !strings.Contains(string(res.Body), "approval_required") {
			t.Fatalf("%d %q", res.StatusCode, res.Body)
		}
		look := s.Lookup(res.Ref)
		if look.Operation == nil || look.Operation.Summary != "Move the delivery of order ord_11 to 2026-12-24 (9-12)." {
			t.Fatalf("lookup: %+v", look)
		}
		// A single placeholder keeps its JSON type: guests is the number 2.
		if got := string(look.Operation.Terms); !strings.Contains(got, `"guests":2`) || !strings.Contains(got, `"window":"9-12"`) {
			t.Errorf("terms = %s", got)
		}
		s.Approve(res.Ref)
		again := b.Again()
		if again.StatusCode != 200 || string(again.Body) != `{"delivery":"2026-12-24"}` || up.deliveries.Load() != 1 {
			t.Fatalf("again: %d %q, deliveries %d", again.StatusCode, again.Body, up.deliveries.Load())
		}
	})
}

// W02 W04 poppy.json is the upstream's own with the kit's members merged
// in, the kit's winning.
func TestGatewayPoppyJSON(t *testing.T) {
	up := newShop(t)
	site := startGateway(t, shopConfig, up.srv.URL)
	res := site.Browser().Get("/.well-known/poppy.json")
	var doc struct {
		Name       string
		APIs       []map[string]string `json:"apis"`
		Extensions map[string][]map[string]string
		Web        map[string]string
	}
	if err := json.Unmarshal(res.Body, &doc); err != nil {
		t.Fatalf("%d %s: %v", res.StatusCode, res.Body, err)
	}
	if doc.Name != "Ridgeline Outfitters" || len(doc.APIs) != 1 || len(doc.Extensions["loyalty"]) != 1 {
		t.Errorf("the upstream's members are lost: %s", res.Body)
	}
	ops := doc.Extensions["operations"]
	if len(ops) != 1 || ops[0]["version"] != "3" || ops[0]["endpoint"] != "https://shop.example/poppy/operations" {
		t.Errorf("operations entry: %s", res.Body)
	}
	if doc.Web["browser_session_endpoint"] != "https://shop.example/poppy/join" || doc.Web["login"] != "https://shop.example/login" {
		t.Errorf("web: %s", res.Body)
	}

	// An upstream without one: the kit's document alone.
	bare := httptest.NewServer(http.NotFoundHandler())
	defer bare.Close()
	site = startGateway(t, shopConfig, bare.URL)
	res = site.Browser().Get("/.well-known/poppy.json")
	if res.StatusCode != 200 || !strings.Contains(string(res.Body), `"browser_session_endpoint": "https://shop.example/poppy/join"`) {
		t.Errorf("%d %s", res.StatusCode, res.Body)
	}
}

// An approved repeat whose upstream can't be reached performed nothing:
// the browser gets 502, and the approval is spent as not performed.
func TestGatewayUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	site := startGateway(t, shopConfig, addr)
	s, b := join(t, site)
	res := b.PostForm("/orders/ord_1/exchange", url.Values{"size": {"L"}})
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("%d", res.StatusCode)
	}
	s.Approve(res.Ref)
	if again := res.Continue(); again.StatusCode != http.StatusBadGateway {
		t.Fatalf("continue: %d %s", again.StatusCode, again.Body)
	}
	if look := s.Lookup(res.Ref); look.OperationStatus == "performed" || look.OperationStatus == "performing" {
		t.Errorf("status %q: a refused connection performed nothing", look.OperationStatus)
	}
}

// W56 own_login_flow: upstream says the website confirms each gated action
// with a person signed in to its own login itself: such a browser's request
// goes straight to the upstream, unapproved, as the website asked.
func TestOwnLoginFlowUpstream(t *testing.T) {
	up := newShop(t)
	site := startGateway(t, shopConfig+"own_login_flow: upstream\n", up.srv.URL)
	_, b := join(t, site)
	if r := b.Get("/login"); r.StatusCode != 200 {
		t.Fatalf("login: %d", r.StatusCode)
	}
	before := up.exchanges.Load()
	res := b.PostForm("/orders/ord_10/exchange", url.Values{"size": {"S"}})
	if res.StatusCode != 200 || res.Ref != "" || up.exchanges.Load() != before+1 {
		t.Fatalf("%d ref %q", res.StatusCode, res.Ref)
	}
}
