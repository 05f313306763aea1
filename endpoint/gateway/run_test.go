package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// freeAddr is a loopback address nothing listens on (just now).
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Run serves the gateway and, on a listener of its own, /healthz, /readyz
// and /metrics; when its context ends it finishes the request in flight
// before it returns.
func TestRunAdminAndGracefulShutdown(t *testing.T) {
	started := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			time.Sleep(300 * time.Millisecond)
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	defer up.Close()
	listen, admin := freeAddr(t), freeAddr(t)
	setKeys(t)
	cfg := strings.NewReplacer("UPSTREAM", up.URL, "store: memory", "store: memory\nlisten: "+listen+"\nadmin_listen: "+admin+"\nshutdown_timeout: 5s").Replace(shopConfig)
	c, err := Parse("gateway.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := net.Dial("tcp", admin); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the admin listener never came up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := get(t, "http://"+admin+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+admin+"/readyz"); code != 200 {
		t.Errorf("readyz: %d", code)
	}
	if code, body := get(t, "http://"+listen+"/orders"); code != 200 || body != "upstream /orders" {
		t.Errorf("proxy: %d %q", code, body)
	}
	// A gated route an ordinary browser passes: the kit's metrics count it.
	http.Post("http://"+listen+"/orders/o1/exchange", "application/x-www-form-urlencoded", strings.NewReader("size=M"))
	if code, body := get(t, "http://"+admin+"/metrics"); code != 200 || !strings.Contains(body, "opsgate_") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("metrics: %d, %d bytes", code, len(body))
	}
	// /metrics is not on the public listener: it is the upstream's path there.
	if _, body := get(t, "http://"+listen+"/metrics"); body != "upstream /metrics" {
		t.Errorf("the public /metrics is %q", body)
	}

	slow := make(chan string, 1)
	go func() {
		res, err := http.Get("http://" + listen + "/slow")
		if err != nil {
			slow <- err.Error()
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		slow <- string(b)
	}()
	<-started
	cancel() // SIGTERM, as the command has it
	if got := <-slow; got != "upstream /slow" {
		t.Errorf("the request in flight got %q", got)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := net.Dial("tcp", listen); err == nil {
		t.Error("still listening after Run returned")
	}
}
