package shop

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// newHarnessShop is the shop with agents and joined browsers from
// webkittest: real joins, Session JWTs and the real endpoint, in-process.
func newHarnessShop(t *testing.T) (*Server, *webkittest.Site, *clock) {
	t.Helper()
	c := testclock.At(t0)
	site := webkittest.New("https://shop.test")
	site.Clock = c.Now
	s, err := NewServer(Config{BaseURL: site.Origin, Clock: c.Now, Logger: quiet, HTTPClient: site.Resolver().HTTPClient})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = s.Handler()
	site.IssueAccessToken = s.IssueAccessToken // the demo's own authorization server
	return s, site, c
}

func joinAs(t *testing.T, sess *webkittest.Session) *webkittest.Browser {
	t.Helper()
	b, err := sess.Join()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// perform runs one gated action through its whole flow: the browser's
// request waits (403 with a ref), the agent approves as the user, and the
// browser's Continue performs it. It returns the Continue's answer and the
// operation's ID.
func perform(t *testing.T, sess *webkittest.Session, b *webkittest.Browser, res *webkittest.Response) (*webkittest.Response, string) {
	t.Helper()
	if res.Err != nil || res.StatusCode != 403 || res.Ref == "" {
		t.Fatalf("the gated request: %d %v, ref %q: %s", res.StatusCode, res.Err, res.Ref, res.Body)
	}
	if ans := sess.Approve(res.Ref); ans.StatusCode != 204 {
		t.Fatalf("approval: %d %s", ans.StatusCode, ans.Body)
	}
	again := b.Again()
	if again.Err != nil || again.StatusCode >= 400 {
		t.Fatalf("Continue: %d %v: %s", again.StatusCode, again.Err, again.Body)
	}
	if look := sess.Lookup(res.Ref); look.OperationStatus != "performed" {
		t.Fatalf("after Continue: %d %s", look.StatusCode, look.Body)
	}
	id, _, _ := strings.Cut(res.Ref, ".")
	return again, id
}

func exchangeTo(b *webkittest.Browser, sku string) *webkittest.Response {
	return b.PostForm("/orders/ord_7Hk2/items/itm_4Qa/exchange", url.Values{"replacement_sku": {sku}})
}

// TestSandboxPerAgentUser: each agent's User has its own copy of the demo
// data; its signed-in and signed-out Sessions share it; browsers with no
// agent see neither.
func TestSandboxPerAgentUser(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	a, b := site.NewAgent(), site.NewAgent()
	sa, sb := a.Session("usr_1"), b.Session("usr_1") // the same sub at two agents
	ba, bb := joinAs(t, sa), joinAs(t, sb)

	perform(t, sa, ba, exchangeTo(ba, "stormline-insulated-m"))
	item := func(db *shopdb.DB) string {
		o, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2")
		return o.Items[0].SKU
	}
	if got := item(s.Sandbox(a.ClientID(), "usr_1")); got != "stormline-insulated-m" {
		t.Fatalf("agent A's sandbox: %s", got)
	}
	for name, db := range map[string]*shopdb.DB{"agent B's": s.Sandbox(b.ClientID(), "usr_1"), "another User's": s.Sandbox(a.ClientID(), "usr_2"), "the shared": s.DB()} {
		if got := item(db); got != "stormline-m" {
			t.Errorf("%s sandbox sees agent A's exchange: %s", name, got)
		}
	}
	// Agent B's browser's page shows B's data, and B can make the same
	// exchange: it was not used up by A.
	if page := bb.Get("/orders/ord_7Hk2"); !strings.Contains(string(page.Body), "Stormline Jacket (M)") || strings.Contains(string(page.Body), "Exchanged from") {
		t.Error("agent B's order page shows agent A's exchange")
	}
	perform(t, sb, bb, exchangeTo(bb, "stormline-insulated-m"))

	// A signed-in Session of agent A's User sees the same sandbox.
	in := a.SignedInSession("usr_1", shopdb.DemoAccount)
	bin := joinAs(t, in)
	if page := bin.Get("/orders/ord_7Hk2"); !strings.Contains(string(page.Body), "Exchanged from the Stormline Jacket (M)") {
		t.Error("the signed-in Session of the same User doesn't see its sandbox")
	}
	if n := s.Sandboxes(); n != 4 {
		t.Errorf("%d sandboxes, want 4 (A/usr_1, B/usr_1, A/usr_2, shared)", n)
	}
}

// TestEveryActionAgainAndAgain: an agent under development never runs
// out: exchange back and forth, cancel then resubscribe, move the delivery
// and back, each many times, every time performed once, each time a new
// operation (W141).
func TestEveryActionAgainAndAgain(t *testing.T) {
	t.Parallel()
	s, site, c := newHarnessShop(t)
	agent := site.NewAgent()
	out := agent.Session("usr_1")
	in := agent.SignedInSession("usr_1", shopdb.DemoAccount)
	bo, bi := joinAs(t, out), joinAs(t, in)
	db := s.Sandbox(agent.ClientID(), "usr_1")
	today := shopdb.Day(c.Now())
	const rounds = 12 // past MaxHistory/2, so the history's bound is met too
	ops := map[string]bool{}
	step := func(sess *webkittest.Session, b *webkittest.Browser, res *webkittest.Response) {
		t.Helper()
		_, id := perform(t, sess, b, res)
		if ops[id] {
			t.Fatalf("W141: operation %s performed again", id)
		}
		ops[id] = true
	}
	for i := range rounds {
		step(out, bo, exchangeTo(bo, "stormline-insulated-m"))
		step(out, bo, exchangeTo(bo, "stormline-m"))

		step(in, bi, bi.PostForm("/account/subscription/cancel", nil))
		if sub, _ := db.Subscription(shopdb.DemoAccount); sub.Status != shopdb.SubscriptionCancelled {
			t.Fatalf("round %d: cancel left %s", i, sub.Status)
		}
		if i == 0 {
			page := string(bi.Get("/account/subscription").Body)
			if !strings.Contains(page, `action="/account/subscription/resubscribe"`) || strings.Contains(page, `action="/account/subscription/cancel"`) {
				t.Error("the cancelled subscription's page offers no resubscribe control, or still offers cancel")
			}
		}
		step(in, bi, bi.PostForm("/account/subscription/resubscribe", nil))
		if sub, _ := db.Subscription(shopdb.DemoAccount); sub.Status != shopdb.SubscriptionActive {
			t.Fatalf("round %d: resubscribe left %s", i, sub.Status)
		}
		if i == 0 && !strings.Contains(string(bi.Get("/account/subscription?resubscribed=1").Body), "active again") {
			t.Error("no word that the subscription is active again")
		}

		d0, _ := db.Delivery(shopdb.DemoAccount, "del_2Wn8")
		next := today.AddDate(0, 0, 5+i%10)
		if next.Equal(d0.Date) {
			next = next.AddDate(0, 0, 1)
		}
		step(out, bo, bo.PostJSON("/api/deliveries/del_2Wn8", `{"date":"`+next.Format(dateLayout)+`"}`))
		step(out, bo, bo.PostJSON("/api/deliveries/del_2Wn8", `{"date":"`+d0.Date.Format(dateLayout)+`"}`))
	}
	if len(ops) != 6*rounds {
		t.Errorf("%d operations performed, want %d", len(ops), 6*rounds)
	}
	o, _ := db.Order(shopdb.DemoAccount, "ord_7Hk2")
	if o.Items[0].SKU != "stormline-m" || len(o.Items[0].Exchanges) != shopdb.MaxHistory || len(o.Charges) != shopdb.MaxHistory {
		t.Errorf("after %d exchanges each way: %s, %d exchanges and %d charges kept, want %d each", rounds, o.Items[0].SKU, len(o.Items[0].Exchanges), len(o.Charges), shopdb.MaxHistory)
	}
	var net shopdb.Money
	for _, ch := range o.Charges {
		net += ch.Amount
	}
	if net != 0 {
		t.Errorf("back and forth should net to $0.00 over the kept charges, got %s", net)
	}
}

// TestResetSandbox: the reset control restores the browser's own sandbox
// and no other.
func TestResetSandbox(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	a, b := site.NewAgent(), site.NewAgent()
	sa, sb := a.Session("usr_1"), b.Session("usr_1")
	ba, bb := joinAs(t, sa), joinAs(t, sb)
	perform(t, sa, ba, exchangeTo(ba, "stormline-insulated-m"))
	perform(t, sb, bb, exchangeTo(bb, "stormline-insulated-l"))

	page := ba.Get("/account")
	if !strings.Contains(string(page.Body), `action="/demo/reset"`) || !strings.Contains(string(page.Body), "your agent's own copy") {
		t.Fatal("the account page has no reset control for the agent's sandbox")
	}
	res := ba.PostForm(PathReset, nil)
	if res.StatusCode != 303 || res.Header.Get("Location") != "/account?reset=1" || res.Header.Get("Poppy-Operation") != "" {
		t.Fatalf("reset: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	if page := ba.Get("/account?reset=1"); !strings.Contains(string(page.Body), "back as it was") {
		t.Error("no word that the reset was done")
	}
	sku := func(agent string) string {
		o, _ := s.Sandbox(agent, "usr_1").Order(shopdb.DemoAccount, "ord_7Hk2")
		return o.Items[0].SKU
	}
	if got := sku(a.ClientID()); got != "stormline-m" {
		t.Errorf("agent A after its reset: %s", got)
	}
	if got := sku(b.ClientID()); got != "stormline-insulated-l" {
		t.Errorf("agent A's reset changed agent B's sandbox: %s", got)
	}
	// And the flow works again from the seeded data.
	perform(t, sa, ba, exchangeTo(ba, "stormline-insulated-m"))

	// A browser with no agent resets the shared copy (changed by a
	// person signed in to the shop).
	if _, err := s.DB().Exchange(shopdb.DemoAccount, mustPlan(t, s.DB(), "stormline-l"), s.now()); err != nil {
		t.Fatal(err)
	}
	people := site.Browser()
	people.PostForm(PathReset, nil)
	if o, _ := s.DB().Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Errorf("the shared copy after its reset: %s", o.Items[0].SKU)
	}
}

// TestSandboxesForgottenAndBounded: a sandbox unused for a day comes back
// seeded; the shop keeps at most MaxSandboxes.
func TestSandboxesForgottenAndBounded(t *testing.T) {
	t.Parallel()
	c := testclock.At(t0)
	s, err := NewServer(Config{BaseURL: "https://shop.test", Clock: c.Now, Logger: quiet, MaxSandboxes: 3})
	if err != nil {
		t.Fatal(err)
	}
	db := s.Sandbox("https://agent.example/a", "usr_1")
	plan, _ := db.PlanExchange(shopdb.DemoAccount, "ord_7Hk2", "itm_4Qa", "stormline-l")
	if _, err := db.Exchange(shopdb.DemoAccount, plan, c.Now()); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.Sandbox("https://agent.example/a", fmt.Sprint("usr_x", i))
		if n := s.Sandboxes(); n > 3 {
			t.Fatalf("%d sandboxes kept, cap 3", n)
		}
	}
	// usr_1's was the least recently used: dropped, and seeded again.
	if o, _ := s.Sandbox("https://agent.example/a", "usr_1").Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Errorf("an evicted sandbox came back as %s", o.Items[0].SKU)
	}
}

