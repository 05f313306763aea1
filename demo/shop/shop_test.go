package shop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// clock is the tests' clock (internal/testclock): it moves only when told.
type clock = testclock.Clock

// t0 is when the shop's tests start.
var t0 = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.DiscardHandler)

func newTestServer(t *testing.T) (*Server, *clock) {
	t.Helper()
	c := testclock.At(t0)
	s, err := NewServer(Config{BaseURL: "http://shop.test", Clock: c.Now, AllowLocal: true, Logger: quiet, CustomerPassword: testPassword, StaffCredential: testStaff})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// do sends a request to the shop with cookies, and returns the response and its body.
func do(t *testing.T, s *Server, method, target string, body io.Reader, header http.Header, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	r := httptest.NewRequest(method, target, body)
	for k, v := range header {
		r.Header[k] = v
	}
	for _, c := range cookies {
		r.AddCookie(c)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var formHeader = http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
var jsonHeader = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}

func exchangeForm(sku string) io.Reader {
	return strings.NewReader(url.Values{"replacement_sku": {sku}}.Encode())
}

func TestPagesRenderSeededData(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{"Ridgeline Outfitters", "Stormline Jacket", "Stormline Insulated Jacket", "from $190.00"}},
		{"/products/stormline-insulated", []string{"Stormline Insulated Jacket", "stormline-insulated-m", "$190.00"}},
		{"/account", []string{"Jordan Rivera", "Order ord_7Hk2", "Stormline Jacket (M)", "Trail Box, monthly", "Active"}},
		{"/orders/ord_7Hk2", []string{"Order ord_7Hk2", "itm_4Qa", "Stormline Jacket (M)", `name="replacement_sku"`, "Stormline Insulated Jacket (M), $70.00 more", `action="/orders/ord_7Hk2/items/itm_4Qa/exchange"`}},
		{"/account/subscription", []string{"sub_5Kd1", "Trail Box, monthly", "Only the account holder can cancel"}},
		{"/deliveries", []string{"del_2Wn8", "ord_9Lm3", "Monday, 12 October 2026", "/_opsgate/fetch.js", "/static/deliveries.js"}},
		{"/static/shop.css", []string{".masthead"}},
		{"/static/deliveries.js", []string{"opsgate.fetch", "Waiting for approval in your agent"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res, body := do(t, s, "GET", tc.path, nil, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", tc.path, res.StatusCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s: body lacks %q", tc.path, w)
				}
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("GET %s: CSP %q", tc.path, csp)
			}
		})
	}
	for _, p := range []string{"/orders/ord_nope", "/products/nope"} {
		if res, _ := do(t, s, "GET", p, nil, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, res.StatusCode)
		}
	}
}

