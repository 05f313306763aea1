package conformance_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
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
