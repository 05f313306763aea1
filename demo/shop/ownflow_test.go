package shop

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
)

var tokenField = regexp.MustCompile(`name="token" value="([^"]+)"`)

// confirmPageToken opens the confirmation page at target and returns its
// single-use token.
func confirmPageToken(t *testing.T, s *Server, target string, cookies ...*http.Cookie) string {
	t.Helper()
	res, body := do(t, s, "GET", target, nil, nil, cookies...)
	m := tokenField.FindStringSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("confirmation page %s: %d\n%s", target, res.StatusCode, body)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("confirmation page Cache-Control %q, want no-store", cc)
	}
	return html.UnescapeString(m[1])
}

func postConfirm(t *testing.T, s *Server, token, password string, cookies ...*http.Cookie) *http.Response {
	t.Helper()
	res, _ := do(t, s, "POST", "/confirm", strings.NewReader(url.Values{"token": {token}, "password": {password}}.Encode()), formHeader, cookies...)
	return res
}

// confirmWith opens the confirmation page at target and confirms it.
func confirmWith(t *testing.T, s *Server, target, password string, cookies ...*http.Cookie) *http.Response {
	t.Helper()
	return postConfirm(t, s, confirmPageToken(t, s, target, cookies...), password, cookies...)
}

var sameOrigin = http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Sec-Fetch-Site": {"same-origin"}}

