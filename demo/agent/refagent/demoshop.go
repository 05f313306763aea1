package refagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// The demo shop's pages, driven the way a person would: these are the
// "actions the browser took" that the agent checks terms against (A27).
// They only browse; the Poppy-Operation header comes back through the
// network events (A08).
//
// Before they choose a value they read what the page offers, and fail
// with ErrNotOnPage, naming what it does offer, when the value is not
// there: a person can only pick what the page shows, and a value set
// behind the page's back would either not take or never be sent (the
// browser refuses to submit a date outside the input's min and max).

// ErrNotOnPage: the page does not offer what the action asked for (an
// item, a replacement SKU, a delivery, a date). The error's text says
// what the page offers instead.
var ErrNotOnPage = errors.New("refagent: not offered by the page")

// notOnPage is an ErrNotOnPage in words.
type notOnPage string

func (e notOnPage) Error() string        { return "refagent: " + string(e) }
func (e notOnPage) Is(target error) bool { return target == ErrNotOnPage }

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

type pageOption struct {
	Value string `json:"value"`
	Text  string `json:"text"`
}

func (o pageOption) String() string {
	if o.Text == "" || o.Text == o.Value {
		return o.Value
	}
	return fmt.Sprintf("%s (%s)", o.Value, o.Text)
}

