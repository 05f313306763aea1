package siteverify

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Verifying through the identity.Resolver: its key rotation, outages and
// shared loads, as a Session JWT sees them (webkit/RULES.md "Hardening").

// TestKeyRotation: after the agent rotates its key, a delegation by the new
// key verifies with exactly one JWKS reload; the old key's delegations stop.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatal(err)
	}
	old := e.d
	if err := e.a.Keys.Rotate(); err != nil {
		t.Fatal(err)
	}
	e.clk.Add(reloadInterval + time.Second)
	d, err := e.a.Keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	for i := range 3 {
		if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
			t.Fatalf("new key, try %d: %v", i, err)
		}
	}
	if m, j := e.a.MetaHits.Load(), e.a.JWKSHits.Load(); m != 1 || j != 2 {
		t.Errorf("fetches: metadata %d, JWKS %d; want 1 and 2", m, j)
	}
	e.d = old
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrInvalid) {
		t.Errorf("old key after rotation: err = %v, want identity.ErrInvalid", err)
	}
	if j := e.a.JWKSHits.Load(); j != 2 {
		t.Errorf("unknown kid within 30 s reloaded the JWKS: %d fetches", j)
	}
}

// TestUnavailable: a server that is down gives identity.ErrUnavailable, remembered
// for 30 s; once it is back and 30 s have passed, verifying works again.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.a.Down.Store(true)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrUnavailable) || errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("down: err = %v, want identity.ErrUnavailable only", err)
	}
	e.a.Down.Store(false)
	e.clk.Add(20 * time.Second)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrUnavailable) {
		t.Fatalf("back up within 30 s: err = %v, want the remembered identity.ErrUnavailable", err)
	}
	if n := e.a.AllHits.Load(); n != 1 {
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
	d, err := e.a.Keys.Delegate(3 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	e.a.Down.Store(true)
	e.clk.Add(10 * time.Minute) // past refreshEvery: a reload is tried and fails
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); err != nil {
		t.Fatalf("stale keys within 1 h: %v", err)
	}
	e.clk.Add(51 * time.Minute)
	if _, err := e.v.VerifySession(t.Context(), e.session(t, agentside.SessionClaims{}), ""); !errors.Is(err, identity.ErrUnavailable) {
		t.Fatalf("stale keys after 1 h: err = %v, want identity.ErrUnavailable", err)
	}
}

// TestConcurrentVerificationFetchesOnce: concurrent first requests for one
// agent share one fetch.
func TestConcurrentVerificationFetchesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	e.a.JWKSDelay = release
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
	if m, j := e.a.MetaHits.Load(), e.a.JWKSHits.Load(); m != 1 || j != 1 {
		t.Errorf("fetches: metadata %d, JWKS %d; want 1 each", m, j)
	}
}
