// Package conformance checks a website's side of the Poppy `operations`
// extension v3 (websites): it plays a Personal Agent and its browser, with
// no Chromium, against any site and reports, case by case, which of the
// website rules (W01…) hold.
//
// The browser is an HTTP client with a cookie jar: it joins the site's
// browser_session_endpoint, crawls the site's pages for POST forms and
// submits them until one answers a joined browser with 403 and a
// Poppy-Operation header (or uses the action Config.Action names). The
// agent signs its own Session JWTs with keys it serves on a local address,
// looks references up at the operations endpoint, attacks the endpoint
// with bad Session JWTs, bad refs and bad approvals, approves the
// operation, has the browser press the waiting page's Continue
// concurrently, and checks that the site performed it exactly once. With a
// token URL it does the same signed in, and checks the sign-in challenge
// and declines.
//
// Continue is pressed as a browser presses it: the checker reads the
// waiting page's Continue control (the kit's #opsgate-continue, or a form
// or link making the same method and URL) and submits what it says, after
// checking that it makes the original request again. A Continue that lost
// or changed the request's fields, as when a middleware read the body
// before the Gate, fails W62 with the fields named (never a CSRF token's
// value). A page script's JSON 403 has no page: the checker sends that
// request again, as opsgate.fetch does.
//
// The checker performs the gated action once (and, when the site accepts
// agent approvals of the signed-in action, that one too), and submits the
// forms it finds to learn which are gated: run it against a test or demo
// site, or name the action with Config.Action (and the headers a page
// script adds to it, such as a CSRF header, with Config.Header). List
// shows the forms it would submit without submitting any.
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
