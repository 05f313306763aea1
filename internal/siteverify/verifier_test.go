package siteverify

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/webkit/identity"
)

const origin = "https://shop.example"

// The identity.Resolver's defaults the tests step the clock past: a loaded
// agent is loaded again after 5 minutes, and an unknown kid reloads its key
// set at most every 30 s (webkit/RULES.md "Hardening").
const (
	resolverRefresh = 5 * time.Minute
	reloadInterval  = 30 * time.Second
)

// clock is the tests' clock (internal/testclock).
type clock = testclock.Clock

func newClock() *clock { return testclock.At(time.Now().Truncate(time.Second)) }

// replay is a store.Store with only UseOnce, enough for the Verifier.
type replay struct {
	storedriver.Store
	mu   sync.Mutex
	used map[string]time.Time
}

func newReplay() *replay { return &replay{used: map[string]time.Time{}} }

func (r *replay) UseOnce(_ context.Context, key string, until, now time.Time) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.used[key]; ok && now.Before(t) {
		return false, nil
	}
	r.used[key] = until
	return true, nil
}

// agentServer serves an agent's metadata at /agent and its JWKS at /jwks.
type agentServer = agenttest.Server

func newAgentServer(t testing.TB, alg string, clk *clock) *agentServer {
	return agenttest.NewServer(t, alg, clk.Now)
}

func resolverOf(a *agentServer, clk *clock) *identity.Resolver {
	return &identity.Resolver{HTTPClient: a.Srv.Client(), AllowLocal: true, Clock: clk.Now}
}

func verifierOf(a *agentServer, clk *clock, st ReplayStore) *Verifier {
	return &Verifier{Origin: origin, Resolver: resolverOf(a, clk), Replay: st, Clock: clk.Now}
}
func TestVerifySession(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"ES256", "ES384", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			a := newAgentServer(t, alg, clk)
			v := verifierOf(a, clk, newReplay())
			d, err := a.Keys.Delegate(time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := d.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1", AccessToken: "at.x.y"})
			if err != nil {
				t.Fatal(err)
			}
			s, err := v.VerifySession(context.Background(), tok, "at.x.y")
			if err != nil {
				t.Fatalf("VerifySession: %v", err)
			}
			if s.ClientID != a.ClientID || s.User != "usr_1" || s.SID != "ses_1" || s.AgentName != "Test Agent" {
				t.Errorf("session = %+v", s)
			}
			if !strings.HasPrefix(s.ClientID, "https://127.0.0.1:") {
				t.Errorf("client_id = %q", s.ClientID)
			}
		})
	}
}