// W56: the Gate hands a joined browser with the shop's own login to the
// shop's own flow, so that flow must be one a page script can't complete:
// the attack run's break was a same-origin script that POSTed /signin and
// then the exchange, performed with no approval from anyone.
func TestPageScriptCannotSignInAndPerform(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t)
	joined := join(t, s, agentSession)
	db := s.Sandbox(agentSession.Agent, agentSession.User)
	sku := func() string {
		o, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2")
		return o.Items[0].SKU
	}

	t.Run("W56 a script's sign-in without the password", func(t *testing.T) {
		res, _ := do(t, s, "POST", "/signin", strings.NewReader("return=/account"), sameOrigin, joined...)
		cookies := append([]*http.Cookie{}, joined...)
		for _, c := range res.Cookies() {
			if c.Name == loginCookie && c.MaxAge >= 0 {
				cookies = append(cookies, c)
				t.Errorf("a sign-in without the password set the login cookie (%d)", res.StatusCode)
			}
		}
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("sign-in without the password: %d, want 401", res.StatusCode)
		}
		res, _ = do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-l"), sameOrigin, cookies...)
		if got := sku(); got != "stormline-m" {
			t.Fatalf("W56: the script's exchange was performed with no approval: the item is %s (%d)", got, res.StatusCode)
		}
		if res.StatusCode != http.StatusForbidden || res.Header.Get("Poppy-Operation") == "" {
			t.Errorf("W54/W55: the joined browser is handled as its Session: %d, operation %q", res.StatusCode, res.Header.Get("Poppy-Operation"))
		}
		res, _ = do(t, s, "POST", "/signin", strings.NewReader("return=/account&password=guess"), sameOrigin, joined...)
		if res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
			t.Errorf("a wrong password: %d, cookies %d", res.StatusCode, len(res.Cookies()))
		}
	})

	login := signIn(t, s)
	own := append(append([]*http.Cookie{}, joined...), login)

	t.Run("W56 an own login's action waits for the confirmation", func(t *testing.T) {
		res, _ := do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-insulated-l"), sameOrigin, own...)
		loc := res.Header.Get("Location")
		if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/confirm?") || res.Header.Get("Poppy-Operation") != "" {
			t.Fatalf("own login's exchange: %d to %q, want 303 to the confirmation, no operation", res.StatusCode, loc)
		}
		if got := sku(); got != "stormline-m" {
			t.Fatalf("performed before the confirmation: %s", got)
		}
		_, body := do(t, s, "GET", loc, nil, nil, own...)
		if !strings.Contains(body, "Stormline Insulated Jacket (L)") || !strings.Contains(body, "$70.00 more") {
			t.Errorf("the confirmation page doesn't say what will be done:\n%s", body)
		}
		tok := confirmPageToken(t, s, loc, own...)
		for _, pw := range []string{"", "guess"} {
			if res := postConfirm(t, s, tok, pw, own...); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("confirm with password %q: %d, want 401", pw, res.StatusCode)
			}
		}
		if got := sku(); got != "stormline-m" {
			t.Fatalf("performed without the password: %s", got)
		}
		// The token is this browser's: not another browser's with the
		// same login (another sandbox), nor a browser without the login.
		if res := postConfirm(t, s, tok, testPassword, login); res.StatusCode != http.StatusForbidden {
			t.Errorf("the token in another sandbox: %d, want 403", res.StatusCode)
		}
		if res := postConfirm(t, s, tok, testPassword, joined...); res.StatusCode != http.StatusForbidden {
			t.Errorf("the token without the login: %d, want 403", res.StatusCode)
		}
		if res := postConfirm(t, s, tok[:len(tok)-2]+"AA", testPassword, own...); res.StatusCode != http.StatusForbidden {
			t.Errorf("a changed token: %d, want 403", res.StatusCode)
		}
		if got := sku(); got != "stormline-m" {
			t.Fatalf("performed with a token out of place: %s", got)
		}
		if res := postConfirm(t, s, tok, testPassword, own...); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("confirm: %d, want 303", res.StatusCode)
		}
		if got := sku(); got != "stormline-insulated-l" {
			t.Fatalf("after the confirmation the item is %s", got)
		}

		// Single use: exchange back, then replay the first confirmation,
		// whose terms hold again (from the M to the insulated L).
		res, _ = do(t, s, "POST", "/orders/ord_7Hk2/items/itm_4Qa/exchange", exchangeForm("stormline-m"), sameOrigin, own...)
		if res := confirmWith(t, s, res.Header.Get("Location"), testPassword, own...); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("confirm the exchange back: %d", res.StatusCode)
		}
		if res := postConfirm(t, s, tok, testPassword, own...); res.StatusCode != http.StatusConflict {
			t.Errorf("a replayed confirmation: %d, want 409", res.StatusCode)
		}
		if got := sku(); got != "stormline-m" {
			t.Fatalf("a replayed confirmation was performed: the item is %s", got)
		}
	})

	t.Run("W56 terms that changed since the confirmation page", func(t *testing.T) {
		// A page for one date, confirmed after the delivery moved to
		// another: the terms (the current date) no longer hold.
		loc := "/confirm?action=reschedule&delivery=del_2Wn8&date=2026-10-20"
		first := confirmPageToken(t, s, loc, own...)
		if res := confirmWith(t, s, "/confirm?action=reschedule&delivery=del_2Wn8&date=2026-10-21", testPassword, own...); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("move the delivery: %d", res.StatusCode)
		}
		if res := postConfirm(t, s, first, testPassword, own...); res.StatusCode != http.StatusConflict {
			t.Errorf("a confirmation whose terms changed: %d, want 409", res.StatusCode)
		}
		if d, _ := db.Delivery(shopdb.DemoAccount, "del_2Wn8"); d.Date.Format(dateLayout) != "2026-10-21" {
			t.Errorf("the stale confirmation moved the delivery to %s", d.Date.Format(dateLayout))
		}
	})

	t.Run("W56 a fetch on an own login is told where to confirm", func(t *testing.T) {
		res, body := do(t, s, "POST", "/api/deliveries/del_2Wn8", strings.NewReader(`{"date":"2026-10-22"}`), jsonHeader, own...)
		var got map[string]string
		_ = json.Unmarshal([]byte(body), &got)
		if res.StatusCode != http.StatusForbidden || got["error"] != "confirmation_required" || got["confirm_url"] != "/confirm?action=reschedule&date=2026-10-22&delivery=del_2Wn8" {
			t.Fatalf("own login's fetch: %d %s", res.StatusCode, body)
		}
		if d, _ := db.Delivery(shopdb.DemoAccount, "del_2Wn8"); d.Date.Format(dateLayout) != "2026-10-21" {
			t.Errorf("moved before the confirmation: %s", d.Date.Format(dateLayout))
		}
	})
}
