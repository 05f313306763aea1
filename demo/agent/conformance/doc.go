// Package conformance checks a website's side of the Poppy `operations`
// extension v3 (websites): it plays a Personal Agent and its browser, with
// no Chromium, against any site and reports, case by case, which of the
// website rules (W01…) hold.
//
// The browser is an HTTP client with a cookie jar: it joins the site's
// browser_session_endpoint, crawls the site's pages for POST forms and for
// the requests htmx and Turbo send (elements with hx-post, hx-put,
// hx-patch or hx-delete; forms on a page that loads Turbo) and submits
// them until one answers a joined browser with 403 and a Poppy-Operation
// header (or uses the action Config.Action names). An htmx request goes
// as htmx sends it (HX-Request, the element's hx-headers, such as a CSRF
// token header), a Turbo form as Turbo sends it (its Accept, its
// X-CSRF-Token from the csrf-token <meta>, Turbo-Frame). The agent signs
// its own Session JWTs with keys it serves on a local address, looks
// references up at the operations endpoint, attacks the endpoint with bad
// Session JWTs, bad refs and bad approvals, approves the operation, has
// the browser repeat the request concurrently, and checks that the site
// performed it exactly once. With a token URL it does the same signed
// in, and checks the sign-in challenge and declines.
//
// A site behind its own login: Config.Cookies gives every browser the
// site's cookies (-cookie), or Config.Login signs in through the site's
// login form first (-login '/login email=…&password=…'), so that a CSRF
// token bound to that login is the browser's own. Values are never
// printed.
//
// The repeat is made as a browser makes it. For a form's own submission
// the checker reads the waiting page's Continue control (the kit's
// #opsgate-continue, or a form or link making the same method and URL)
// and submits what it says, after checking that it makes the original
// request again: a Continue that lost or changed the request's fields,
// as when a middleware read the body before the Gate, fails W62 with the
// fields named (never a CSRF token's value). A browser's own form
// submission sends no script's header. A request the page's script sends
// is repeated as that script does, the same request again with the same
// headers: a JSON request (opsgate.fetch), an htmx or Turbo request (the
// kit's card.js; the waiting card's own Continue must make the same
// request, W62), and one whose CSRF token is in a header.
//
// # What it sends, and what that performs
//
// Point it at a test or demo site: besides reading pages and talking to
// the operations endpoint, it sends requests that run the site's
// handlers.
//
//   - The crawl submits every POST form (and htmx PUT, PATCH, DELETE
//     request) it finds, once, from the joined browser, to learn which are
//     gated; a form the site does not gate is performed then (List shows
//     them without submitting any). Sign-in, sign-out, sign-up, reset,
//     search and session forms, and the join, are never submitted.
//   - The gated action is performed once through its operation: the
//     approved repeat, sent Concurrency times at once, must perform it
//     exactly once. Other terms, another User's browser, a browser's
//     request carrying Poppy-Approval and the requests after the action
//     must perform nothing.
//   - Browsers joined without the operations extension send it twice (a
//     form and a script): the kit refuses them (extension_required), a
//     site with its own approval flow answers with that flow.
//   - A browser joined to no Session sends it twice (a form and a
//     script): an ordinary browser goes straight to the handler (W07), so
//     this may perform it twice more, on a second gated action when the
//     crawl found one, else on the checked one.
//   - With a token URL, the signed-in part performs the account's action
//     once more when the site accepts the agent's approval of it.
//
// So Config.Performed, the site's count of the checked action, must end
// at 1 when the crawl found two gated actions (the unjoined browser's
// requests go to the second), and may end at up to 3 otherwise.
//
// From the command line:
//
//	go run ./demo/agent check -site http://localhost:8080 -token-url http://localhost:8080/demo/token
//	go run ./demo/agent check -site http://localhost:8080 -list      # the forms it would submit; none is
//	go run ./demo/agent check -site http://localhost:8080 -v \
//		-action 'POST /api/orders/ord_1/exchange {"size":"L"}' -header 'X-CSRF-Token: …'
//
// -v prints each step and the body of each answer a case did not expect.
//
// From a website's own tests:
//
//	func TestConformance(t *testing.T) {
//		srv := httptest.NewServer(mySite) // agents on 127.0.0.1 must be accepted
//		defer srv.Close()
//		conformance.Test(t, conformance.Config{Site: srv.URL, TokenURL: srv.URL + "/test/token"})
//	}
//
// The site fetches the checker's agent metadata from Config.Listen (by
// default 127.0.0.1 on a free port): a site that accepts only HTTPS agent
// URLs needs Config.AgentURL pointing at a tunnel to it.
package conformance
