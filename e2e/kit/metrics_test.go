package kit_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opsgate/opsgate/endpoint"
	opsgateprom "github.com/opsgate/opsgate/webkit/metrics/prometheus"
)

// After a whole flow (join, 403, lookup, approval, performed) /metrics
// shows each step with bounded labels: the action's kind, never its key
// or an ID.
func TestMetricsAfterWholeFlow(t *testing.T) {
	t.Parallel()
	registry := prom.NewRegistry()
	obs, err := opsgateprom.New(registry)
	if err != nil {
		t.Fatal(err)
	}
	s := newMounted(t, obs, func(m *endpoint.Mount, exchange http.Handler, _ *func(*http.Request) string) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{order}/exchange", exchange)
		mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
		return m.Handler(mux)
	})
	s.wholeFlow()
	// A second approval of the used-up revision fails check 3 (W100).
	b := s.browser()
	b.join("ses_1")
	res, _ := b.exchange("ord_8", "S", nil)
	r2 := ref(t, res, "ses_1")
	_, op := s.agentCall(r2, "")
	approval := userApproval(op["operation"].(map[string]any))
	s.agentCall(r2, approval)
	b.exchange("ord_8", "S", nil)
	if status, _ := s.agentCall(r2, strings.Replace(approval, "apr_", "apr_again_", 1)); status == 204 {
		t.Fatal("approval of a performed operation recorded")
	}

	scrape, err := http.Get(s.server.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(scrape.Body)
	scrape.Body.Close()
	metrics := string(raw)
	for _, want := range []string{
		`opsgate_join_requests_total{outcome="joined",reason="signed_out"} 2`,
		`opsgate_gate_requests_total{kind="exchange",outcome="waiting",reason=""} 2`,
		`opsgate_gate_requests_total{kind="exchange",outcome="performed",reason=""} 2`,
		`opsgate_endpoint_requests_total{outcome="operation",reason=""} 2`,
		`opsgate_endpoint_requests_total{outcome="recorded",reason=""} 2`,
		`opsgate_endpoint_requests_total{outcome="refused",reason="check2"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Store latency: every step the flow needs was timed (how many calls
	// each takes is the Gate's and the endpoint's business).
	for _, step := range []string{"take", "finish", "lookup", "record"} {
		if !regexp.MustCompile(`(?m)^opsgate_store_step_duration_seconds_count\{step="` + step + `"\} [1-9]`).MatchString(metrics) {
			t.Errorf("/metrics lacks the latency of store step %s", step)
		}
	}
	for _, never := range []string{"ord_7", "ord_8", "ses_1", "usr_1", "exchange:"} {
		if strings.Contains(metrics, never) {
			t.Errorf("/metrics carries %q: a key or an ID as a label", never)
		}
	}
	if t.Failed() {
		t.Log(metrics)
	}
}
