package main

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/testenv"
)

// demo/agent/README.md's `go run ./demo/agent -user alice -approve
// 'exchange<=100USD'`, run twice against one shop, in real Chromium: both
// runs perform (the default SKU is the one the item is not), the second
// joins at once (the key is kept, no wait on cached keys), and each run
// prints the ref in full once.
func TestUserRerunPerformsAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	const chromiumPath = "/usr/bin/chromium"
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
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
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := free.Addr().String()
	free.Close()
	keys := t.TempDir()
	refHeader := regexp.MustCompile(`with Poppy-Operation: sid \S+, ref (\S+) \(from`)
	for i, want := range []string{"stormline-insulated-m", "stormline-m"} {
		var out, errs bytes.Buffer
		start := time.Now()
		code := agent([]string{"-shop", base, "-user", "alice", "-listen", listen, "-keys", keys, "-approve", "exchange<=100USD",
			"-chromium", chromiumPath, "-timeout", "20s"}, &out, &errs)
		took := time.Since(start)
		if code != exitPerformed {
			t.Fatalf("run %d: exit %d\n%s\n%s", i+1, code, out.String(), errs.String())
		}
		if strings.Contains(out.String(), "joining again") || strings.Contains(out.String(), "refused") {
			t.Errorf("run %d waited on a refused join:\n%s", i+1, out.String())
		}
		m := refHeader.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("run %d printed no ref:\n%s", i+1, out.String())
		}
		if n := strings.Count(out.String(), m[1]); n != 1 {
			t.Errorf("run %d printed its %d-character ref %d times, want once", i+1, len(m[1]), n)
		}
		o, _ := s.Sandbox(clientIDIn(t, out.String()), "alice").Order(shopdb.DemoAccount, "ord_7Hk2")
		if o.Items[0].SKU != want {
			t.Errorf("run %d: the item is %s, want %s", i+1, o.Items[0].SKU, want)
		}
		t.Logf("run %d: exit %d in %v", i+1, code, took.Round(time.Millisecond))
	}
}

// clientIDIn is the client_id the agent printed.
func clientIDIn(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`User "alice" at (\S+):`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no client_id printed:\n%s", out)
	}
	return m[1]
}
