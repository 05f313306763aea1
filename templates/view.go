// Package templates holds Chrome, the website's own frame around the
// kit's browser-facing pages (§4 "Websites"; see webkit/RULES.md): set it
// as Kit.Chrome. The kit renders its pages (the waiting page, 503, 429) as
// a-h/templ components in that frame, and templ escapes every value they
// print.
package templates

import "github.com/a-h/templ"

// Chrome is the website's own frame around the kit's pages, so that the
// person waiting for approval is still on the website: its name, a way
// back, its stylesheets, its own header and footer. The zero Chrome is the
// kit's plain card.
//
// It is the same on every page: it never carries the operation, its
// revision or its terms (W64), and the Header and Footer components must
// not print them either.
//
// # Style
//
// The kit's stylesheet (opsgate.css, a file the kit serves: no inline
// style, so a style-src 'self' Content-Security-Policy holds) is linked
// first and the website's Stylesheets after it, so the website's win. In
// a website's chrome the kit styles only the card and the frame around
// it; the page (body, header, footer) is the website's.
//
// The card's colours are CSS variables. Each default is
// light-dark(light, dark):
//
//	--opsgate-fg         the card's text              #1d2330  #e8eaf0
//	--opsgate-muted      the status line's text       #5b6475  #a4acbd
//	--opsgate-card       the card's background        #ffffff  #1d212b
//	--opsgate-border     the card's border            #dde1ea  #2e3442
//	--opsgate-link       links in the card            #2754c5  #9db8ff
//	--opsgate-accent     Continue's background, and   #2754c5  #7ea2ff
//	                     the status line's dot
//	--opsgate-accent-fg  Continue's text              #ffffff  #14171e
//	--opsgate-bg         the page's background, on    #f4f5f8  #14171e
//	                     the plain page only
//
// Which of the pair a page uses follows its color-scheme. The plain page
// (the zero Chrome) follows the visitor's prefers-color-scheme. In a
// website's chrome the kit sets no color-scheme, so the card follows the
// website's: one that never says color-scheme gets a light card in dark
// mode too, and one whose stylesheet says
// :root { color-scheme: light dark } gets a dark card in dark mode. The
// card sets its own text colour with its background, so it reads
// whatever the website's body text colour is.
//
// A website sets them in its own stylesheet, in pairs (text with its
// background), for both schemes with light-dark() if it has a dark mode:
//
//	:root { --opsgate-accent: #8b1f1f; --opsgate-accent-fg: #fff; }
//	:root { --opsgate-card: light-dark(#fffdf7, #202124); }
//
// The kit's rules have no specificity (:where()), so a website's rule
// for the same element wins: its button {} styles the Continue button
// (give it a color with its background), its h1 {} and p {} the card's
// text, its a {} the card's links. Two keep the class's weight, so that
// the card stays readable: .opsgate-card (the card's box and colours,
// whatever the website says of main {}), and a Continue that is a link,
// .opsgate-button:any-link, whose text stays on its own background
// whatever the website says of a {}. A website's .opsgate-card {} rule
// still wins over the first.
type Chrome struct {
	// SiteName is the website's name: in the title, and as a link home at
	// the top when there is no Header.
	SiteName string
	// HomeURL is where the site name links; "" is "/".
	HomeURL string
	// BackURL is a way back under the card, a path on the website (such as
	// "/orders"); "" for none. BackLabel is its text; "" is "Back to "
	// SiteName, or "Back".
	BackURL, BackLabel string
	// Stylesheets are the website's own, linked after the kit's so that
	// they win (see Style above, in the doc of Chrome); same-origin URLs
	// keep a style-src 'self' policy.
	Stylesheets []string
	// Header and Footer are the website's own masthead and footer,
	// rendered around the card with the request's context.
	Header, Footer templ.Component
}