func TestHumanExchangesDirectly(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	// A visitor with neither an agent nor the shop's login changes nothing
	// in the copy every such visitor sees (issue 37: `agent check` once
	// exchanged the jacket there).
	res, body := do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-m"), formHeader)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "Sign in to exchange") {
		t.Fatalf("a visitor's exchange: %d, want 403 with a sign-in", res.StatusCode)
	}
	if o, _ := s.DB().Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Fatal("a visitor changed the shared copy")
	}
	// A person signs in and confirms it (the shop's own flow, W56).
	login := signIn(t, s)
	res, _ = do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-m"), formHeader, login)
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/confirm?") {
		t.Fatalf("a person's exchange: %d to %q, want 303 to the confirmation", res.StatusCode, res.Header.Get("Location"))
	}
	res = confirmWith(t, s, res.Header.Get("Location"), testPassword, login)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm: %d, want 303", res.StatusCode)
	}
	if loc := res.Header.Get("Location"); !strings.HasPrefix(loc, "/orders/ord_7Hk2?exchanged=itm_4Qa") {
		t.Errorf("Location %q", loc)
	}
	o, _ := s.DB().Order(shopdb.DemoAccount, "ord_7Hk2")
	if it := o.Items[0]; it.SKU != "stormline-insulated-m" || it.Name != "Stormline Insulated Jacket (M)" {
		t.Errorf("item after exchange: %+v", it)
	}
	if len(o.Charges) != 1 || o.Charges[0].Amount != 7000 {
		t.Errorf("charges after exchange: %+v", o.Charges)
	}
	_, body = do(t, s, "GET", "/orders/ord_7Hk2?exchanged=itm_4Qa", nil, nil)
	for _, w := range []string{"Stormline Insulated Jacket (M)", "Exchanged from the Stormline Jacket (M)", "$70.00 was charged", "+$70.00"} {
		if !strings.Contains(body, w) {
			t.Errorf("order page after exchange lacks %q", w)
		}
	}

	// Refusals are 4xx and change nothing.
	for _, tc := range []struct {
		path, sku string
		status    int
	}{
		{"/orders/ord_7Hk2/items/itm_4Qa/exchange", "trailhead-boots-10", http.StatusBadRequest},
		{"/orders/ord_7Hk2/items/itm_4Qa/exchange", "", http.StatusBadRequest},
		{"/orders/ord_7Hk2/items/itm_nope/exchange", "stormline-m", http.StatusNotFound},
		{"/orders/ord_nope/items/itm_4Qa/exchange", "stormline-m", http.StatusNotFound},
	} {
		res, _ := do(t, s, "POST", tc.path, exchangeForm(tc.sku), formHeader)
		if res.StatusCode != tc.status {
			t.Errorf("POST %s %q: %d, want %d", tc.path, tc.sku, res.StatusCode, tc.status)
		}
	}
	// A cross-site form post is refused (CSRF).
	h := formHeader.Clone()
	h.Set("Sec-Fetch-Site", "cross-site")
	if res, _ := do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-m"), h); res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: %d, want 403", res.StatusCode)
	}
}

// testPassword is the demo customer's password in the tests.
const testPassword = "correct horse battery staple"

// signIn signs in with the shop's own login, typing the password.
func signIn(t *testing.T, s *Server) *http.Cookie {
	t.Helper()
	res, _ := do(t, s, "POST", "/signin", strings.NewReader(url.Values{"return": {"/account"}, "password": {s.cfg.CustomerPassword}}.Encode()), formHeader)
	for _, c := range res.Cookies() {
		if c.Name == loginCookie {
			return c
		}
	}
	t.Fatal("sign-in set no cookie")
	return nil
}

func TestHumanCancelsSubscriptionSignedIn(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	res, body := do(t, s, "POST", "/account/subscription/cancel", nil, formHeader)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "Sign in") {
		t.Fatalf("signed-out cancel: %d", res.StatusCode)
	}
	login := signIn(t, s)
	res, _ = do(t, s, "POST", "/account/subscription/cancel", nil, formHeader, login)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/confirm?action=cancel" {
		t.Fatalf("cancel: %d to %q, want 303 to the confirmation", res.StatusCode, res.Header.Get("Location"))
	}
	if sub, _ := s.DB().Subscription(shopdb.DemoAccount); sub.Status != shopdb.SubscriptionActive {
		t.Fatal("W56: cancelled before the person confirmed")
	}
	if res := confirmWith(t, s, "/confirm?action=cancel", testPassword, login); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm: %d, want 303", res.StatusCode)
	}
	sub, _ := s.DB().Subscription(shopdb.DemoAccount)
	if sub.Status != shopdb.SubscriptionCancelled {
		t.Errorf("subscription %s after cancel", sub.Status)
	}
	_, body = do(t, s, "GET", "/account/subscription?cancelled=1", nil, nil, login)
	if !strings.Contains(body, "Cancelled") || !strings.Contains(body, "Your subscription is cancelled") {
		t.Error("subscription page doesn't show the cancellation")
	}
}

func TestDeliveryJSONValidatesInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, contentType, body string
		status                        int
		code                          string
	}{
		{"not a date", "/api/deliveries/del_2Wn8", "application/json", `{"date":"next tuesday"}`, 400, "invalid_request"},
		{"impossible date", "/api/deliveries/del_2Wn8", "application/json", `{"date":"2026-02-30"}`, 400, "invalid_request"},
		{"missing date", "/api/deliveries/del_2Wn8", "application/json", `{}`, 400, "invalid_request"},
		{"date as number", "/api/deliveries/del_2Wn8", "application/json", `{"date":20261012}`, 400, "invalid_request"},
		{"not JSON", "/api/deliveries/del_2Wn8", "application/json", `date=2026-10-12`, 400, "invalid_request"},
		{"trailing data", "/api/deliveries/del_2Wn8", "application/json", `{"date":"2026-10-14"} {}`, 400, "invalid_request"},
		{"form content type", "/api/deliveries/del_2Wn8", "application/x-www-form-urlencoded", `{"date":"2026-10-14"}`, 400, "invalid_request"},
		{"in the past", "/api/deliveries/del_2Wn8", "application/json", `{"date":"2026-10-01"}`, 400, "invalid_request"},
		{"today", "/api/deliveries/del_2Wn8", "application/json", `{"date":"2026-10-08"}`, 400, "invalid_request"},
		{"too far", "/api/deliveries/del_2Wn8", "application/json", `{"date":"2027-01-01"}`, 400, "invalid_request"},
		{"same date", "/api/deliveries/del_2Wn8", "application/json", `{"date":"2026-10-12"}`, 400, "invalid_request"},
		{"huge body", "/api/deliveries/del_2Wn8", "application/json", `{"date":"` + strings.Repeat("x", 10000) + `"}`, 400, "invalid_request"},
		{"unknown delivery", "/api/deliveries/del_nope", "application/json", `{"date":"2026-10-14"}`, 404, "not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := newTestServer(t)
			h := http.Header{"Content-Type": {tc.contentType}, "Accept": {"application/json"}}
			res, body := do(t, s, "POST", tc.path, strings.NewReader(tc.body), h)
			if res.StatusCode != tc.status {
				t.Fatalf("%d %s, want %d", res.StatusCode, body, tc.status)
			}
			var e apiError
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error != tc.code || e.Message == "" {
				t.Errorf("body %s: want error %q with a message", body, tc.code)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if d, _ := s.DB().Delivery(shopdb.DemoAccount, "del_2Wn8"); len(d.Changes) != 0 {
				t.Error("a refused request changed the delivery")
			}
		})
	}

	s, _ := newTestServer(t)
	res, body := do(t, s, "POST", "/api/deliveries/del_2Wn8", strings.NewReader(`{"date":"2026-10-14"}`), jsonHeader)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `"error":"sign_in_required"`) {
		t.Fatalf("a visitor's date change: %d %s, want 403 sign_in_required (issue 37)", res.StatusCode, body)
	}
	// A person signs in and confirms it on the shop's page (W56).
	login := signIn(t, s)
	res, body = do(t, s, "POST", "/api/deliveries/del_2Wn8", strings.NewReader(`{"date":"2026-10-14"}`), jsonHeader, login)
	var c struct {
		Error      string `json:"error"`
		ConfirmURL string `json:"confirm_url"`
	}
	if json.Unmarshal([]byte(body), &c); res.StatusCode != http.StatusForbidden || c.Error != "confirmation_required" || c.ConfirmURL == "" {
		t.Fatalf("a person's date change: %d %s", res.StatusCode, body)
	}
	if res := confirmWith(t, s, c.ConfirmURL, testPassword, login); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm: %d", res.StatusCode)
	}
	d, _ := s.DB().Delivery(shopdb.DemoAccount, "del_2Wn8")
	body = fmt.Sprintf(`{"date":%q,"date_text":%q}`, d.Date.Format(dateLayout), d.Date.Format("Monday, 2 January 2006"))
	var got rescheduleResult
	if err := json.Unmarshal([]byte(body), &got); err != nil || got.Date != "2026-10-14" || got.DateText != "Wednesday, 14 October 2026" {
		t.Errorf("answer %s", body)
	}
	_, page := do(t, s, "GET", "/deliveries", nil, nil)
	if !strings.Contains(page, "Wednesday, 14 October 2026") {
		t.Error("deliveries page doesn't show the new date")
	}
}

