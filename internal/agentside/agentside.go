// Package agentside is the Personal Agent's side of webkit/RULES.md
// choices 1–3, which a website never runs: the agent's long-term keys and
// their JWKS and metadata document, delegation, and signing Session JWTs and
// browser join assertions; and the access tokens the demo's authorization
// server issues. webkittest, the reference agent, the conformance checker,
// the demo and the tests use it; webkit/identity verifies what it signs.
// It never logs or prints a key.
package agentside

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/jose"
)

// AgentKeys is the Personal Agent's side of webkit/RULES.md choice 1: its
// long-term signing key, published in its JWKS, which signs delegations.
type AgentKeys struct {
	ClientID string
	// Clock is the time source for iat and exp; nil means time.Now.
	Clock func() time.Time

	alg string
	mu  sync.Mutex
	key crypto.Signer
	kid string
}

// NewAgentKeys makes an agent's long-term key for clientID. alg is "ES256"
// (also for ""), "ES384" or "EdDSA".
func NewAgentKeys(clientID, alg string) (*AgentKeys, error) {
	if alg == "" {
		alg = "ES256"
	}
	k := &AgentKeys{ClientID: clientID, alg: alg}
	if err := k.Rotate(); err != nil {
		return nil, err
	}
	return k, nil
}

func newSigner(alg string) (crypto.Signer, error) {
	switch alg {
	case "ES256":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ES384":
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "EdDSA":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("agentside: alg %q is not supported for agent keys", alg)
}

// Rotate replaces the long-term key with a new one under a new kid; the old
// key leaves the JWKS, and delegations it signed stop verifying once
// verifiers reload the JWKS.
func (k *AgentKeys) Rotate() error {
	key, err := newSigner(k.alg)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.key, k.kid = key, rand.Text()[:16]
	return nil
}

// Alg is the JWS alg of the long-term key.
func (k *AgentKeys) Alg() string { return k.alg }

// Kid is the current long-term key's kid.
func (k *AgentKeys) Kid() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kid
}

// JWKS is the agent's key set, for its jwks_uri.
func (k *AgentKeys) JWKS() []byte {
	k.mu.Lock()
	key, kid := k.key, k.kid
	k.mu.Unlock()
	j, err := jose.NewJWK(key.Public(), kid, k.alg)
	if err != nil {
		panic(err) // unreachable: newSigner makes only supported keys
	}
	j.Use = "sig"
	b, _ := json.Marshal(struct {
		Keys []jose.JWK `json:"keys"`
	}{[]jose.JWK{j}})
	return b
}

// Metadata is the agent's Client ID Metadata Document, to serve at its
// client_id URL.
func (k *AgentKeys) Metadata(jwksURI, name string) []byte {
	b, _ := json.Marshal(struct {
		ClientID   string `json:"client_id"`
		ClientName string `json:"client_name"`
		JWKSURI    string `json:"jwks_uri"`
	}{k.ClientID, name, jwksURI})
	return b
}

func (k *AgentKeys) now() time.Time {
	if k.Clock != nil {
		return k.Clock()
	}
	return time.Now()
}

// Delegation is a short-lived delegated key with the delegation that
// vouches for it (poppy_dlg). It signs Session JWTs and browser assertions.
type Delegation struct {
	ClientID  string
	ExpiresAt time.Time
	Clock     func() time.Time

	compact string
	alg     string
	key     crypto.Signer
}

// Delegate makes a delegated key of the long-term key's type, valid for
// lifetime (verifiers accept at most 24 h), and signs its delegation.
func (k *AgentKeys) Delegate(lifetime time.Duration) (*Delegation, error) {
	alg := k.alg
	dkey, err := newSigner(alg)
	if err != nil {
		return nil, err
	}
	jwk, err := jose.NewJWK(dkey.Public(), "", alg)
	if err != nil {
		return nil, err
	}
	now := k.now()
	exp := now.Add(lifetime)
	k.mu.Lock()
	key, kid := k.key, k.kid
	k.mu.Unlock()
	claims := jwt.MapClaims{
		"iss": k.ClientID,
		"cnf": map[string]any{"jwk": jwk},
		"iat": now.Unix(),
		"exp": exp.Unix(),
	}
	compact, err := jose.Sign(alg, key, map[string]any{"typ": jose.TypDelegation, "kid": kid}, claims)
	if err != nil {
		return nil, fmt.Errorf("agentside: signing the delegation: %w", err)
	}
	return &Delegation{ClientID: k.ClientID, ExpiresAt: exp, Clock: k.Clock, compact: compact, alg: alg, key: dkey}, nil
}

