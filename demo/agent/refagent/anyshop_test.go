package refagent

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop"
)

// shopAt is the demo shop listening on 127.0.0.1, in demo mode, whose
// origin says host (such as localhost) and the port; the Resolver's
// HTTP client is client (nil: the default).
func shopAt(t *testing.T, host string, client *http.Client) (origin, loopback string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	origin = "http://" + net.JoinHostPort(host, port)
	s, err := shop.NewServer(shop.Config{BaseURL: origin, AllowLocal: true, HTTPClient: client, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)
	return origin, "http://" + ln.Addr().String()
}

// demo/agent/README.md's break: the shop runs on localhost, the agent is given
// -shop http://127.0.0.1:P. The join is refused at once (no retries, no
// blame on cached keys), as an origin mismatch, naming the -shop to use.
func TestJoinRefusedForOriginMismatch(t *testing.T) {
	t.Parallel()
	origin, loopback := shopAt(t, "localhost", nil)
	a := loopbackAgent(t, loopback, nil)
	start := time.Now()
	status, err := postJoin(t, a, browserClient(t), JoinOptions{})
	if status != http.StatusUnauthorized || !errors.Is(err, ErrOriginMismatch) {
		t.Fatalf("join from %s to a shop on %s: %d %v, want 401 and ErrOriginMismatch", loopback, origin, status, err)
	}
	var refused *JoinRefusedError
	errors.As(err, &refused)
	for _, want := range []string{"return_to", "not on this website's origin " + origin} {
		if !strings.Contains(refused.Description, want) {
			t.Errorf("the website's words %q lack %q", refused.Description, want)
		}
	}
	explained := refused.Explain()
	for _, want := range []string{"the website's own origin is " + origin, "the agent was given " + loopback, "run the agent with -shop " + origin, "different origins"} {
		if !strings.Contains(explained, want) {
			t.Errorf("Explain lacks %q:\n%s", want, explained)
		}
	}
	if strings.Contains(explained, "keys") {
		t.Errorf("an origin mismatch blamed on keys:\n%s", explained)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the diagnosis took %v", took)
	}
	// The same agent, given the website's own origin, joins.
	b := loopbackAgent(t, origin, nil)
	if status, err := postJoin(t, b, browserClient(t), JoinOptions{}); status != http.StatusSeeOther {
		t.Fatalf("join with -shop %s: %d %v", origin, status, err)
	}
}

// -agent-url: the agent's client_id and JWKS on a public HTTPS URL (here
// a TLS proxy in front of the agent's own server, as a tunnel would be),
// which the shop fetches there.
func TestAgentURL(t *testing.T) {
	t.Parallel()
	var fetched atomic.Int32
	var target atomic.Pointer[url.URL]
	proxy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched.Add(1)
		// A tunnel with a path: /poppy/… here is the agent's /….
		http.StripPrefix("/poppy", httputil.NewSingleHostReverseProxy(target.Load())).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	origin, _ := shopAt(t, "127.0.0.1", proxy.Client())
	a, err := start(t.Context(), Config{Shop: origin, AgentURL: proxy.URL + "/poppy/", Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	u, _ := url.Parse(a.local)
	target.Store(u)
	if want := proxy.URL + "/poppy/agent.json"; a.ClientID() != want {
		t.Fatalf("client_id %s, want %s", a.ClientID(), want)
	}
	if !strings.Contains(string(a.Metadata()), `"jwks_uri":"`+proxy.URL+`/poppy/jwks.json"`) {
		t.Errorf("metadata %s", a.Metadata())
	}
	if status, err := postJoin(t, a, browserClient(t), JoinOptions{}); status != http.StatusSeeOther {
		t.Fatalf("join with client_id %s: %d %v", a.ClientID(), status, err)
	}
	if fetched.Load() == 0 {
		t.Error("the shop never fetched the agent's documents at its AgentURL")
	}
	if _, err := start(t.Context(), Config{Shop: origin, AgentURL: "agent.example", Log: io.Discard}); err == nil {
		t.Error("an AgentURL that is not a URL was taken")
	}
}

// -user keeps the agent's key in a file: a rerun under the same client_id
// joins at once, where new keys were refused until the shop loaded the
// key set again (30 s).
func TestStableKeysRerunJoinsAtOnce(t *testing.T) {
	t.Parallel()
	origin, _ := shopAt(t, "127.0.0.1", nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	keyFile := filepath.Join(t.TempDir(), "alice.pem")
	run := func(keyFile string) (int, error) {
		a, err := start(t.Context(), Config{Shop: origin, Listen: listen, User: "alice", KeyFile: keyFile, Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		return postJoin(t, a, browserClient(t), JoinOptions{})
	}
	for i := range 2 {
		if status, err := run(keyFile); status != http.StatusSeeOther {
			t.Fatalf("run %d with the key file: %d %v", i+1, status, err)
		}
	}
	// Without it, a rerun is a new key under the same client_id: refused,
	// and the website's words say when it will load the key set again.
	status, err := run("")
	var refused *JoinRefusedError
	if status != http.StatusUnauthorized || !errors.As(err, &refused) {
		t.Fatalf("a rerun with new keys: %d %v", status, err)
	}
	if at, ok := refused.KeysReloadAt(); !ok || at.Before(time.Now()) || !strings.Contains(refused.Advice, "Keep the agent's key across runs") {
		t.Errorf("KeysReloadAt %v %v; advice %q", at, ok, refused.Advice)
	}
}
