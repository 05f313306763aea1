package shop

import (
	"net/url"
	"strings"
	"testing"
)

// §6 §8.1: the staff's ledger lists each decision the store committed,
// filtered by agent, User, operation and outcome; a browser an agent
// joined sees that agent's own decisions on the account page, and no
// other agent's.
func TestLedger(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	s.cfg.StaffCredential = testStaff
	a, b := site.NewAgent(), site.NewAgent()
	sa, sb := a.Session("usr_1"), b.Session("usr_2")
	ba, bb := joinAs(t, sa), joinAs(t, sb)
	_, opA := perform(t, sa, ba, exchangeTo(ba, "stormline-insulated-m"))
	_, opB := perform(t, sb, bb, exchangeTo(bb, "stormline-insulated-m"))

	login := staffSignIn(t, s)
	ledger := func(q url.Values) string {
		t.Helper()
		res, body := do(t, s, "GET", "/admin/ledger?"+q.Encode(), nil, nil, login)
		if res.StatusCode != 200 {
			t.Fatalf("ledger %v: %d", q, res.StatusCode)
		}
		return body
	}
	all := ledger(nil)
	for _, want := range []string{opA, opB, "approval recorded", "claimed", "performed", a.ClientID(), b.ClientID()} {
		if !strings.Contains(all, want) {
			t.Errorf("the ledger lacks %q", want)
		}
	}
	if body := ledger(url.Values{"agent": {a.ClientID()}}); !strings.Contains(body, opA) || strings.Contains(body, opB) {
		t.Error("filtered by agent A, the ledger shows other than A's")
	}
	if body := ledger(url.Values{"user": {"usr_2"}}); strings.Contains(body, opA) || !strings.Contains(body, opB) {
		t.Error("filtered by User usr_2, the ledger shows other than usr_2's")
	}
	if body := ledger(url.Values{"operation": {opB}}); strings.Contains(body, opA) || !strings.Contains(body, opB) {
		t.Error("filtered by operation, the ledger shows another")
	}
	if body := ledger(url.Values{"what": {"claimed"}}); strings.Count(body, "<td>claimed</td>") != 2 || strings.Contains(body, "<td>approval recorded</td>") {
		t.Error("filtered by outcome, the ledger shows other outcomes")
	}
	if res, _ := do(t, s, "GET", "/admin/ledger", nil, nil); res.StatusCode != 403 {
		t.Errorf("the ledger without the staff sign-in: %d", res.StatusCode)
	}

	page := string(ba.Get("/account").Body)
	// Each time says which web server recorded it, in words (it was a
	// bare host name under the time).
	if !strings.Contains(page, `title="the web server that recorded it">on server `) {
		t.Error("the decisions table does not label the server under each time")
	}
	if !strings.Contains(page, "Your agent's decisions") || !strings.Contains(page, opA) || strings.Contains(page, opB) {
		t.Errorf("agent A's account page shows %v of A's decision, %v of B's", strings.Contains(page, opA), strings.Contains(page, opB))
	}
	if page := string(bb.Get("/account").Body); strings.Contains(page, opA) || !strings.Contains(page, opB) {
		t.Error("agent B's account page shows other than B's decisions")
	}
}