// The attack run's break: one agent's 1,000 joins (about 1 s) evicted
// every other agent's sandbox, and their state was lost. Now an agent at
// its cap evicts its own least recently used sandbox first, and the
// overall cap takes from the agent with the most.
func TestHostileAgentKeepsVictimsSandbox(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	victim := site.NewAgent()
	sv := victim.Session("usr_victim")
	bv := joinAs(t, sv)
	perform(t, sv, bv, exchangeTo(bv, "stormline-insulated-m"))

	hostile := site.NewAgent()
	for i := range 1000 {
		b := joinAs(t, hostile.Session(fmt.Sprint("usr_h", i)))
		if res := b.Get("/account"); res.StatusCode != 200 {
			t.Fatalf("hostile join %d: %d", i, res.StatusCode)
		}
	}
	if n := s.Sandboxes(); n > shopdb.DefaultMaxPerGroup+2 {
		t.Errorf("%d sandboxes kept after one agent's 1,000 joins, want at most its cap %d and the others'", n, shopdb.DefaultMaxPerGroup)
	}
	// The victim's page, through its own browser: the exchange is still
	// there, not a freshly seeded copy.
	page := bv.Get("/orders/ord_7Hk2")
	if o, _ := s.Sandbox(victim.ClientID(), "usr_victim").Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-insulated-m" {
		t.Fatalf("the victim's sandbox was flushed by another agent's joins: the item is %s", o.Items[0].SKU)
	}
	if !strings.Contains(string(page.Body), "Stormline Insulated Jacket (M)") {
		t.Error("the victim's order page doesn't show its exchange")
	}
}

