package shop

import (
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// newMetricsShop is newHarnessShop with Config.Metrics: the shop as
// `go run ./demo` serves it.
func newMetricsShop(t *testing.T, metrics bool) (*Server, *webkittest.Site) {
	t.Helper()
	c := testclock.At(t0)
	site := webkittest.New("https://shop.test")
	site.Clock = c.Now
	s, err := NewServer(Config{BaseURL: site.Origin, Clock: c.Now, Logger: quiet, HTTPClient: site.Resolver().HTTPClient, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	site.Handler = s.Handler()
	site.IssueAccessToken = s.IssueAccessToken
	return s, site
}

// After whole flows through the shop's own handler (a join, the gated
// request's 403 with a ref, the agent's lookup and approval at the
// endpoint, the browser's Continue performing it once), /metrics counts
// the Gate's, the endpoint's and the join's answers and the store's steps,
// labelled by fixed sets and the shop's action kinds only: never a
// Session, a token, an operation_id or a ref.
func TestMetricsAfterFlows(t *testing.T) {
	t.Parallel()
	s, site := newMetricsShop(t, true)
	var issued []string // the access tokens of the signed-in Sessions
	site.IssueAccessToken = func(clientID, account string) (string, error) {
		tok, err := s.IssueAccessToken(clientID, account)
		issued = append(issued, tok)
		return tok, err
	}
	agent := site.NewAgent()
	out := agent.Session("usr_metrics_1")
	in := agent.SignedInSession("usr_metrics_1", shopdb.DemoAccount)
	bo, bi := joinAs(t, out), joinAs(t, in)

	first := exchangeTo(bo, "stormline-insulated-m")
	_, opExchange := perform(t, out, bo, first)
	second := bi.PostForm("/account/subscription/cancel", nil)
	_, opCancel := perform(t, in, bi, second)

	res, metrics := do(t, s, "GET", PathMetrics, nil, nil)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET %s: %d %s", PathMetrics, res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`opsgate_join_requests_total{outcome="joined",reason="signed_out"}`,
		`opsgate_join_requests_total{outcome="joined",reason="signed_in"}`,
		`opsgate_gate_requests_total{kind="exchange",outcome="waiting",reason=""}`,
		`opsgate_gate_requests_total{kind="exchange",outcome="performed",reason=""}`,
		`opsgate_gate_requests_total{kind="cancel_subscription",outcome="waiting",reason=""}`,
		`opsgate_gate_requests_total{kind="cancel_subscription",outcome="performed",reason=""}`,
		`opsgate_endpoint_requests_total{outcome="operation",reason=""}`,
		`opsgate_endpoint_requests_total{outcome="recorded",reason=""}`,
		`opsgate_endpoint_requests_total{outcome="status",reason=""}`,
		`opsgate_store_step_duration_seconds_count{step="take"}`,
		`opsgate_store_step_duration_seconds_count{step="finish"}`,
		`opsgate_store_step_duration_seconds_count{step="lookup"}`,
		`opsgate_store_step_duration_seconds_count{step="record"}`,
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + ` [1-9]`).MatchString(metrics) {
			t.Errorf("/metrics lacks a non-zero %s", want)
		}
	}

	// No Session, token, operation_id or ref, nor the agent or its User.
	never := map[string]string{
		"signed-out sid": out.SID, "signed-in sid": in.SID, "access token": issued[0],
		"exchange ref": first.Ref, "cancel ref": second.Ref,
		"exchange operation_id": opExchange, "cancel operation_id": opCancel,
		"client_id": agent.ClientID(), "User": "usr_metrics_1", "account": shopdb.DemoAccount,
		"order": "ord_7Hk2", "Session prefix": "ses_",
	}
	for what, v := range never {
		if v == "" {
			t.Fatalf("%s is empty: the test checks nothing", what)
		}
		if strings.Contains(metrics, v) {
			t.Errorf("/metrics carries the %s", what)
		}
	}
	if t.Failed() {
		t.Log(metrics)
	}

	// Off the shop's navigation: no page links to it.
	for _, p := range []string{"/", "/account", "/orders/ord_7Hk2", "/deliveries"} {
		if _, body := do(t, s, "GET", p, nil, nil); strings.Contains(body, PathMetrics) {
			t.Errorf("GET %s links to %s", p, PathMetrics)
		}
	}
}

// Without Config.Metrics there is no /metrics.
func TestMetricsOff(t *testing.T) {
	t.Parallel()
	s, _ := newMetricsShop(t, false)
	if res, _ := do(t, s, "GET", PathMetrics, nil, nil); res.StatusCode != 404 {
		t.Fatalf("GET %s without Metrics: %d, want 404", PathMetrics, res.StatusCode)
	}
	// The Observer is "What the shop saw" (seen.go) alone, with no
	// metrics behind it.
	if o, ok := s.Kit().Observer.(seenObserver); !ok || o.next != nil {
		t.Fatalf("Observer %#v without Metrics", s.Kit().Observer)
	}
}