func TestDeclineAgentCancel(t *testing.T) {
	t.Parallel()
	decline := DeclineAgentCancel("http://shop.test/account/subscription")
	cancelOp := store.Operation{ID: "op_1", Revision: "1-a", Terms: json.RawMessage(`{"subscription_id":"sub_5Kd1","plan":"Trail Box, monthly","effective_date":"2026-10-08","refund":{"amount":"19.33","currency":"USD"}}`)}
	exchangeOp := store.Operation{ID: "op_2", Revision: "1-b", Terms: json.RawMessage(`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`)}
	session := webkit.Session{ID: "ses_1", Agent: "http://localhost/agent", User: "u1", Account: shopdb.DemoAccount}
	approval := func(op store.Operation, who store.Approver) store.Approval {
		return store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: who}
	}

	d := decline(cancelOp, approval(cancelOp, store.ApproverAgent), session)
	if d == nil {
		t.Fatal("an agent approval of a cancellation was not declined")
	}
	if d.OperationID != "op_1" || d.Revision != "1-a" || d.Reason != "Only the account holder can cancel the subscription." {
		t.Errorf("decline %+v", d)
	}
	if d.Alternative == nil || d.Alternative.Instructions == "" || len(d.Alternative.References) != 1 ||
		d.Alternative.References[0] != (webkit.AlternativeReference{Type: "web", URL: "http://shop.test/account/subscription"}) {
		t.Errorf("alternative %+v", d.Alternative)
	}
	if d := decline(cancelOp, approval(cancelOp, store.ApproverUser), session); d != nil {
		t.Errorf("a user approval of a cancellation was declined: %+v", d)
	}
	if d := decline(exchangeOp, approval(exchangeOp, store.ApproverAgent), session); d != nil {
		t.Errorf("an agent approval of an exchange was declined: %+v", d)
	}
}

// join binds a browser to a Session with the kit's Sessions, as the join
// endpoint does, and returns its cookies.
func join(t *testing.T, s *Server, sess webkit.Session) []*http.Cookie {
	t.Helper()
	w := httptest.NewRecorder()
	if err := s.Kit().Sessions.Bind(w, httptest.NewRequest("POST", PathJoin, nil), sess); err != nil {
		t.Fatal(err)
	}
	return w.Result().Cookies()
}

var agentSession = webkit.Session{
	ID: "ses_Hq3vT8nW2kLm9xRb", Agent: "http://localhost:9999/agent", User: "usr_1",
	Extensions: map[string]string{"operations": "3"},
}