// A joined browser can leave: the agent bar's Leave ends the join
// (Sessions.Unbind), and the browser is an ordinary one again.
func TestLeaveEndsTheJoin(t *testing.T) {
	t.Parallel()
	s, site, _ := newHarnessShop(t)
	b := joinAs(t, site.NewAgent().Session("usr_1"))
	page := b.Get("/account")
	if !strings.Contains(string(page.Body), `action="/leave"`) {
		t.Fatal("a joined browser's page has no Leave control")
	}
	res := b.PostForm(PathLeave, nil)
	if res.StatusCode != 303 {
		t.Fatalf("leave: %d", res.StatusCode)
	}
	expired := 0
	for _, line := range res.Header.Values("Set-Cookie") {
		if c, err := http.ParseSetCookie(line); err == nil && c.MaxAge < 0 {
			expired++
		}
	}
	if expired < 2 {
		t.Errorf("leave expired %d cookies, want the join cookie and its binding marker", expired)
	}
	if page := b.Get("/account"); strings.Contains(string(page.Body), `action="/leave"`) || strings.Contains(string(page.Body), "Your personal agent is browsing with you") {
		t.Error("the browser still shows as joined after leaving")
	}
	// An ordinary browser now: no operation, and, without the shop's
	// login, the sign-in (issue 37); nothing changes anywhere.
	res = b.PostForm("/orders/ord_7Hk2/items/itm_4Qa/exchange", url.Values{"replacement_sku": {"stormline-l"}})
	if res.StatusCode != 403 || res.Header.Get("Poppy-Operation") != "" || !strings.Contains(string(res.Body), "Sign in to exchange") {
		t.Errorf("after leaving, the exchange: %d, operation %q; want an ordinary visitor's sign-in", res.StatusCode, res.Header.Get("Poppy-Operation"))
	}
	if o, _ := s.DB().Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Errorf("the ordinary browser's exchange changed the shared copy: %s", o.Items[0].SKU)
	}
}

// mustPlan plans the exchange of the seeded jacket for sku in db.
func mustPlan(t *testing.T, db *shopdb.DB, sku string) shopdb.ExchangePlan {
	t.Helper()
	p, err := db.PlanExchange(shopdb.DemoAccount, "ord_7Hk2", "itm_4Qa", sku)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
