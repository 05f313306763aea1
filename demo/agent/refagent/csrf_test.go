package refagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/store"
)

// The names of the common libraries' CSRF fields are tokens; fields that
// only look alike are not.
func TestIsCSRFField(t *testing.T) {
	for _, name := range []string{
		"csrf_token",                  // justinas/nosurf
		"gorilla.csrf.Token",          // gorilla/csrf
		"authenticity_token",          // Rails
		"csrfmiddlewaretoken",         // Django
		"_csrf",                       // Express csurf, Spring
		"_csrf_token", "CSRF", "csrf", // Symfony, others
		"_token",                      // Laravel, Symfony
		"__RequestVerificationToken",  // ASP.NET
		"_xsrf", "xsrf", "XSRF-TOKEN", // Tornado, Angular
		"_wpnonce", "form_token", // WordPress, Drupal
		"meta.csrf_token", "meta._token", // JSON members
	} {
		if !IsCSRFField(name) {
			t.Errorf("%q is not treated as a CSRF token", name)
		}
	}
	for _, name := range []string{"replacement_sku", "token", "access_token", "date", "order_id", "tokens", "my_token", "path"} {
		if IsCSRFField(name) {
			t.Errorf("%q is treated as a CSRF token", name)
		}
	}
}

// A27: a CSRF token in the browser's request is not compared with the
// terms, and its value is shown nowhere: not in a difference, not in the
// question the user reads, not in the agent's log. Its name is.
func TestA27CSRFTokenIsNotATerm(t *testing.T) {
	const secret = "c2VjcmV0LXRva2VuLXZhbHVlLTEyMzQ1Njc4OTA="
	terms := json.RawMessage(`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`)
	for _, tc := range []struct{ name, body string }{
		{"nosurf", "csrf_token=" + secret + "&replacement_sku=stormline-insulated-m"},
		{"gorilla/csrf", "replacement_sku=stormline-insulated-m&gorilla.csrf.Token=" + secret},
		{"Rails", "authenticity_token=" + secret + "&replacement_sku=stormline-insulated-m"},
		{"JSON", `{"replacement_sku":"stormline-insulated-m","_csrf":"` + secret + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			a := newOffline(t, "http://127.0.0.1:1/")
			a.cfg.Log = &log
			r := &Reference{Method: "POST", URL: "http://shop.test/orders/ord_7Hk2/items/itm_4Qa/exchange", Body: []byte(tc.body)}
			op := store.Operation{ID: "op_1", Revision: "r1", Summary: "Exchange it for $70.00 more.", Terms: terms, ExpiresAt: time.Now().Add(time.Minute)}
			q := a.question(r, op)
			if len(q.Differences) != 0 {
				t.Errorf("the token is a difference: %v", q.Differences)
			}
			if len(q.CSRFFields) != 1 || !IsCSRFField(q.CSRFFields[0]) {
				t.Errorf("CSRFFields = %v, want the token's name", q.CSRFFields)
			}
			rule, _ := ParseRule("exchange<=100USD")
			var decided bytes.Buffer
			d, err := (&Standing{Rules: []Rule{rule}, Log: &decided}).Decide(t.Context(), q)
			if err != nil || !d.Approve || d.Approver != store.ApproverAgent {
				t.Errorf("the standing instruction did not approve: %+v, %v\n%s", d, err, decided.String())
			}
			shown := q.Text() + log.String() + decided.String()
			if strings.Contains(shown, secret) {
				t.Errorf("the token's value is shown:\n%s", shown)
			}
			if !strings.Contains(q.Text(), "Not compared with the terms: "+strings.Join(q.CSRFFields, ", ")+" (CSRF token, value not shown)") || len(q.CSRFFields) == 0 {
				t.Errorf("the question doesn't name the token:\n%s", q.Text())
			}
		})
	}
	t.Run("other fields are still compared", func(t *testing.T) {
		r := &Reference{Method: "POST", URL: "http://shop.test/orders/ord_7Hk2/items/itm_4Qa/exchange", Body: []byte("csrf_token=" + secret + "&replacement_sku=stormline-insulated-l")}
		d, tokens := checkAction(r, terms)
		if len(d) != 1 || !strings.Contains(d[0], "stormline-insulated-l") || strings.Contains(d[0], secret) || len(tokens) != 1 {
			t.Errorf("differences %v, tokens %v", d, tokens)
		}
	})
}

