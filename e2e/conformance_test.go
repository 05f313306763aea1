package e2e_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/demo/agent/conformance"
	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/store/redisstore"
)

// The conformance checker (`go run ./demo/agent check`) passes every case
// against the demo shop on the stores it runs on: the embedded miniredis of
// `go run ./demo`, and a real redis-server, whose Lua scripts take the
// checker's concurrent repeats. Twice in a row on the same server, as an
// agent developer would run it.
func TestConformanceOfTheDemo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) *redis.Client
		opts   redisstore.Options
	}{
		// As `go run ./demo` configures its embedded store.
		{"miniredis", func(t *testing.T) *redis.Client { _, c := redistest.Mini(t); return c }, redisstore.Options{Durability: redisstore.DurableNone}},
		{"redis-server", func(t *testing.T) *redis.Client { return redistest.Server(t) }, redisstore.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := redisstore.New(tc.client(t), tc.opts)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			origin := "http://" + ln.Addr().String()
			s, err := shop.NewServer(shop.Config{BaseURL: origin, Store: st, AllowLocal: true, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
			srv.Start()
			t.Cleanup(srv.Close)
			for run := 1; run <= 2; run++ {
				rep, err := conformance.Run(t.Context(), conformance.Config{Site: origin, TokenURL: origin + shop.PathToken})
				if err != nil {
					t.Fatal(err)
				}
				if _, fail, skip := rep.Counts(); fail != 0 || skip != 0 {
					var b bytes.Buffer
					rep.WriteText(&b)
					t.Fatalf("run %d: %d failed, %d skipped:\n%s", run, fail, skip, b.String())
				}
				if r, _ := rep.Result("no 5xx"); len(r.Reasons) > 1 {
					t.Logf("run %d: %v", run, r.Reasons)
				}
				// The checker's unjoined browser (W07) changed nothing in
				// the copy of the data that visitors without an agent see
				// (issue 37).
				o, _ := s.DB().Order(shopdb.DemoAccount, "ord_7Hk2")
				d, _ := s.DB().Delivery(shopdb.DemoAccount, "del_2Wn8")
				if it := o.Items[0]; it.SKU != "stormline-m" || len(it.Exchanges) != 0 || len(d.Changes) != 0 {
					t.Errorf("run %d changed the shared copy: item %s after %d exchanges, %d delivery changes", run, it.SKU, len(it.Exchanges), len(d.Changes))
				}
			}
		})
	}
}
