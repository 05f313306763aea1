package e2e_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/testenv"
)

// nodeExample is the example agent in another language (issue 37).
const nodeExample = "../demo/agent/examples/node"

// The agent's side, exercised in another language: the Node example
// agent (jose and puppeteer-core on this Chromium) performs an exchange
// on the demo shop, its first run, with nothing but the spec's formats
// (demo/agent/PROTOCOL.md). It SKIPs without node or its modules (`npm
// ci` in demo/agent/examples/node), unless OPSGATE_REQUIRE names node.
func TestNodeExampleAgentPerformsAnExchange(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium and Node")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "no node on the PATH")
	}
	for _, m := range []string{"jose", "puppeteer-core"} {
		if _, err := os.Stat(filepath.Join(nodeExample, "node_modules", m, "package.json")); err != nil {
			testenv.Missing(t, "node", "the example's modules are not installed: npm ci in demo/agent/examples/node")
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	s, err := shop.NewServer(shop.Config{BaseURL: base, AllowLocal: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, node, "agent.mjs", "--shop", base, "--chromium", chromiumPath)
	cmd.Dir = nodeExample
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the Node agent: %v after %v\n%s", err, time.Since(start).Round(time.Millisecond), out.String())
	}
	t.Logf("the Node agent performed in %v", time.Since(start).Round(time.Millisecond))
	m := regexp.MustCompile(`I am (\S+) \(User (\S+)\)`).FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(out.String(), "PERFORMED") {
		t.Fatalf("the Node agent's output:\n%s", out.String())
	}
	// Counted at the shop: the agent's own copy of the data holds the
	// exchange, once; the copy visitors see is untouched.
	o, _ := s.Sandbox(m[1], m[2]).Order(shopdb.DemoAccount, "ord_7Hk2")
	if it := o.Items[0]; it.SKU != "stormline-insulated-m" || len(it.Exchanges) != 1 {
		t.Errorf("the agent's sandbox: %s after %d exchanges, want stormline-insulated-m after 1\n%s", it.SKU, len(it.Exchanges), out.String())
	}
	if o, _ := s.DB().Order(shopdb.DemoAccount, "ord_7Hk2"); o.Items[0].SKU != "stormline-m" {
		t.Error("the shared copy changed")
	}
}
