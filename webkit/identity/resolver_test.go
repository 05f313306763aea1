package identity

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
)

// TestRefusesLoopbackWithoutAllowLocal: the address check runs when
// dialling, so a client_id on 127.0.0.1 is refused and never fetched.
func TestRefusesLoopbackWithoutAllowLocal(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a := newAgentServer(t, "ES256", clk)
	r := &Resolver{HTTPClient: a.srv.Client(), Clock: clk.Now}
	_, err := r.agent(t.Context(), a.clientID)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if n := a.metaHits.Load(); n != 0 {
		t.Errorf("metadata fetched %d times, want 0", n)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url        string
		allowLocal bool
		ok         bool
	}{
		{"https://agent.example/agent", false, true},
		{"https://agent.example:8443/a?x=1", false, true},
		{"http://agent.example/agent", false, false},
		{"http://agent.example/agent", true, false},
		{"http://localhost:8080/agent", false, false},
		{"http://localhost:8080/agent", true, true},
		{"http://127.0.0.1/agent", true, true},
		{"http://[::1]:9/agent", true, true},
		{"https://user@agent.example/agent", false, false},
		{"https://agent.example/agent#frag", false, false},
		{"https:agent.example", false, false},
		{"/agent", false, false},
		{"", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			r := &Resolver{AllowLocal: tt.allowLocal}
			_, err := r.checkURL(tt.url, "client_id")
			if (err == nil) != tt.ok {
				t.Errorf("checkURL(%q, AllowLocal %v) = %v, want ok %v", tt.url, tt.allowLocal, err, tt.ok)
			}
		})
	}
}

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr   string
		public bool
	}{
		{"93.184.215.14", true}, {"2606:2800:21f:cb07:6820:80da:af6b:8b2c", true},
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"0.0.0.0", false}, {"224.0.0.1", false}, {"100.64.0.1", false},
		{"::1", false}, {"::", false}, {"fe80::1", false}, {"fc00::1", false}, {"ff02::1", false},
		{"::ffff:127.0.0.1", false}, {"64:ff9b::a00:1", false},
		// Issue 10: these passed the check before net/netip's registry-based
		// lists replaced the predicate list.
		{"::7f00:1", false},            // IPv4-compatible ::127.0.0.1
		{"::a9fe:a9fe", false},         // IPv4-compatible ::169.254.169.254
		{"::808:808", false},           // IPv4-compatible ::8.8.8.8 (deprecated, never dialled)
		{"2002:7f00:1::1", false},      // 6to4 of 127.0.0.1
		{"2002:a9fe:a9fe::1", false},   // 6to4 of 169.254.169.254
		{"2001:0:4136:e378::1", false}, // Teredo
		{"fec0::1", false},             // site-local (deprecated)
		{"fe80::1%eth0", false},        // link-local with a zone
		{"100::1", false},              // discard-only
		{"2001:db8::1", false},         // documentation
		{"3fff::1", false},             // documentation
		{"2001:2::1", false},           // benchmarking
		{"2001:10::1", false},          // ORCHID
		{"2620:4f:8000::1", false},     // AS112
		{"5f00::1", false},             // SRv6 SIDs, outside global unicast
		{"4000::1", false},             // unassigned, outside 2000::/3
		{"192.0.2.1", false},           // TEST-NET-1
		{"198.51.100.1", false},        // TEST-NET-2
		{"203.0.113.1", false},         // TEST-NET-3
		{"192.88.99.1", false},         // 6to4 relay anycast
		{"255.255.255.255", false},     // broadcast
		{"198.19.0.1", false},          // benchmarking
		{"::ffff:10.0.0.1", false},     // IPv4-mapped private
		{"::ffff:8.8.8.8", true},       // IPv4-mapped public: checked as 8.8.8.8
		{"2a00:1450:4001:81c::200e", true},
		{"2001:4860:4860::8888", true}, // 2001:4860::/32 is outside 2001::/23
		{"8.8.8.8", true}, {"1.1.1.1", true},
	} {
		t.Run(tt.addr, func(t *testing.T) {
			r := &Resolver{}
			err := r.checkDial("tcp", "["+tt.addr+"]:443", nil)
			if (err == nil) != tt.public {
				t.Errorf("checkDial(%s) = %v, want public %v", tt.addr, err, tt.public)
			}
		})
	}
}

// TestKeyRotation: after the agent rotates its key, a delegation by the new
// key verifies with exactly one JWKS reload; the old key's delegations stop.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatal(err)
	}
	old := e.d
	if err := e.a.keys.Rotate(); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(reloadInterval + time.Second)
	d, err := e.a.keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	for i := range 3 {
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatalf("new key, try %d: %v", i, err)
		}
	}
	if m, j := e.a.metaHits.Load(), e.a.jwksHits.Load(); m != 1 || j != 2 {
		t.Errorf("fetches: metadata %d, JWKS %d; want 1 and 2", m, j)
	}
	e.d = old
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("old key after rotation: err = %v, want ErrInvalid", err)
	}
	if j := e.a.jwksHits.Load(); j != 2 {
		t.Errorf("unknown kid within 30 s reloaded the JWKS: %d fetches", j)
	}
}

// TestUnavailable: a server that is down gives ErrUnavailable, remembered
// for 30 s; once it is back and 30 s have passed, verifying works again.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.a.down.Store(true)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalid) {
		t.Fatalf("down: err = %v, want ErrUnavailable only", err)
	}
	e.a.down.Store(false)
	e.clk.Add(20 * time.Second)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("back up within 30 s: err = %v, want the remembered ErrUnavailable", err)
	}
	if n := e.a.allHits.Load(); n != 1 {
		t.Errorf("%d requests within 30 s of the failure, want 1", n)
	}
	e.clk.Add(11 * time.Second)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatalf("back up after 30 s: %v", err)
	}
}

// TestStaleKeysKept: loaded keys stay in use up to 1 h while reloads fail.
func TestStaleKeysKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatal(err)
	}
	d, err := e.a.keys.Delegate(3 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	e.a.down.Store(true)
	e.clk.Add(10 * time.Minute) // past refreshEvery: a reload is tried and fails
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatalf("stale keys within 1 h: %v", err)
	}
	e.clk.Add(51 * time.Minute)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("stale keys after 1 h: err = %v, want ErrUnavailable", err)
	}
}

// TestConcurrentVerificationFetchesOnce: concurrent first requests for one
// agent share one fetch.
func TestConcurrentVerificationFetchesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	e.a.jwksDelay = release
	const n = 20
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = e.session(t, agentside.SessionClaims{})
	}
	var started, done sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			_, errs[i] = e.v.VerifySession(t.Context(), tokens[i], "")
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("verification %d: %v", i, err)
		}
	}
	if m, j := e.a.metaHits.Load(), e.a.jwksHits.Load(); m != 1 || j != 1 {
		t.Errorf("fetches: metadata %d, JWKS %d; want 1 each", m, j)
	}
}
