package identity

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
)

const origin = "https://shop.example"

// clock is the tests' clock (internal/testclock).
type clock = testclock.Clock

func newClock() *clock { return testclock.At(time.Now().Truncate(time.Second)) }

// replay is a store.Store with only UseOnce, enough for the Verifier.
type replay struct {
	store.Store
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
type agentServer struct {
	srv       *httptest.Server
	keys      *agentside.AgentKeys
	clientID  string
	allHits   atomic.Int64 // every request, 503s included
	metaHits  atomic.Int64
	jwksHits  atomic.Int64
	down      atomic.Bool
	metadata  atomic.Pointer[[]byte] // overrides the metadata when set
	jwks      atomic.Pointer[[]byte] // overrides the key set when set
	jwksDelay chan struct{}          // when set, /jwks waits on it
}

func newAgentServer(t testing.TB, alg string, clk *clock) *agentServer {
	t.Helper()
	a := &agentServer{}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.allHits.Add(1)
		if a.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/agent":
			a.metaHits.Add(1)
			body := a.keys.Metadata(a.srv.URL+"/jwks", "Test Agent")
			if m := a.metadata.Load(); m != nil {
				body = *m
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		case "/jwks":
			a.jwksHits.Add(1)
			if a.jwksDelay != nil {
				<-a.jwksDelay
			}
			w.Header().Set("Content-Type", "application/json")
			if j := a.jwks.Load(); j != nil {
				w.Write(*j)
				return
			}
			w.Write(a.keys.JWKS())
		case "/redirect":
			http.Redirect(w, r, "/agent", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.srv.Close)
	a.clientID = a.srv.URL + "/agent"
	k, err := agentside.NewAgentKeys(a.clientID, alg)
	if err != nil {
		t.Fatal(err)
	}
	k.Clock = clk.Now
	a.keys = k
	return a
}

func (a *agentServer) resolver(clk *clock) *Resolver {
	return &Resolver{HTTPClient: a.srv.Client(), AllowLocal: true, Clock: clk.Now}
}

func (a *agentServer) verifier(clk *clock, st store.Store) *Verifier {
	return &Verifier{Origin: origin, Resolver: a.resolver(clk), Replay: st, Clock: clk.Now}
}

func TestVerifySession(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"ES256", "ES384", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			a := newAgentServer(t, alg, clk)
			v := a.verifier(clk, newReplay())
			d, err := a.keys.Delegate(time.Hour)
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
			if s.ClientID != a.clientID || s.User != "usr_1" || s.SID != "ses_1" || s.AgentName != "Test Agent" {
				t.Errorf("session = %+v", s)
			}
			if !strings.HasPrefix(s.ClientID, "https://127.0.0.1:") {
				t.Errorf("client_id = %q", s.ClientID)
			}
		})
	}
}