func TestJoinedBrowserWaitsForApproval(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	agent := site.NewAgent()
	sess := agent.Session("usr_1")
	b := joinAs(t, sess)
	db := s.Sandbox(agent.ClientID(), "usr_1")

	res := exchangeTo(b, "stormline-insulated-m")
	if res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("joined exchange: %d, ref %q; want 403 with this Session's Poppy-Operation", res.StatusCode, res.Ref)
	}
	if !strings.Contains(res.Header.Get("Cache-Control"), "no-store") {
		t.Errorf("Cache-Control %q", res.Header.Get("Cache-Control"))
	}
	if strings.Contains(string(res.Body), res.Ref) {
		t.Error("the waiting page shows the ref")
	}
	if o, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Fatal("the exchange was performed without approval")
	}

	// The operation carries the spec's terms and a plain summary.
	look := sess.Lookup(res.Ref)
	if look.Error != "approval_required" || look.Operation == nil {
		t.Fatalf("lookup: %d %s", look.StatusCode, look.Body)
	}
	wantTerms := `{"current_sku":"stormline-m","item_id":"itm_4Qa","order_id":"ord_7Hk2","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`
	if string(look.Operation.Terms) != wantTerms {
		t.Errorf("terms %s\nwant  %s", look.Operation.Terms, wantTerms)
	}
	wantSummary := "Exchange the Stormline Jacket (M) on order ord_7Hk2 for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order."
	if look.Operation.Summary != wantSummary {
		t.Errorf("summary %q", look.Operation.Summary)
	}

	// The agent approves, then Continue: performed once.
	if ans := sess.Approve(res.Ref); ans.StatusCode != http.StatusNoContent {
		t.Fatalf("approval: %d %s", ans.StatusCode, ans.Body)
	}
	if res := b.Again(); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("Continue: %d, want 303", res.StatusCode)
	}
	o, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2")
	if o.Items[0].SKU != "stormline-insulated-m" || len(o.Charges) != 1 {
		t.Fatalf("after Continue: %+v, charges %+v", o.Items[0], o.Charges)
	}
	if look := sess.Lookup(res.Ref); look.OperationStatus != "performed" {
		t.Errorf("status %d %s, want performed", look.StatusCode, look.Body)
	}
	// Repeating it, even many times at once, performs nothing more.
	for _, r := range b.AgainConcurrently(5) {
		if r.StatusCode < 400 {
			t.Errorf("repeat: %d, want a refusal", r.StatusCode)
		}
	}
	if o, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2"); len(o.Charges) != 1 {
		t.Errorf("performed twice: charges %+v", o.Charges)
	}
}

func TestJoinedBrowserDeliveryJSON(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	cookies := join(t, s, agentSession)
	res, body := do(t, s, "POST", "/api/deliveries/del_2Wn8", strings.NewReader(`{"date":"2026-10-14"}`), jsonHeader, cookies...)
	if res.StatusCode != http.StatusForbidden || res.Header.Get("Poppy-Operation") == "" {
		t.Fatalf("joined date change: %d %s", res.StatusCode, body)
	}
	var e struct{ Error string }
	if json.Unmarshal([]byte(body), &e); e.Error != "approval_required" {
		t.Errorf("body %s", body)
	}
	// Bad input from a joined browser is still a clear 400, not an operation.
	res, body = do(t, s, "POST", "/api/deliveries/del_2Wn8", strings.NewReader(`{"date":"soon"}`), jsonHeader, cookies...)
	if res.StatusCode != http.StatusBadRequest || res.Header.Get("Poppy-Operation") != "" {
		t.Errorf("joined bad date: %d %s", res.StatusCode, body)
	}
	if d, _ := s.Sandbox(agentSession.Agent, agentSession.User).Delivery(shopdb.DemoAccount, "del_2Wn8"); len(d.Changes) != 0 {
		t.Error("changed without approval")
	}
}

func TestJoinedBrowserWithOwnLoginGetsShopFlow(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	cookies := append(join(t, s, agentSession), signIn(t, s))
	res, _ := do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-m"), formHeader, cookies...)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Poppy-Operation") != "" {
		t.Fatalf("own login: %d, want 303 without an operation", res.StatusCode)
	}
}

