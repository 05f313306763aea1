package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Signed in (§4 W54): a join with an access token that the configured
// issuer's keys verify binds the browser to the account, and the gateway
// tells the upstream whom a request is for in identity headers: on the
// approved repeat, the operation's owner (identity_on: approved, the
// default), or on every request of an agent's browser, its Session's
// (identity_on: joined). With identity_key_env it signs them, with the
// method, the path and the time, so that the upstream can check they
// come from the gateway (README.md "Who the request is for").
//
// No client can forge them: the gateway first removes from every request
// each header a website could read as one of its own, whatever its case,
// with _ for - (WSGI, Rack, PHP and CGI servers read X_Opsgate_Account as
// X-Opsgate-Account), and the proxy headers a website may trust for the
// client's address, host or URL.

// defaultIdentityPrefix starts the identity headers' names.
const defaultIdentityPrefix = "X-Opsgate-"

// proxyHeaders are the headers, in lower case, through which a proxy
// tells a website about the client or the URL: only the gateway sets
// them (it sets X-Forwarded-For, -Host and -Proto). Any X-Forwarded-…
// is one too.
var proxyHeaders = map[string]bool{
	"forwarded": true, "x-real-ip": true, "x-client-ip": true, "client-ip": true, "x-cluster-client-ip": true,
	"true-client-ip": true, "cf-connecting-ip": true, "fastly-client-ip": true, "x-proxyuser-ip": true,
	"x-envoy-external-address": true, "x-original-url": true, "x-original-uri": true, "x-rewrite-url": true,
	"x-original-host": true, "x-original-method": true, "x-host": true, "x-http-host": true, "x-url-scheme": true,
	"x-scheme": true, "front-end-https": true, "x-arr-ssl": true, "x-original-forwarded-for": true,
}

// headerStrip removes from a client's request the headers the website
// must hear from the gateway alone.
type headerStrip struct {
	prefix   string          // the identity prefix in lower case, "x-opsgate-"
	override map[string]bool // override headers, lower case: true when the upstream honours it (method_override)
}

func newHeaderStrip(prefix string, overrides []string) headerStrip {
	hs := headerStrip{prefix: strings.ToLower(prefix), override: map[string]bool{}}
	for _, h := range overrideHeaders {
		hs.override[strings.ToLower(h)] = slices.Contains(overrides, h)
	}
	return hs
}

// clean removes the identity, proxy and override headers from h, as a
// website may read their names: case folded, _ for -. An override header
// the upstream honours stays, spelled with - alone.
func (hs headerStrip) clean(h http.Header) {
	for name := range h {
		n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		honoured, isOverride := hs.override[n]
		switch {
		case strings.HasPrefix(n, hs.prefix), proxyHeaders[n], strings.HasPrefix(n, "x-forwarded-"):
		case isOverride && (!honoured || strings.Contains(name, "_")):
		default:
			continue
		}
		delete(h, name)
	}
}

// identity sets the identity headers of a request to the upstream, and
// signs them.
type upstreamIdentity struct {
	prefix string
	key    []byte // nil: unsigned
	on     string // identity_on
	kit    *webkit.Kit
	now    func() time.Time
}

// owner is whom r is for, as the upstream is told: the owner of the
// operation being performed (the approved repeat, §6 W96), or with
// identity_on: joined the Session of a browser handled as it.
func (id *upstreamIdentity) owner(r *http.Request) (store.Owner, bool) {
	if c, ok := webkit.ClaimOf(r); ok {
		return c.Owner, true
	}
	if id.on != identityOnJoined {
		return store.Owner{}, false
	}
	s, joined := id.kit.Sessions.SessionOf(r)
	if !joined || (id.kit.OwnLogin != nil && id.kit.OwnLogin(r, s)) {
		return store.Owner{}, false
	}
	return s.Owner(), true
}

// set puts o (none when !ok) in out's identity headers, and the
// signature over them, out's method and path, and the time.
func (id *upstreamIdentity) set(out *http.Request, o store.Owner, ok bool) {
	h := out.Header
	for name := range h { // none but the gateway's
		if len(name) >= len(id.prefix) && strings.EqualFold(strings.ReplaceAll(name[:len(id.prefix)], "_", "-"), id.prefix) {
			delete(h, name)
		}
	}
	if ok {
		h.Set(id.prefix+"Agent", o.Agent)
		h.Set(id.prefix+"User", o.User)
		if o.Account != "" {
			h.Set(id.prefix+"Account", o.Account)
		}
	} else {
		o = store.Owner{}
	}
	if id.key == nil {
		return
	}
	path := out.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	ts := strconv.FormatInt(id.now().Unix(), 10)
	h.Set(id.prefix+"Timestamp", ts)
	h.Set(id.prefix+"Signature", signIdentity(id.key, ts, out.Method, path, o))
}

// signIdentity is the signature of the identity headers: "v1=" and the
// hex HMAC-SHA256, keyed with the secret, of the lines
//
//	v1
//	<timestamp: Unix seconds>
//	<method>
//	<path, as in the request line, without the query>
//	<agent>
//	<user>
//	<account>
//
// joined by "\n", each "" when the header is absent.
func signIdentity(key []byte, ts, method, path string, o store.Owner) string {
	mac := hmac.New(sha256.New, key)
	io.WriteString(mac, strings.Join([]string{"v1", ts, method, path, o.Agent, o.User, o.Account}, "\n"))
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
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
