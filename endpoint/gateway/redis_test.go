package gateway

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// W135 Two gateways behind one load balancer, sharing a real Redis
// (durability: disk) and the cookie keys: each request goes to the next
// instance, and the approved exchange is still performed once.
func TestGatewayRedisTwoInstances(t *testing.T) {
	client := redistest.Server(t)
	up := newShop(t)
	setKeys(t)
	cfg := strings.NewReplacer("UPSTREAM", up.srv.URL,
		"store: memory", "store:\n  redis: redis://"+client.Options().Addr+"/0\n  durability: disk\n  prefix: \"gw:\"").Replace(shopConfig)
	site := webkittest.New("https://shop.example")
	var instances []http.Handler
	for range 2 {
		c, err := Parse("gateway.yaml", []byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		g, err := newGateway(c, slog.New(slog.DiscardHandler), options{Resolver: site.Resolver(), AccessTokens: site.AccessTokens()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		instances = append(instances, g)
	}
	var next atomic.Int32
	site.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		instances[int(next.Add(1))%len(instances)].ServeHTTP(w, r)
	})

	s, b := join(t, site)
	res := b.PostForm("/orders/ord_7/exchange", url.Values{"size": {"L"}})
	if res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("%d %s", res.StatusCode, res.Body)
	}
	if a := s.Approve(res.Ref); a.StatusCode != http.StatusNoContent {
		t.Fatalf("approve: %d %s", a.StatusCode, a.Body)
	}
	performed := 0
	for _, r := range res.ContinueConcurrently(6) {
		if r.StatusCode == 200 {
			performed++
		}
	}
	if performed != 1 || up.exchanges.Load() != 1 {
		t.Fatalf("performed %d (shop counted %d), want 1", performed, up.exchanges.Load())
	}
	if st := s.Lookup(res.Ref).OperationStatus; st != "performed" {
		t.Errorf("status %q", st)
	}
	if n, _ := client.Keys(t.Context(), "gw:*").Result(); len(n) == 0 {
		t.Error("nothing under the configured prefix")
	}
}

// A Redis that can't keep the durability asked for stops the gateway at
// start; durability: none starts with the risk logged.
func TestGatewayRedisDurabilityChecked(t *testing.T) {
	mini, _ := redistest.Mini(t)
	setKeys(t)
	base := strings.NewReplacer("UPSTREAM", "http://127.0.0.1:1",
		"store: memory", "store:\n  redis: redis://"+mini.Addr()+"/0\n  durability: DUR").Replace(shopConfig)
	c, err := Parse("gateway.yaml", []byte(strings.Replace(base, "DUR", "disk", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(c, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "store") {
		t.Fatalf("miniredis taken for a durable Redis: %v", err)
	}
	c, err = Parse("gateway.yaml", []byte(strings.Replace(base, "DUR", "none", 1)))
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	g, err := New(c, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if !strings.Contains(logged.String(), "risk") {
		t.Errorf("durability: none started without naming the risk: %s", logged.String())
	}
}
