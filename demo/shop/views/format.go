// Package views renders the demo shop's pages (templ components).
package views

import (
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
)

// ShopName is the demo shop's name.
const ShopName = "Ridgeline Outfitters"

// Chrome is what every page's frame shows.
type Chrome struct {
	Title  string
	Active string // "shop", "account", "deliveries"
	// Customer is the signed-in customer's name; "" when signed out.
	Customer string
	// Login says how the browser is signed in: "shop" (the shop's own
	// login), "agent" (a join with an access token), "" signed out.
	Login string
	// Session is the sid of the Poppy Session the browser is joined to;
	// "" for an ordinary browser.
	Session string
	// Scripts are extra script URLs (files only: the pages have no inline
	// script, for a strict Content-Security-Policy).
	Scripts []string
	// Path is the page's own path, for the sign-in form's return.
	Path string
}

func longDate(t time.Time) string  { return t.Format("Monday, 2 January 2006") }
func shortDate(t time.Time) string { return t.Format("2 Jan 2006") }
func isoDate(t time.Time) string   { return t.Format("2006-01-02") }

func signedMoney(m shopdb.Money) string {
	if m > 0 {
		return "+" + m.String()
	}
	return m.String()
}

func differenceText(m shopdb.Money) string {
	switch {
	case m > 0:
		return m.String() + " more"
	case m < 0:
		return (-m).String() + " back"
	}
	return "same price"
}

func tileClass(p string) string { return "tile tile--" + p }
