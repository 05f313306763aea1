package identity

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestFetchErrors: issue 10 "Resolver": a host that does not exist
// (NXDOMAIN) is the client_id's fault, ErrInvalid (401 invalid_session);
// a DNS timeout or a refused connection stays ErrUnavailable (503). Before
// the fix NXDOMAIN was ErrUnavailable.
func TestFetchErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		err     error
		invalid bool
	}{
		{"NXDOMAIN", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "agent.example.invalid", IsNotFound: true}}, true},
		{"DNS timeout", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "agent.example", IsTimeout: true}}, false},
		{"DNS server failure", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "server misbehaving", Name: "agent.example", IsTemporary: true}}, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Resolver{HTTPClient: &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, tt.err })}}
			_, err := r.agent(t.Context(), "https://agent.example/agent")
			if tt.invalid != errors.Is(err, ErrInvalid) || tt.invalid == errors.Is(err, ErrUnavailable) {
				t.Errorf("err = %v, want invalid %v", err, tt.invalid)
			}
		})
	}
}

// TestSlowDripBounded: issue 10 "Resolver": a server that sends its
// document a byte at a time holds a load for at most the fetch deadline
// (3 s by default), then the load is ErrUnavailable. Before the fix it
// held the request for 10 s.
func TestSlowDripBounded(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"client_id":`))
		for range 100 {
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
				w.Write([]byte(" "))
			}
		}
	}))
	defer srv.Close()
	r := &Resolver{HTTPClient: srv.Client(), AllowLocal: true}
	start := time.Now()
	_, err := r.agent(t.Context(), srv.URL+"/agent")
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
	if took > defaultFetchTimeout+time.Second {
		t.Errorf("the slow drip held the load for %v, want ≤ %v", took, defaultFetchTimeout)
	}
}

// TestFetchCap: issue 10 "Resolver": one cap on outbound fetches for all
// agents together. Before the fix every client_id had its own fetch.
func TestFetchCap(t *testing.T) {
	t.Parallel()
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	r := &Resolver{HTTPClient: srv.Client(), AllowLocal: true, fetchSlots: 2}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.agent(t.Context(), fmt.Sprintf("%s/agent/%d", srv.URL, i))
		}()
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	wg.Wait()
	if m := most.Load(); m > 2 {
		t.Errorf("%d fetches in flight at once, want ≤ 2", m)
	}
	for i, err := range errs {
		// Every load ran once a slot was free: 404 is the document's fault.
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("load %d: err = %v, want ErrInvalid (404)", i, err)
		}
	}
}

// TestJunkCannotFlushAgents: issue 10 "Resolver": made-up client_ids fill
// the failures, kept apart, and never evict an agent that loaded. Before
// the fix they shared one map with arbitrary eviction.
func TestJunkCannotFlushAgents(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a := newAgentServer(t, "ES256", clk)
	r := resolverOf(a, clk)
	r.agentCap = 5
	if _, err := r.agent(t.Context(), a.ClientID); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := r.agent(t.Context(), fmt.Sprintf("%s/junk/%d", a.Srv.URL, i)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("junk %d: err = %v", i, err)
		}
	}
	if _, err := r.agent(t.Context(), a.ClientID); err != nil {
		t.Fatal(err)
	}
	if n := a.MetaHits.Load(); n != 1 {
		t.Errorf("the agent's metadata was fetched %d times, want 1 (junk evicted it)", n)
	}
	r.mu.Lock()
	failures := len(r.failures)
	r.mu.Unlock()
	if failures > 5 {
		t.Errorf("%d failures kept, want ≤ MaxAgents", failures)
	}
	// A failure is remembered: junk sent again within 30 s is not fetched.
	hits := a.AllHits.Load()
	if _, err := r.agent(t.Context(), a.Srv.URL+"/junk/49"); !errors.Is(err, ErrInvalid) {
		t.Fatal(err)
	}
	if a.AllHits.Load() != hits {
		t.Error("a failure remembered for 30 s was fetched again")
	}
}

// TestAgentsEvictLeastRecentlyUsed: beyond MaxAgents, the agent used least
// recently goes.
func TestAgentsEvictLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	clk := newClock()
	servers := []*agentServer{newAgentServer(t, "ES256", clk), newAgentServer(t, "ES256", clk), newAgentServer(t, "ES256", clk)}
	r := &Resolver{HTTPClient: servers[0].Srv.Client(), AllowLocal: true, Clock: clk.Now, agentCap: 2}
	load := func(a *agentServer) {
		t.Helper()
		clk.Add(time.Second)
		if _, err := r.agent(t.Context(), a.ClientID); err != nil {
			t.Fatal(err)
		}
	}
	load(servers[0])
	load(servers[1])
	load(servers[0]) // used again: servers[1] is now the least recent
	load(servers[2])
	load(servers[0])
	load(servers[1])
	if m0, m1 := servers[0].MetaHits.Load(), servers[1].MetaHits.Load(); m0 != 1 || m1 != 2 {
		t.Errorf("metadata fetches %d and %d, want 1 (kept) and 2 (evicted)", m0, m1)
	}
}