// Compact is the delegation as a compact JWS, the poppy_dlg header.
func (d *Delegation) Compact() string { return d.compact }

// SessionClaims says what a Session JWT holds.
type SessionClaims struct {
	Audience    string        // the Company's origin
	SID         string        // the Session ID
	User        string        // the pairwise User ID (sub)
	AccessToken string        // the access token sent with it; "" for none
	Lifetime    time.Duration // 0 means 60 s; verifiers accept at most 300 s
	// IssuedAt is iat; zero means now.
	IssuedAt time.Time
	// JTI is the jti; "" means a random one.
	JTI string
}

// SessionJWT signs a Session JWT for the Poppy-Session header.
func (d *Delegation) SessionJWT(c SessionClaims) (string, error) {
	return d.signAgentJWT(jose.TypSession, c, nil)
}

// BrowserClaims says what a browser join assertion holds.
type BrowserClaims struct {
	SessionClaims // Audience is the join endpoint's URL; Lifetime at most 60 s
	ReturnTo      string
	Extensions    string // e.g. `"operations";v="3"`
}

// BrowserAssertion signs a browser join assertion (webkit/RULES.md choice 3).
func (d *Delegation) BrowserAssertion(c BrowserClaims) (string, error) {
	return d.signAgentJWT(jose.TypBrowser, c.SessionClaims, map[string]any{
		"return_to":  c.ReturnTo,
		"extensions": c.Extensions,
	})
}

func (d *Delegation) signAgentJWT(typ string, c SessionClaims, extra map[string]any) (string, error) {
	iat := c.IssuedAt
	if iat.IsZero() {
		iat = time.Now()
		if d.Clock != nil {
			iat = d.Clock()
		}
	}
	life := c.Lifetime
	if life == 0 {
		life = 60 * time.Second
	}
	jti := c.JTI
	if jti == "" {
		jti = rand.Text()
	}
	claims := jwt.MapClaims{
		"iss": d.ClientID,
		"aud": c.Audience,
		"sid": c.SID,
		"sub": c.User,
		"iat": iat.Unix(),
		"exp": iat.Add(life).Unix(),
		"jti": jti,
	}
	if c.AccessToken != "" {
		claims["ath"] = jose.ATH(c.AccessToken)
	}
	for k, v := range extra {
		claims[k] = v
	}
	return jose.Sign(d.alg, d.key, map[string]any{"typ": typ, "poppy_dlg": d.compact}, claims)
}

// IssueAccessToken signs an RFC 9068 access token (typ at+jwt) issued by
// issuer to the agent clientID for account, valid for lifetime. The alg
// follows issuerKey's type: ES256 (P-256), ES384 (P-384), EdDSA, or RS256.
// The demo's authorization server and tests use it.
func IssueAccessToken(issuerKey crypto.Signer, kid, issuer, clientID, account string, lifetime time.Duration) (string, error) {
	return IssueAccessTokenAt(issuerKey, kid, issuer, clientID, account, time.Now(), lifetime)
}

// IssueAccessTokenAt is IssueAccessToken issued at now: for an authorization
// server, or a test, whose clock is injected, so that the token's iat and
// exp agree with the clock that verifies it.
func IssueAccessTokenAt(issuerKey crypto.Signer, kid, issuer, clientID, account string, now time.Time, lifetime time.Duration) (string, error) {
	var alg string
	switch k := issuerKey.Public().(type) {
	case *ecdsa.PublicKey:
		alg = map[elliptic.Curve]string{elliptic.P256(): "ES256", elliptic.P384(): "ES384"}[k.Curve]
	case ed25519.PublicKey:
		alg = "EdDSA"
	case *rsa.PublicKey:
		alg = "RS256"
	}
	if alg == "" {
		return "", fmt.Errorf("agentside: issuer key type %T is not supported", issuerKey.Public())
	}
	claims := jwt.MapClaims{
		"iss":       issuer,
		"sub":       account,
		"client_id": clientID,
		"iat":       now.Unix(),
		"exp":       now.Add(lifetime).Unix(),
		"jti":       rand.Text(),
	}
	header := map[string]any{"typ": "at+jwt"}
	if kid != "" {
		header["kid"] = kid
	}
	return jose.Sign(alg, issuerKey, header, claims)
}

// Signer is the current long-term private key, for tests that forge what
// an agent must not be able to sign.
func (k *AgentKeys) Signer() crypto.Signer {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.key
}

// Signer is the delegated private key, for tests that forge tokens.
func (d *Delegation) Signer() crypto.Signer { return d.key }