func TestJoinedWithoutExtensionGetsExtensionRequired(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	sess := agentSession
	sess.Extensions = nil
	cookies := join(t, s, sess)
	res, body := do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-m"), formHeader, cookies...)
	// A page load gets a page (never JSON as a page), with the reason:
	// the demo explains its refusals (issue 37).
	if res.StatusCode != http.StatusForbidden || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "join this browser to the site again") ||
		!strings.Contains(body, "declared no &#34;operations&#34;;v=&#34;3&#34;") || res.Header.Get("Poppy-Operation") != "" {
		t.Fatalf("no extension: %d %s", res.StatusCode, body)
	}
	res, body = do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-m"), http.Header{"Content-Type": formHeader["Content-Type"], "Accept": {"application/json"}}, cookies...)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `"error":"extension_required"`) || !strings.Contains(body, `"error_description"`) {
		t.Fatalf("no extension, a script: %d %s", res.StatusCode, body)
	}
	if o, _ := s.Sandbox(agentSession.Agent, agentSession.User).Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Fatal("performed")
	}
}

func TestSignedInJoinCancelIsAccountOperation(t *testing.T) {
	t.Parallel()
	s, c := newTestServer(t)
	sess := agentSession
	sess.Account = shopdb.DemoAccount
	res, _ := do(t, s, "POST", "/account/subscription/cancel", nil, formHeader, join(t, s, sess)...)
	_, ref, err := headers.ParseOperation(res.Header.Values("Poppy-Operation"))
	if res.StatusCode != http.StatusForbidden || err != nil {
		t.Fatalf("signed-in cancel: %d, %v", res.StatusCode, err)
	}
	rec, found, _ := storedriver.Steps(s.Kit().Store).Lookup(context.Background(), sess.Owner(), ref, c.Now())
	if !found || rec.Owner.Account != shopdb.DemoAccount {
		t.Fatalf("operation owner %+v", rec.Owner)
	}
	if !strings.Contains(rec.Current.Summary, "$19.33") || !strings.Contains(string(rec.Current.Terms), `"refund":{"amount":"19.33"`) {
		t.Errorf("cancel terms %s, summary %q", rec.Current.Terms, rec.Current.Summary)
	}
	// Signed out, the joined browser is asked to sign in; no operation.
	res, _ = do(t, s, "POST", "/account/subscription/cancel", nil, formHeader, join(t, s, agentSession)...)
	if res.StatusCode != http.StatusForbidden || res.Header.Get("Poppy-Operation") != "" {
		t.Errorf("signed-out joined cancel: %d %q", res.StatusCode, res.Header.Get("Poppy-Operation"))
	}
	if sub, _ := s.Sandbox(agentSession.Agent, agentSession.User).Subscription(shopdb.DemoAccount); sub.Status != shopdb.SubscriptionActive {
		t.Error("cancelled without approval")
	}
}

func TestDemoToken(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	res, body := do(t, s, "POST", PathToken, strings.NewReader("client_id=http%3A%2F%2Flocalhost%3A9999%2Fagent&account=acct_demo"), formHeader)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("token: %d %s", res.StatusCode, body)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	json.Unmarshal([]byte(body), &tok)
	// The token is stamped with the server's Clock, and verifies on it.
	at, err := s.tokens.VerifyAccessToken(context.Background(), tok.AccessToken)
	if err != nil || at.Account != shopdb.DemoAccount || at.ClientID != "http://localhost:9999/agent" {
		t.Fatalf("token verifies as %+v, %v", at, err)
	}
	if res, _ := do(t, s, "POST", PathToken, strings.NewReader("client_id=x&account=acct_other"), formHeader); res.StatusCode != http.StatusBadRequest {
		t.Errorf("other account: %d", res.StatusCode)
	}
}

func TestPoppyJSON(t *testing.T) {
	t.Parallel()
	s, err := NewServer(Config{BaseURL: "http://localhost:8080", AllowLocal: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	res, body := do(t, s, "GET", PathPoppyJSON, nil, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d", res.StatusCode)
	}
	for _, w := range []string{`"endpoint": "http://localhost:8080/poppy/operations"`, `"browser_session_endpoint": "http://localhost:8080/poppy/join"`, `"version": "3"`} {
		if !strings.Contains(body, w) {
			t.Errorf("poppy.json lacks %s:\n%s", w, body)
		}
	}
}
