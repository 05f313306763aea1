package identity

import (
	"errors"
	"testing"
)

// TestRefusesLoopbackWithoutAllowLocal: the address check runs when
// dialling, so a client_id on 127.0.0.1 is refused and never fetched.
func TestRefusesLoopbackWithoutAllowLocal(t *testing.T) {
	t.Parallel()
	clk := newClock()
	a := newAgentServer(t, "ES256", clk)
	r := &Resolver{HTTPClient: a.Srv.Client(), Clock: clk.Now}
	_, err := r.agent(t.Context(), a.ClientID)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if n := a.MetaHits.Load(); n != 0 {
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
