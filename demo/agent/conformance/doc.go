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
// operation, has the browser repeat the request concurrently, and checks
// that the site performed it exactly once. With a token URL it does the
// same signed in, and checks the sign-in challenge and declines.
//
// The checker performs the gated action once (and, when the site accepts
// agent approvals of the signed-in action, that one too), and submits the
// forms it finds to learn which are gated: run it against a test or demo
// site, or name the action with Config.Action.
//
// From the command line:
//
//	go run ./demo/agent check -site http://localhost:8080 -token-url http://localhost:8080/demo/token
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
