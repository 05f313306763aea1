// Package agenttest serves a Personal Agent's Client ID Metadata Document
// and key set, and makes hostile keys, for the tests of the packages that
// load and verify an agent's keys (webkit/identity, internal/siteverify).
package agenttest

import (
	"crypto/rand"
	"encoding/base64"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/jose"
)

// Server serves an agent's metadata at /agent and its key set at /jwks
// over TLS, and counts what it is asked.
type Server struct {
	Srv       *httptest.Server
	Keys      *agentside.AgentKeys
	ClientID  string
	AllHits   atomic.Int64 // every request, 503s included
	MetaHits  atomic.Int64
	JWKSHits  atomic.Int64
	Down      atomic.Bool
	Metadata  atomic.Pointer[[]byte] // overrides the metadata when set
	JWKS      atomic.Pointer[[]byte] // overrides the key set when set
	JWKSDelay chan struct{}          // when set, /jwks waits on it
}

// NewServer starts a Server for an agent with one alg key, its clock now;
// it is closed when t ends.
func NewServer(t testing.TB, alg string, now func() time.Time) *Server {
	t.Helper()
	a := &Server{}
	a.Srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.AllHits.Add(1)
		if a.Down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/agent":
			a.MetaHits.Add(1)
			body := a.Keys.Metadata(a.Srv.URL+"/jwks", "Test Agent")
			if m := a.Metadata.Load(); m != nil {
				body = *m
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		case "/jwks":
			a.JWKSHits.Add(1)
			if a.JWKSDelay != nil {
				<-a.JWKSDelay
			}
			w.Header().Set("Content-Type", "application/json")
			if j := a.JWKS.Load(); j != nil {
				w.Write(*j)
				return
			}
			w.Write(a.Keys.JWKS())
		case "/redirect":
			http.Redirect(w, r, "/agent", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Srv.Close)
	a.ClientID = a.Srv.URL + "/agent"
	k, err := agentside.NewAgentKeys(a.ClientID, alg)
	if err != nil {
		t.Fatal(err)
	}
	k.Clock = now
	a.Keys = k
	return a
}

// fakeModulus is an odd number of exactly bits bits, base64url: the parser
// and the cost of a signature check do not depend on it being a product of
// two primes.
func fakeModulus(bits int) string {
	n := make([]byte, (bits+7)/8)
	rand.Read(n)
	n[0] &= byte(0xff >> (len(n)*8 - bits))
	n[0] |= byte(0x80 >> (len(n)*8 - bits))
	n[len(n)-1] |= 1
	return jose.B64.EncodeToString(n)
}

// RSAJWK is an RS256 signing JWK with a made-up modulus of bits bits and
// the base64url exponent e.
func RSAJWK(kid string, bits int, e string) jose.JWK {
	return jose.JWK{Kty: "RSA", Kid: kid, Alg: "RS256", Use: "sig", N: fakeModulus(bits), E: e}
}

// E2p31m1 is the exponent 2^31 − 1 of the review's 0.85 s key, base64url.
var E2p31m1 = jose.B64.EncodeToString(big.NewInt(1<<31 - 1).Bytes())

// Forge signs any header and claims with key under alg.
func Forge(t testing.TB, alg string, key any, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(alg), claims)
	tok.Header = map[string]any{"alg": alg}
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// UnusedBitChanged changes the last character of a compact JWT's signature
// in a bit its base64 does not use (its signature's length is 1 modulo 3,
// as ES256's 64 bytes are): a lenient decoder reads the same signature.
func UnusedBitChanged(t testing.TB, compact string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	sig := compact[strings.LastIndexByte(compact, '.')+1:]
	if len(sig)%4 != 2 {
		t.Fatalf("a signature of %d characters has no unused bit", len(sig))
	}
	i := strings.IndexByte(alphabet, compact[len(compact)-1])
	changed := compact[:len(compact)-1] + string(alphabet[i^1])
	if a, _ := base64.RawURLEncoding.DecodeString(sig); a == nil || string(a) != string(mustDecode(t, changed[len(compact)-len(sig):])) {
		t.Fatalf("the change is not in an unused bit")
	}
	return changed
}

func mustDecode(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
