package conformance_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/agent/conformance"
	"github.com/opsgate/opsgate/demo/shop"
)

func run(t *testing.T, s *toy, counted bool) conformance.Report {
	t.Helper()
	var log bytes.Buffer
	cfg := conformance.Config{Site: s.url, TokenURL: s.url + "/test/token", Log: &log}
	if counted {
		cfg.Performed = func() int { return s.count("exchange:1") }
	}
	rep, err := conformance.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func report(rep conformance.Report) string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// A site built on the kit as documented passes every case.
func TestToyPasses(t *testing.T) {
	t.Parallel()
	s := newToy(t, "")
	rep := run(t, s, true)
	if rep.Failed() {
		t.Fatalf("a conforming site failed:\n%s", report(rep))
	}
	if _, fail, skip := rep.Counts(); fail != 0 || skip != 0 {
		t.Fatalf("skipped cases against a site that has everything:\n%s", report(rep))
	}
	if n := s.count("exchange:1"); n != 1 {
		t.Fatalf("the checker performed the action %d times, want once", n)
	}
	t.Log(report(rep))
}

// Each broken site is caught by the case that proves the rule it breaks.
func TestBrokenSitesAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fault string
		case_ string // the start of the case's name
		// counted gives the checker the site's own count of performances;
		// false makes it judge from the site's answers and pages only, as
		// the command line does.
		counted bool
	}{
		{faultPerformsWithoutApproval, "the 403 and its headers", false},
		{faultPerformsWithoutApproval, "the 403 and its headers", true},
		{faultOperationInPage, "page and JSON answers", false},
		{faultRecordsDeclined, "signed in: a declined approval", false},
		{faultReusesRevision, "new terms", false},
		{faultPerformsTwice, "concurrent repeats", false},
		{faultAcceptsOtherUser, "another User and another Session", false},
		{fault500OnBadHeader, "Poppy-Approval syntax", false},
		{fault500OnBadHeader, "no 5xx", false},
		{faultUnjoinedGetsOperation, "unjoined browsers", false},
		{faultUndeclaredGetsOperation, "undeclared browsers", false},
		{faultNoStore, "the 403 and its headers", false},
		{faultUncheckedJWT, "Session JWT attacks", false},
		{faultNoChallenge, "endpoint refusals", false},
		{faultTermsMissTheSize, "new terms", false},
		{faultNoSignInChallenge, "signed in: an account's operation", false},
		{faultBrowserApproval, "an approval through the browser", false},
		// The issue-22 bug: the checker presses the page's Continue, which
		// lost the form's fields, where it used to send the request again.
		{faultEmptyContinue, "page and JSON answers", false},
		{faultEmptyContinue, "record and perform once", false},
		{faultEmptyContinue, "record and perform once", true},
	} {
		name := tc.fault
		if tc.counted {
			name += " (counted)"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rep := run(t, newToy(t, tc.fault), tc.counted)
			r, ok := rep.Result(tc.case_)
			if !ok {
				t.Fatalf("no case %q in the report:\n%s", tc.case_, report(rep))
			}
			if r.Status != conformance.Fail {
				t.Fatalf("%q was not caught by %q (%s):\n%s", tc.fault, tc.case_, r.Status, report(rep))
			}
			if !rep.Failed() {
				t.Fatal("Failed() is false with a failing case")
			}
			t.Logf("caught: %s: %v", r.Name, r.Reasons)
		})
	}
}

// A website whose middleware reads the form before the Gate passes: nosurf
// inside the Mount, whose token field the crawl finds on the form and the
// waiting page's Continue must carry, and a middleware calling ParseForm.
// The checker presses Continue, so these fail when the Gate does not keep
// the form the middleware parsed (before b08cf00).
func TestToyBehindFormReadingMiddlewarePasses(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{variantNosurf, variantParsesForm} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			s := newToy(t, variant)
			rep := run(t, s, true)
			if _, fail, skip := rep.Counts(); fail != 0 || skip != 0 {
				t.Fatalf("%s: %d failed, %d skipped:\n%s", variant, fail, skip, report(rep))
			}
			if n := s.count("exchange:1"); n != 1 {
				t.Fatalf("the checker performed the action %d times, want once", n)
			}
			if variant == variantNosurf && !strings.Contains(rep.Action, "csrf_token=…") {
				t.Errorf("the gated action %q does not show the token field blanked out", rep.Action)
			}
		})
	}
}

// The report names the fields the Continue form lost, never a token's
// value.
func TestEmptyContinueReported(t *testing.T) {
	t.Parallel()
	s := newToy(t, faultEmptyContinue)
	rep := run(t, s, true)
	r, _ := rep.Result("record and perform once")
	msg := strings.Join(r.Reasons, "; ")
	for _, want := range []string{"W62", "fields the request sent that Continue does not", `order="1"`, `size="M"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the reasons %q do not say %q", msg, want)
		}
	}
	if n := s.count("exchange:1"); n != 0 {
		t.Errorf("performed %d times through an empty Continue", n)
	}
}

// The demo shop passes every case, twice in a row on the same server:
// each run is a new agent User, and so gets its own sandbox of the demo's
// data, and the signed-in part declines rather than performs.
func TestDemoPassesTwice(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	s, err := shop.NewServer(shop.Config{BaseURL: origin, AllowLocal: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)
	for run := range 2 {
		rep, err := conformance.Run(t.Context(), conformance.Config{Site: origin, TokenURL: origin + shop.PathToken})
		if err != nil {
			t.Fatal(err)
		}
		if _, fail, skip := rep.Counts(); fail != 0 || skip != 0 {
			t.Fatalf("run %d against the demo: %d failed, %d skipped:\n%s", run+1, fail, skip, report(rep))
		}
		// The API and MCP modes: the P and M rows they can observe.
		for via, action := range map[string]string{
			"api": `POST /api/orders/ord_7Hk2/items/itm_4Qa/exchanges {"replacement_sku":"stormline-insulated-m"}`,
			"mcp": `exchange_item {"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`,
		} {
			rep, err := conformance.Run(t.Context(), conformance.Config{Site: origin, Via: via, Action: action, TokenURL: origin + shop.PathToken})
			if err != nil {
				t.Fatal(err)
			}
			if pass, fail, skip := rep.Counts(); fail != 0 || skip != 0 || pass < 11 {
				t.Fatalf("run %d of -via %s against the demo: %d passed, %d failed, %d skipped:\n%s", run+1, via, pass, fail, skip, report(rep))
			}
		}
	}
}

