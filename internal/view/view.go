// Package view holds the views of the kit's pages: the kit fills them
// (webkit, the gateway), package templates renders them, package pages
// writes them. A website never builds one: it gets the waiting page's from
// pages.WaitingOf, to place templates.WaitingCard in its own layout.
package view

// Waiting is what the waiting page and the waiting card show (§4 W65): the
// action waits for the person's approval in their agent, and Continue makes
// the request again once it is given (W62). It never carries the
// operation, its revision or its ref (W64): the agent gets those from the
// operations endpoint only.
//
// The Gate fills it; a website's own Kit.Refused gets it with
// pages.WaitingOf and may place templates.WaitingCard in its own layout.
type Waiting struct {
	// StatusURL is the status route the card's script asks (W93), with an
	// opaque handle; "" for none.
	StatusURL string
	// Continue is the control that makes the original request again.
	Continue Continue
	// Framework is the front-end framework whose page shows the card, as
	// internal/respond.Framework names it: "htmx" or "turbo", or "" for a
	// page of its own (a page load, a form's own submission). A
	// framework's card is a fragment of the website's page: its Continue
	// is that framework's request, which the kit's card.js (or the
	// framework itself) sends with the page's headers, never a plain form.
	Framework string
	// Frame is the Turbo frame the request came from (Turbo-Frame): the
	// card replaces the frame's content. "" for none: a Turbo card goes
	// over the page.
	Frame string
}

// Continue is the control that makes the original request again (§4 W62).
type Continue struct {
	// Method is "GET" (a link) or "POST" (a form); "" when the request
	// can't be repeated from the page. On an htmx card it may also be
	// PUT, PATCH or DELETE: htmx sends those.
	Method string
	// Action is the request's path and query on this website.
	Action string
	// Fields are the form's fields for POST, order and repeats kept.
	Fields []Field
	// Multipart posts the fields as multipart/form-data, as the browser
	// first sent them; else application/x-www-form-urlencoded.
	Multipart bool
	// Back is where to go when the request can't be repeated: a path on
	// this website.
	Back string
	// Why says why the request can't be repeated; "" when it can.
	Why string
	// TokenHeader names the header that carried the request's CSRF token
	// (such as X-CSRF-Token), which a plain form can't send: only a
	// script repeats such a request (W62). "" for none.
	TokenHeader string
}

// Field is one name=value pair of a form, in the order it was sent.
type Field struct {
	Name  string
	Value string
}

// Notice is every other page of the kit's: "try again shortly", "not
// known yet", "too many waiting", "join again", "confirm on the site", and
// the gateway's refusals. Its text says what was done (nothing, or not
// known yet) and never that an action failed (§7 W142); it never names the
// operation (W64).
type Notice struct {
	// Title is the document's title (before the site's name).
	Title string
	// Heading is the card's heading; Text its paragraphs.
	Heading string
	Text    []string
	// Why is the refusal's reason in words, on a website that explains
	// its refusals (webkit.Kit.ExplainRefusals): shown on the page, and a
	// script's JSON carries it as error_description. "" for none.
	Why string
	// Framework, when "htmx" or "turbo", makes the notice a card in the
	// website's page rather than a page (package pages sets it from the
	// request).
	Framework string
}
