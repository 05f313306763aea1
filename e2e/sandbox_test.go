package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/demo/shop/shopdb"
)

// exchangeVia drives one exchange of the demo jacket to sku in tab; the
// user approves it (a standing instruction covers one approval per action,
// A26) and the agent presses Continue. It returns an error (not t.Fatal) so that two agents can run
// it at once.
func exchangeVia(ctx context.Context, a *refagent.Agent, tab context.Context, shopURL, sku string) error {
	// The user asks for a new exchange: not a retry of the last one, which
	// the agent would otherwise take as performed already (A51).
	a.NewTask()
	if err := refagent.ExchangeItem(tab, shopURL, order, item, sku); err != nil {
		return fmt.Errorf("exchange for %s: %w", sku, err)
	}
	actx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	out, err := a.Approve(actx, &userApproves{})
	if err != nil {
		return fmt.Errorf("approve the exchange for %s: %w", sku, err)
	}
	if out.Result != refagent.Performed {
		return fmt.Errorf("exchange for %s: outcome %+v", sku, out)
	}
	// The browser is still loading the order page after Continue: wait for
	// its "Done" before the next navigation, which would abort it.
	wctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(".flash--ok"))); err != nil {
		return fmt.Errorf("exchange for %s: the order page never said it was done: %w", sku, err)
	}
	return nil
}

// itemIn is the demo jacket line of the order in db.
func itemIn(t *testing.T, db *shopdb.DB) (shopdb.Item, shopdb.Order) {
	t.Helper()
	o, ok := db.Order(shopdb.DemoAccount, order)
	if !ok || len(o.Items) == 0 || o.Items[0].ID != item {
		t.Fatalf("demo order %+v", o)
	}
	return o.Items[0], o
}

// 10. Two agents work one running demo at once: each in its own sandbox,
// neither sees the other's changes, and the same action is open to both.
func TestTwoAgentsConcurrently(t *testing.T) {
	e := newEnv(t)
	type run struct {
		a    *refagent.Agent
		tab  context.Context
		skus []string
	}
	runs := make([]run, 2)
	for i, skus := range [][]string{{insulM, origSKU, insulM}, {insulL, "stormline-s"}} {
		a, tab := e.newAgent(t)
		join(t, a, refagent.JoinOptions{})
		runs[i] = run{a, tab, skus}
	}
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			for _, sku := range r.skus {
				if errs[i] = exchangeVia(t.Context(), r.a, r.tab, e.url, sku); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("agent %d: %v", i+1, err)
		}
	}
	for i, r := range runs {
		it, _ := itemIn(t, e.shop.Sandbox(r.a.ClientID(), r.a.User()))
		if it.SKU != r.skus[len(r.skus)-1] || len(it.Exchanges) != len(r.skus) {
			t.Errorf("agent %d's sandbox: item %s after %d exchanges, want %s after %d", i+1, it.SKU, len(it.Exchanges), r.skus[len(r.skus)-1], len(r.skus))
		}
		for _, ex := range it.Exchanges {
			if !contains(r.skus, ex.To.ID) {
				t.Errorf("agent %d's sandbox holds another agent's exchange to %s", i+1, ex.To.ID)
			}
		}
		// Each agent's browser shows its own data.
		page := text(t, r.tab, "body")
		if want := "Exchanged from"; !strings.Contains(page, want) {
			t.Errorf("agent %d's order page lacks %q", i+1, want)
		}
	}
	if it, _ := itemIn(t, e.shop.DB()); it.SKU != origSKU || len(it.Exchanges) != 0 {
		t.Errorf("the shared copy for people changed: %s, %d exchanges", it.SKU, len(it.Exchanges))
	}
	screenshot(t, runs[0].tab, "10-agent-1-own-sandbox.png")
	screenshot(t, runs[1].tab, "10-agent-2-own-sandbox.png")
}

// 11. One agent runs the same flow 20 times in a row on one Session: the
// demo never runs out (the jacket is exchanged back and forth), and each
// run is performed exactly once. Then the reset control brings the seeded
// data back.
func TestSameFlowTwentyTimes(t *testing.T) {
	e := newEnv(t)
	a, tab := e.newAgent(t)
	join(t, a, refagent.JoinOptions{})
	const runs = 20
	start := time.Now()
	for i := range runs {
		sku := []string{insulM, origSKU}[i%2]
		if err := exchangeVia(t.Context(), a, tab, e.url, sku); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		it, _ := itemIn(t, e.db(t))
		if it.SKU != sku || len(it.Exchanges) != i+1 {
			t.Fatalf("run %d: item %s after %d exchanges, want %s after %d (performed once each)", i+1, it.SKU, len(it.Exchanges), sku, i+1)
		}
	}
	t.Logf("%d flows in %s", runs, time.Since(start).Round(time.Millisecond))
	_, o := itemIn(t, e.db(t))
	var net shopdb.Money
	for _, ch := range o.Charges {
		net += ch.Amount
	}
	if len(o.Charges) != runs || net != 0 {
		t.Errorf("%d charges netting %s, want %d netting $0.00", len(o.Charges), net, runs)
	}

	in(t, tab,
		chromedp.Navigate(e.url+"/account"),
		chromedp.Click(chromedp.CSS(`form[action="/demo/reset"] button`), chromedp.NodeVisible),
	)
	waitText(t, tab, ".flash", "back as it was")
	screenshot(t, tab, "11-sandbox-reset.png")
	if it, o := itemIn(t, e.db(t)); it.SKU != origSKU || len(it.Exchanges) != 0 || len(o.Charges) != 0 {
		t.Errorf("after the reset: %s, %d exchanges, %d charges", it.SKU, len(it.Exchanges), len(o.Charges))
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
