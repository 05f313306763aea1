package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Signed in (§4 W54): a join with an access token that the configured
// issuer's keys verify binds the browser to the account, and the gateway
// tells the upstream whom a joined browser is for in identity headers,
// which it strips from every client request first, so that no browser can
// forge them.

// defaultIdentityPrefix starts the identity headers' names.
const defaultIdentityPrefix = "X-Opsgate-"

// identityHeaders sets the identity headers of a request to the upstream:
// none a client sent; the Session's, for a browser joined to one and
// handled as it (not one with the site's own login, §4 W56).
func identityHeaders(prefix string, kit *webkit.Kit, in *http.Request, out http.Header) {
	for name := range out {
		if len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) {
			delete(out, name)
		}
	}
	s, joined := kit.Sessions.SessionOf(in)
	if !joined || (kit.OwnLogin != nil && kit.OwnLogin(in, s)) {
		return
	}
	out.Set(prefix+"Agent", s.Agent)
	out.Set(prefix+"User", s.User)
	if s.Account != "" {
		out.Set(prefix+"Account", s.Account)
	}
}

// How the issuer's JWKS is fetched.
const (
	jwksFresh   = 10 * time.Minute // how long a fetched key set serves
	jwksRetry   = 30 * time.Second // the least time between two fetches
	jwksTimeout = 5 * time.Second
	jwksMax     = 256 << 10
)

// jwks is the access-token issuer's key set, fetched from its URL: again
// when it is older than jwksFresh, or when a token names a kid it doesn't
// hold (at most once per jwksRetry).
type jwks struct {
	url    string
	client *http.Client

	mu      sync.Mutex
	keys    map[string]crypto.PublicKey
	fetched time.Time
	tried   time.Time
}

func (j *jwks) key(ctx context.Context, kid, _ string) (crypto.PublicKey, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	k, ok := j.keys[kid]
	if ok && time.Since(j.fetched) < jwksFresh {
		return k, nil
	}
	if j.tried.IsZero() || time.Since(j.tried) >= jwksRetry {
		j.tried = time.Now()
		keys, err := j.fetch(ctx)
		if err != nil {
			if ok { // the last key set still serves while the issuer is down
				return k, nil
			}
			return nil, fmt.Errorf("%w: the access-token issuer's JWKS: %v", identity.ErrUnavailable, err)
		}
		j.keys, j.fetched = keys, time.Now()
	}
	if k, ok := j.keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w: the issuer's JWKS has no key %q", identity.ErrInvalid, kid)
}

func (j *jwks) fetch(ctx context.Context) (map[string]crypto.PublicKey, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	res, err := j.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", j.url, res.Status)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, jwksMax+1))
	if err != nil {
		return nil, err
	}
	if len(body) > jwksMax {
		return nil, fmt.Errorf("over %d bytes", jwksMax)
	}
	return parseJWKS(body)
}

// jwk is one key of a JWKS (RFC 7517): EC, RSA or Ed25519.
type jwk struct {
	Kty, Crv, Kid, Use string
	X, Y, N, E         string
}

// parseJWKS returns the signing keys of a JWKS by kid; keys of other
// types, or not for signatures, are left out.
func parseJWKS(data []byte) (map[string]crypto.PublicKey, error) {
	var set struct{ Keys []jwk }
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("not a JWKS: %v", err)
	}
	keys := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub, err := k.public()
		if err != nil {
			return nil, fmt.Errorf("key %q: %v", k.Kid, err)
		}
		if pub != nil {
			keys[k.Kid] = pub
		}
	}
	return keys, nil
}

func (k jwk) public() (crypto.PublicKey, error) {
	b64 := base64.RawURLEncoding.DecodeString
	switch k.Kty {
	case "EC":
		curves := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}
		curve, ok := curves[k.Crv]
		if !ok {
			return nil, nil
		}
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		size := (curve.Params().BitSize + 7) / 8
		if err1 != nil || err2 != nil || len(x) != size || len(y) != size {
			return nil, fmt.Errorf("bad x or y")
		}
		return ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err1 != nil || err2 != nil || len(n) < 256 || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("bad n or e (RSA keys of at least 2048 bits)")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, nil
		}
		x, err := b64(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("bad x")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, nil
}