// A rule's kind is a word of the request's path, singular or plural;
// one that matches nothing says which kinds the request had.
func TestA24RuleKind(t *testing.T) {
	delivery := Question{
		Operation:       store.Operation{ID: "op_d", Revision: "r1", Terms: json.RawMessage(`{"delivery_id":"del_2Wn8","new_date":"2026-11-07","fee":{"amount":"0.00","currency":"USD"}}`), ExpiresAt: time.Now().Add(time.Minute)},
		Action:          "POST http://shop.test/api/deliveries/del_2Wn8",
		AgentMayApprove: true,
	}
	for _, rule := range []string{"delivery<=10USD", "deliveries<=10USD", "delivery"} {
		r, _ := ParseRule(rule)
		if d, _ := (&Standing{Rules: []Rule{r}}).Decide(t.Context(), delivery); !d.Approve {
			t.Errorf("%s did not cover POST /api/deliveries/del_2Wn8", rule)
		}
	}
	r, _ := ParseRule("exchange<=10USD")
	var log bytes.Buffer
	if d, _ := (&Standing{Rules: []Rule{r}, Log: &log}).Decide(t.Context(), delivery); d.Approve {
		t.Fatal("exchange<=10USD covered a delivery")
	}
	if want := `"exchange<=10USD" is for the kind "exchange"; this request (POST http://shop.test/api/deliveries/del_2Wn8) is of the kind api, deliveries`; !strings.Contains(log.String(), want) {
		t.Errorf("the log doesn't say which kinds the request had:\n%s\nwant %q", log.String(), want)
	}
	for path, want := range map[string]string{"/orders/ord_7Hk2/items/itm_4Qa/exchange": "orders items exchange", "/account/subscription/cancel": "account subscription cancel", "/": ""} {
		if got := strings.Join(Kinds(path), " "); got != want {
			t.Errorf("Kinds(%q) = %q, want %q", path, got, want)
		}
	}
}

// chromium starts a headless Chromium for the test and returns a tab.
func chromium(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	const chromiumPath = "/usr/bin/chromium"
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()))...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return tab
}

// syncBuffer is a log written by the agent's goroutines and read by the
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Through a real Chromium and the demo shop: the exchange form carries a
// hidden csrf_token, as a site behind nosurf renders it; the browser
// sends it, the standing instruction still approves (A24, A27), the shop
// performs the exchange, and the token's value is nowhere in the agent's
// output.
func TestA27CSRFTokenInChromium(t *testing.T) {
	tab := chromium(t)
	shopURL := joinShop(t)
	var log syncBuffer
	a := agentFor(t, Config{Shop: shopURL, Browser: tab, StepTimeout: 20 * time.Second, Log: &log})
	if _, err := a.Join(t.Context(), JoinOptions{}); err != nil {
		t.Fatal(err)
	}
	const secret = "bm9zdXJmLXRva2VuLXZhbHVlLTk4NzY1NDMyMTA="
	err := chromedp.Do(tab,
		chromedp.Navigate(shopURL+"/orders/ord_7Hk2"),
		chromedp.Evaluate[chromedp.Void](`(() => {
	const f = document.querySelector('form[action="/orders/ord_7Hk2/items/itm_4Qa/exchange"]');
	const i = document.createElement("input");
	i.type = "hidden"; i.name = "csrf_token"; i.value = `+jsString(secret)+`;
	f.prepend(i);
})()`),
		chromedp.SetValue(chromedp.ID("replacement-itm_4Qa"), "stormline-insulated-m", chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(`form[action="/orders/ord_7Hk2/items/itm_4Qa/exchange"] button`), chromedp.NodeVisible),
	)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := ParseRule("exchange<=100USD")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := a.Approve(ctx, &Standing{Rules: []Rule{r}, Log: &log})
	if err != nil {
		t.Fatalf("Approve: %v\n%s", err, log.String())
	}
	if out.Result != Performed || len(out.Asked) != 1 || len(out.Asked[0].Differences) != 0 || strings.Join(out.Asked[0].CSRFFields, ",") != "csrf_token" {
		t.Fatalf("result %s, asked %+v\n%s", out.Result, out.Asked, log.String())
	}
	if refs := a.References(); len(refs) == 0 || !strings.Contains(string(refs[0].Body), "csrf_token=") {
		t.Fatalf("the browser's request did not carry the token: %+v", refs)
	}
	if strings.Contains(log.String(), secret) {
		t.Errorf("the agent printed the token's value:\n%s", log.String())
	}
	if !strings.Contains(log.String(), "not comparing csrf_token with the terms: CSRF token field(s), values not shown") {
		t.Errorf("the log doesn't name the token field:\n%s", log.String())
	}
}

