package identity

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/jose"
)

// FuzzParseJWK: any JWK parses to a key of the allowed kinds and sizes, or
// is refused.
func FuzzParseJWK(f *testing.F) {
	keys, err := agentside.NewAgentKeys("https://agent.example/agent", "ES256")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(keys.JWKS())
	for _, j := range []jose.JWK{agenttest.RSAJWK("k", 2048, "AQAB"), agenttest.RSAJWK("k", 4097, "AQAB"), agenttest.RSAJWK("k", 4096, agenttest.E2p31m1), {Kty: "OKP", Crv: "Ed25519", X: strings.Repeat("A", 43)}} {
		raw, _ := json.Marshal(j)
		f.Add(raw)
	}
	f.Add([]byte(`{"kty":"EC","crv":"P-256","x":"","y":""}`))
	f.Add([]byte(`{"kty":"oct","k":"AAAA"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		k, err := jose.ParseJWK(raw)
		if err != nil {
			return
		}
		for _, alg := range jose.SigningAlgs {
			if k.Fits(alg) && !jose.KeyFits(k.Key, alg) {
				t.Fatalf("key %T fits %s", k.Key, alg)
			}
		}
		if !keyFitsAny(k) {
			t.Fatalf("accepted %s: a key that fits no alg", raw)
		}
	})
}

func keyFitsAny(k jose.PublicKey) bool {
	for _, alg := range jose.SigningAlgs {
		if jose.KeyFits(k.Key, alg) {
			return true
		}
	}
	return false
}