func listOptions(opts []pageOption) string {
	s := make([]string, len(opts))
	for i, o := range opts {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

// DefaultReplacements are the SKUs ExchangeItem chooses, the first one
// offered, when it is given none: the demo's jacket to the Insulated M,
// and back again on the next run.
var DefaultReplacements = []string{"stormline-insulated-m", "stormline-m"}

// ExchangeItem opens the order page in tab, chooses replacement for item
// ("" for the first of DefaultReplacements the page offers) and presses
// Exchange (a form POST). It fails with ErrNotOnPage when the page has no
// exchange form for item or does not offer replacement (the item's
// current SKU is never offered).
func ExchangeItem(tab context.Context, shop, order, item, replacement string) error {
	type exchangePage struct {
		Found   bool         `json:"found"`
		Current string       `json:"current"`
		Items   []string     `json:"items"`
		Offered []pageOption `json:"offered"`
	}
	js := fmt.Sprintf(`(() => {
	const sel = document.getElementById(%s);
	const items = [...document.querySelectorAll('select[id^="replacement-"]')].map(s => s.id.slice("replacement-".length));
	if (!sel) return {found: false, items};
	const codes = sel.closest(".item")?.querySelectorAll(".item__main p.muted code") || [];
	const current = codes.length > 1 ? codes[1].textContent.trim() : "";
	return {found: true, items, current, offered: [...sel.options].map(o => ({value: o.value, text: o.textContent.trim().replace(/\s+/g, " ")}))};
})()`, jsString("replacement-"+item))
	if err := chromedp.Do(tab, chromedp.Navigate(shop+"/orders/"+order)); err != nil {
		return err
	}
	page, err := chromedp.Run(tab, chromedp.Evaluate[exchangePage](js))
	if err != nil {
		return err
	}
	switch {
	case !page.Found && len(page.Items) == 0:
		return notOnPage(fmt.Sprintf("the page of order %s has no item that can be exchanged (is the order right?)", order))
	case !page.Found:
		return notOnPage(fmt.Sprintf("order %s has no item %s that can be exchanged; its exchangeable items: %s", order, item, strings.Join(page.Items, ", ")))
	}
	if replacement == "" {
		// The default: the first of DefaultReplacements the page offers,
		// so that the same command works again (the jacket goes back and
		// forth), else whatever it offers first.
		for _, want := range DefaultReplacements {
			for _, o := range page.Offered {
				if replacement == "" && o.Value == want {
					replacement = want
				}
			}
		}
		if replacement == "" && len(page.Offered) > 0 {
			replacement = page.Offered[0].Value
		}
	}
	for _, o := range page.Offered {
		if o.Value == replacement {
			return chromedp.Do(tab,
				chromedp.SetValue(chromedp.ID("replacement-"+item), replacement, chromedp.NodeVisible),
				chromedp.Click(chromedp.CSS(fmt.Sprintf(`form[action="/orders/%s/items/%s/exchange"] button`, order, item)), chromedp.NodeVisible),
			)
		}
	}
	why := "the page doesn't offer it"
	if page.Current == replacement {
		why = "it is the item's current SKU"
	}
	return notOnPage(fmt.Sprintf("item %s on order %s can't be exchanged for %q: %s; the page offers: %s", item, order, replacement, why, listOptions(page.Offered)))
}

// CancelSubscription opens the subscription page and presses "Cancel
// subscription" (a form POST; signed in only). It fails with ErrNotOnPage
// when the page has no such button (the subscription is cancelled
// already, or the browser is not signed in).
func CancelSubscription(tab context.Context, shop string) error {
	const button = `form[action="/account/subscription/cancel"] button`
	if err := chromedp.Do(tab, chromedp.Navigate(shop+"/account/subscription")); err != nil {
		return err
	}
	found, err := chromedp.Run(tab, chromedp.Evaluate[bool](fmt.Sprintf(`!!document.querySelector(%s)`, jsString(button))))
	if err != nil {
		return err
	}
	if !found {
		return notOnPage("the subscription page has no Cancel subscription button: is the subscription cancelled already (resubscribe on that page, or Reset demo data on the account page), and is the browser signed in?")
	}
	return chromedp.Do(tab, chromedp.Click(chromedp.CSS(button), chromedp.NodeVisible))
}

// ChangeDeliveryDate opens the fetch-driven deliveries page, sets the new
// date (YYYY-MM-DD) and presses "Change date": the page's script sends
// the JSON request through opsgate.fetch. It fails with ErrNotOnPage when
// the page has no such delivery, or when date is outside the dates the
// page offers (its date input's min and max: the browser would not submit
// the form).
//
// date "" is the default: 9 days after the first date the page offers (10
// days from today), or the day after when the delivery is on that day
// already, so that the same command works again.
func ChangeDeliveryDate(tab context.Context, shop, delivery, date string) error {
	if _, err := time.Parse("2006-01-02", date); date != "" && err != nil {
		return fmt.Errorf("refagent: the date %q is not a day written YYYY-MM-DD", date)
	}
	type deliveriesPage struct {
		Found      bool     `json:"found"`
		Deliveries []string `json:"deliveries"`
		Min        string   `json:"min"`
		Max        string   `json:"max"`
		Value      string   `json:"value"`
	}
	js := fmt.Sprintf(`(() => {
	const input = document.getElementById(%s);
	const deliveries = [...document.querySelectorAll("[data-delivery]")].map(e => e.dataset.delivery);
	if (!input) return {found: false, deliveries};
	return {found: true, deliveries, min: input.min, max: input.max, value: input.defaultValue};
})()`, jsString("date-"+delivery))
	if err := chromedp.Do(tab, chromedp.Navigate(shop+"/deliveries")); err != nil {
		return err
	}
	page, err := chromedp.Run(tab, chromedp.Evaluate[deliveriesPage](js))
	if err != nil {
		return err
	}
	if !page.Found {
		on := "none"
		if len(page.Deliveries) > 0 {
			on = strings.Join(page.Deliveries, ", ")
		}
		return notOnPage(fmt.Sprintf("the deliveries page has no delivery %s; the deliveries on it: %s", delivery, on))
	}
	if date == "" {
		first, err := time.Parse("2006-01-02", page.Min)
		if err != nil {
			first = time.Now().UTC().AddDate(0, 0, 1)
		}
		date = first.AddDate(0, 0, 9).Format("2006-01-02")
		if date == page.Value {
			date = first.AddDate(0, 0, 10).Format("2006-01-02")
		}
	}
	// Dates written YYYY-MM-DD compare as strings.
	if (page.Min != "" && date < page.Min) || (page.Max != "" && date > page.Max) {
		return notOnPage(fmt.Sprintf("delivery %s can't be moved to %s: the page offers the dates from %s to %s", delivery, date, orAny(page.Min), orAny(page.Max)))
	}
	if date == page.Value {
		return notOnPage(fmt.Sprintf("delivery %s is on %s already: choose another date, from %s to %s", delivery, date, orAny(page.Min), orAny(page.Max)))
	}
	return chromedp.Do(tab,
		chromedp.SetValue(chromedp.ID("date-"+delivery), date, chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-delivery="%s"] form button`, delivery)), chromedp.NodeVisible),
	)
}

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}
