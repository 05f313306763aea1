package prometheus_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opsgate/opsgate/webkit"
	opsgateprom "github.com/opsgate/opsgate/webkit/metrics/prometheus"
)

// Example counts a joined browser's gated request, which waits for
// approval, and serves the counters at /metrics.
func Example() {
	registry := prom.NewRegistry()
	obs, err := opsgateprom.New(registry)
	if err != nil {
		panic(err)
	}
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Observer = obs

	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{
			Key:   "exchange:" + r.PathValue("order"), // holds an ID: never a label
			Kind:  "exchange",                         // a label
			Terms: map[string]string{"order_id": r.PathValue("order"), "size": "L"},
		}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))

	// A browser joined to an agent's Session asks for an exchange.
	joined := httptest.NewRecorder()
	kit.Sessions.Bind(joined, httptest.NewRequest("POST", "/poppy/join", nil), webkit.Session{
		ID: "ses_1", Agent: "https://agent.example/client", User: "usr_1", Extensions: map[string]string{"operations": "3"},
	})
	r := httptest.NewRequest("POST", "/orders/ord_7Hk2/exchange", nil)
	r.AddCookie(joined.Result().Cookies()[0])
	mux.ServeHTTP(httptest.NewRecorder(), r)

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, "opsgate_gate_requests_total") || strings.HasPrefix(line, "opsgate_store_step_duration_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// opsgate_gate_requests_total{kind="exchange",outcome="waiting",reason=""} 1
	// opsgate_store_step_duration_seconds_count{step="take"} 1
}
