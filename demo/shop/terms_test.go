package shop

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
)

// outcome is one outcome the shop can offer: its terms and summary.
type outcome struct {
	name    string
	terms   any
	summary string
}

// everyOutcome lists the terms of every outcome the demo's actions can
// offer: every exchange of every SKU for each of its options, every
// cancellation and resubscription over two months of days (the refund and
// dates change daily), every new delivery date open on each of those days.
func everyOutcome(t *testing.T) []outcome {
	t.Helper()
	start := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	db := shopdb.New(start)
	var out []outcome
	for _, p := range db.Products() {
		for _, from := range p.SKUs {
			for _, to := range db.ExchangeOptions(from.ID) {
				plan := shopdb.ExchangePlan{OrderID: "ord_7Hk2", ItemID: "itm_4Qa", From: from, To: to, PriceDifference: to.Price - from.Price}
				out = append(out, outcome{"exchange " + from.ID + " for " + to.ID, exchangeTerms(plan), exchangeSummary(plan)})
			}
		}
	}
	for day := range 62 {
		now := start.AddDate(0, 0, day)
		db := shopdb.New(start)
		cancel, err := db.PlanCancel(shopdb.DemoAccount, now)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, outcome{fmt.Sprintf("cancel on day %d", day), cancelTerms(cancel), cancelSummary(cancel)})
		if _, err := db.CancelSubscription(shopdb.DemoAccount, cancel, now); err != nil {
			t.Fatal(err)
		}
		re, err := db.PlanResubscribe(shopdb.DemoAccount, now)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, outcome{fmt.Sprintf("resubscribe on day %d", day), resubscribeTerms(re), resubscribeSummary(re)})
		d, _ := db.Delivery(shopdb.DemoAccount, "del_2Wn8")
		for ahead := shopdb.EarliestDays; ahead <= shopdb.LatestDays; ahead++ {
			plan, err := db.PlanReschedule(shopdb.DemoAccount, d.ID, shopdb.Day(now).AddDate(0, 0, ahead), now)
			if err != nil {
				continue // the day it is already on
			}
			out = append(out, outcome{fmt.Sprintf("move delivery on day %d by %d", day, ahead), rescheduleTerms(plan), rescheduleSummary(plan)})
		}
	}
	return out
}

// leaves flattens JSON terms into path → string value.
func leaves(prefix string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			leaves(strings.TrimPrefix(prefix+"."+k, "."), x, out)
		}
	case string:
		out[prefix] = v
	default:
		out[prefix] = fmt.Sprint(v)
	}
}

// missingFromSummary returns each amount and date of terms that summary
// doesn't say: an amount as its figures ("70.00", the sign said in words),
// a date as 2026-10-08, "8 October 2026" or "October 8, 2026".
func missingFromSummary(terms any, summary string) []string {
	raw, _ := json.Marshal(terms)
	var v any
	json.Unmarshal(raw, &v)
	flat := map[string]string{}
	leaves("", v, flat)
	var missing []string
	for path, val := range flat {
		if strings.HasSuffix(path, "amount") {
			if !strings.Contains(summary, strings.TrimPrefix(val, "-")) {
				missing = append(missing, path+"="+val)
			}
			continue
		}
		if day, err := time.Parse(dateLayout, val); err == nil {
			if !strings.Contains(summary, val) && !strings.Contains(summary, day.Format("2 January 2006")) && !strings.Contains(summary, day.Format("January 2, 2006")) {
				missing = append(missing, path+"="+val)
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// TestW30W31EveryTermInSummary: for every outcome the shop can offer,
// every amount and date in the terms is in the summary too (W31), in
// plain text without links or HTML (W29).
func TestW30W31EveryTermInSummary(t *testing.T) {
	t.Parallel()
	all := everyOutcome(t)
	if len(all) < 1000 {
		t.Fatalf("only %d outcomes enumerated", len(all))
	}
	kinds := map[string]int{}
	for _, o := range all {
		kinds[strings.Fields(o.name)[0]]++
		if m := missingFromSummary(o.terms, o.summary); len(m) > 0 {
			t.Errorf("W31 %s: the summary %q doesn't say %v", o.name, o.summary, m)
		}
		if strings.ContainsAny(o.summary, "<>[]") || strings.Contains(o.summary, "http") {
			t.Errorf("W29 %s: the summary has markup or a link: %q", o.name, o.summary)
		}
	}
	for _, k := range []string{"exchange", "cancel", "resubscribe", "move"} {
		if kinds[k] == 0 {
			t.Errorf("no %s outcome enumerated", k)
		}
	}
	t.Run("W31 the check itself catches a summary without the amount or date", func(t *testing.T) {
		terms := CancelTerms{SubscriptionID: "sub_1", EffectiveDate: "2026-10-08", Refund: Amount{"19.33", "USD"}}
		if m := missingFromSummary(terms, "Cancel the subscription."); len(m) != 2 {
			t.Errorf("missing %v, want the refund and the date", m)
		}
	})
}

// TestW30InputsChangeTerms: every input that changes what an action does
// changes its terms: each replacement, each new date, each day's refund.
func TestW30InputsChangeTerms(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, o := range everyOutcome(t) {
		raw, _ := json.Marshal(o.terms)
		if other, ok := seen[string(raw)]; ok && strings.Fields(other)[0] == strings.Fields(o.name)[0] && !sameDelivery(other, o.name) {
			// The same terms from different inputs would let one approval
			// cover two different actions.
			t.Errorf("W30 %s and %s share terms %s", other, o.name, raw)
		}
		seen[string(raw)] = o.name
	}
}

// sameDelivery: moving the delivery to the same date from two different
// "today"s is the same action, with the same terms.
func sameDelivery(a, b string) bool {
	return strings.HasPrefix(a, "move delivery") && strings.HasPrefix(b, "move delivery")
}