// Test reports each case as a subtest, for a website's own go test.
func TestAsSubtests(t *testing.T) {
	t.Parallel()
	s := newToy(t, "")
	rep := conformance.Test(t, conformance.Config{Site: s.url, TokenURL: s.url + "/test/token"})
	if len(rep.Results) < 15 {
		t.Fatalf("only %d cases", len(rep.Results))
	}
}

// List crawls and returns the forms Run would submit, and those it never
// does, submitting none: no POST reaches the site's own routes, nothing is
// performed. A CSRF token's value is never shown.
func TestListSubmitsNothing(t *testing.T) {
	t.Parallel()
	s := newToy(t, variantNosurf)
	l, err := conformance.List(t.Context(), conformance.Config{Site: s.url, TokenURL: s.url + "/test/token"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	l.WriteText(&b)
	out := b.String()
	if n := s.posts.Load(); n != 0 {
		t.Fatalf("List submitted %d forms:\n%s", n, out)
	}
	for _, want := range []string{
		"1. POST " + s.url + "/orders/1/exchange csrf_token=…&order=1&size=M",
		"also with size=L or S",
		"POST " + s.url + "/orders/2/exchange",
		"POST " + s.url + "/account/close",
		"never submitted:\n  POST " + s.url + "/signout (its path names \"signout\"",
		"(none was submitted)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the listing lacks %q:\n%s", want, out)
		}
	}
	tokenValue := regexp.MustCompile(`csrf_token=[^&\s…]`)
	if tokenValue.MatchString(out) {
		t.Errorf("the listing shows a token's value:\n%s", out)
	}
	if n := s.count("exchange:1") + s.count("exchange:2") + s.count("close"); n != 0 {
		t.Errorf("List performed %d actions", n)
	}

	named, err := conformance.List(t.Context(), conformance.Config{Site: s.url, Action: "POST /orders/1/exchange size=L&_csrf=abc"})
	if err != nil || len(named.Forms) != 1 || named.Forms[0].Fields != "_csrf=…&size=L" || s.posts.Load() != 0 {
		t.Errorf("with Action: %+v %v", named, err)
	}
}

// With Log, an answer a case did not expect has its body written there,
// bounded, with the values of token fields and JSON members blanked out.
func TestLogShowsUnexpectedBodies(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `<p>Forbidden: the CSRF check refused this request.</p><form><input type="hidden" name="csrf_token" value="SECRET-1"></form><meta name="csrf-token" content="SECRET-2"><script>var csrfToken = "SECRET-3";</script><p>%s</p>`, long)
	}))
	defer srv.Close()
	var log bytes.Buffer
	rep, err := conformance.Run(t.Context(), conformance.Config{Site: srv.URL, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Failed() {
		t.Fatal("a site without poppy.json passed")
	}
	got := log.String()
	if !strings.Contains(got, "the CSRF check refused this request") || !strings.Contains(got, "bytes in all)") {
		t.Errorf("the log does not show the body, bounded:\n%.3000s", got)
	}
	if strings.Contains(got, "SECRET") {
		t.Errorf("the log shows a token:\n%.3000s", got)
	}
	if len(got) > 4<<10 {
		t.Errorf("the log is %d bytes: the body is not bounded", len(got))
	}
}

// A script's action named with Action: its JSON 403 has no page, so the
// checker sends the request again (as opsgate.fetch does), with Header,
// the page script's CSRF header, on each request. Without the header the
// site refuses it, and Log shows why.
func TestJSONActionWithHeader(t *testing.T) {
	t.Parallel()
	s := newToy(t, "")
	action := `POST /api/orders/1/exchange {"size":"L"}`
	rep, err := conformance.Run(t.Context(), conformance.Config{
		Site: s.url, TokenURL: s.url + "/test/token", Action: action,
		Header:    http.Header{"X-Csrf-Token": {toyCSRFHeader}},
		Performed: func() int { return s.count("exchange:1") },
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() {
		t.Fatalf("a JSON action with its CSRF header:\n%s", report(rep))
	}
	// (The unjoined and undeclared browsers' requests are the site's own
	// flow, which performs them: Performed counts those too, after.)
	for _, name := range []string{"record and perform once", "concurrent repeats", "an approval through the browser"} {
		if r, _ := rep.Result(name); r.Status != conformance.Pass {
			t.Fatalf("%s: %s:\n%s", name, r.Status, report(rep))
		}
	}

	var log bytes.Buffer
	rep, err = conformance.Run(t.Context(), conformance.Config{Site: s.url, Action: action, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rep.Result("join and find"); r.Status != conformance.Fail {
		t.Fatalf("without the header: %s", report(rep))
	}
	if !strings.Contains(log.String(), "the X-CSRF-Token header is missing or wrong") {
		t.Errorf("the log does not show the refusal's body:\n%s", log.String())
	}
}