// The demo drivers name what the page offers when the action asks for
// something it doesn't: a SKU, an item, a delivery, a date.
func TestDemoDriversListOffered(t *testing.T) {
	tab := chromium(t)
	shopURL := joinShop(t)
	run := func(f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		return f(ctx)
	}
	today := time.Now().UTC() // the shop's days are UTC (shopdb.Day)
	for _, tc := range []struct {
		name string
		do   func(context.Context) error
		want []string
	}{
		{"a SKU the page doesn't offer", func(ctx context.Context) error {
			return ExchangeItem(ctx, shopURL, "ord_7Hk2", "itm_4Qa", "stormline-xxl")
		}, []string{`can't be exchanged for "stormline-xxl": the page doesn't offer it; the page offers: stormline-insulated-m (Stormline Insulated Jacket (M), $70.00 more), `, "stormline-l ("}},
		{"the item's current SKU", func(ctx context.Context) error {
			return ExchangeItem(ctx, shopURL, "ord_7Hk2", "itm_4Qa", "stormline-m")
		}, []string{`"stormline-m": it is the item's current SKU; the page offers: stormline-insulated-m`}},
		{"an item the order doesn't have", func(ctx context.Context) error {
			return ExchangeItem(ctx, shopURL, "ord_7Hk2", "itm_nope", "stormline-l")
		}, []string{"order ord_7Hk2 has no item itm_nope that can be exchanged; its exchangeable items: itm_4Qa"}},
		{"a delivery the page doesn't show", func(ctx context.Context) error {
			return ChangeDeliveryDate(ctx, shopURL, "del_nope", today.AddDate(0, 0, 5).Format("2006-01-02"))
		}, []string{"the deliveries page has no delivery del_nope; the deliveries on it: del_2Wn8"}},
		{"a date after the last one offered", func(ctx context.Context) error {
			return ChangeDeliveryDate(ctx, shopURL, "del_2Wn8", today.AddDate(0, 0, 40).Format("2006-01-02"))
		}, []string{"delivery del_2Wn8 can't be moved to " + today.AddDate(0, 0, 40).Format("2006-01-02") + ": the page offers the dates from " + today.AddDate(0, 0, 1).Format("2006-01-02") + " to " + today.AddDate(0, 0, 30).Format("2006-01-02")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.do)
			if !errors.Is(err, ErrNotOnPage) {
				t.Fatalf("err = %v, want ErrNotOnPage", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nlacks %q", err, w)
				}
			}
		})
	}
	if err := run(func(ctx context.Context) error { return ChangeDeliveryDate(ctx, shopURL, "del_2Wn8", "2026-13-01") }); err == nil || errors.Is(err, ErrNotOnPage) || !strings.Contains(err.Error(), "YYYY-MM-DD") {
		t.Errorf("a date that is no day: %v", err)
	}
}
