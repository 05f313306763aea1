package refagent

import (
	"context"
	"fmt"

	"github.com/chromedp/chromedp"
)

// The demo shop's pages, driven the way a person would: these are the
// "actions the browser took" that the agent checks terms against (A27).
// They only browse; the Poppy-Operation header comes back through the
// network events (A08).

// ExchangeItem opens the order page in tab, chooses replacement for item
// and presses Exchange (a form POST).
func ExchangeItem(tab context.Context, shop, order, item, replacement string) error {
	return chromedp.Do(tab,
		chromedp.Navigate(shop+"/orders/"+order),
		chromedp.SetValue(chromedp.ID("replacement-"+item), replacement, chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`form[action="/orders/%s/items/%s/exchange"] button`, order, item)), chromedp.NodeVisible),
	)
}

// CancelSubscription opens the subscription page and presses "Cancel
// subscription" (a form POST; signed in only).
func CancelSubscription(tab context.Context, shop string) error {
	return chromedp.Do(tab,
		chromedp.Navigate(shop+"/account/subscription"),
		chromedp.Click(chromedp.CSS(`form[action="/account/subscription/cancel"] button`), chromedp.NodeVisible),
	)
}

// ChangeDeliveryDate opens the fetch-driven deliveries page, sets the new
// date (YYYY-MM-DD) and presses "Change date": the page's script sends
// the JSON request through opsgate.fetch.
func ChangeDeliveryDate(tab context.Context, shop, delivery, date string) error {
	return chromedp.Do(tab,
		chromedp.Navigate(shop+"/deliveries"),
		chromedp.SetValue(chromedp.ID("date-"+delivery), date, chromedp.NodeVisible),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-delivery="%s"] form button`, delivery)), chromedp.NodeVisible),
	)
}
