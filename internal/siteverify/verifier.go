package siteverify

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/webkit/identity"
)

// Limits of webkit/RULES.md choices 1 and 3.
const (
	// maxSessionLifetime bounds a Session JWT's exp − iat.
	maxSessionLifetime = 300 * time.Second
	// maxBrowserLifetime bounds a browser join assertion's exp − iat.
	maxBrowserLifetime = 60 * time.Second
	// maxDelegationLifetime bounds a delegation's exp − iat.
	maxDelegationLifetime = 24 * time.Hour

	maxIDBytes = 255
)

// A ReplayStore remembers the single-use IDs (jti) of the tokens a Verifier
// accepted, so that each verifies once (webkit/RULES.md choice 1). A
// store.Store is one.
type ReplayStore interface {
	// UseOnce marks key as used until until and reports whether it was
	// unused at now. An error means the store could not answer: the
	// Verifier then fails with ErrUnavailable.
	UseOnce(ctx context.Context, key string, until, now time.Time) (first bool, err error)
}

// Caller is who a verified Session JWT or browser assertion says is
// calling (webkit/RULES.md choices 1 and 3): which agent signed it, for
// which User and Session ID, and the key its single-use jti is used up
// under. It is a token's word, not the kit's Session (webkit.Session):
// whether the Session is signed in takes an access token (see AccessTokens
// and CheckAccessToken).
type Caller struct {
	ClientID string // the Personal Agent's client_id (iss)
	User     string // the pairwise User ID (sub)
	SID      string // the Session ID (sid)
	// AgentName is client_name from the agent's metadata; "" for none.
	AgentName string
	// ReplayKey is the key the token's jti is used up under, and
	// ReplayUntil how long. CheckSession and CheckBrowserAssertion leave it
	// unused: whoever called them uses it up (UseBrowserAssertion, or the
	// same store step as what the request does).
	ReplayKey   string
	ReplayUntil time.Time
}

// BrowserAssertion is what a verified browser join assertion says
// (webkit/RULES.md choice 3).
type BrowserAssertion struct {
	Caller
	// ReturnTo is return_to, checked to be an absolute URL on the
	// Verifier's Origin without userinfo.
	ReturnTo string
	// Extensions is the extensions claim as sent, in the Poppy-Extensions
	// syntax (webkit/RULES.md choice 4); "" when absent. The caller parses it.
	Extensions string
}

// Verifier verifies Session JWTs and browser join assertions.
type Verifier struct {
	// Origin is the Company's origin, the aud of every Session JWT, such as
	// "https://shop.example": scheme, host and port, no path.
	Origin string
	// Resolver loads agents' keys.
	Resolver *identity.Resolver
	// Replay remembers each jti until its token expires: a store.Store, or
	// anything with its UseOnce.
	Replay ReplayStore
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
	// AcceptAgent, when set, is asked before an agent's keys are loaded;
	// false refuses the agent (ErrInvalid). Revocation can use it.
	// A Company revokes a client_id here (§8.1 W146). It is asked on every
	// verification, cached delegation or not.
	AcceptAgent func(clientID string) bool
	// delegationCap bounds the delegation cache: 0 means
	// defaultMaxDelegations; a negative value (tests) turns the cache off.
	// See delegationCache.
	delegationCap int

	dlg delegationCache
}

// defaultMaxDelegations is the bound of each half of the delegation cache
// (verified and failed delegations).
const defaultMaxDelegations = 10000

// failedDelegationTTL is how long a failed delegation is remembered: as long
// as a failed key load (webkit/RULES.md "Hardening").
const failedDelegationTTL = 30 * time.Second

// agentClaims are the claims of a Session JWT and of a browser assertion.
type agentClaims struct {
	jwt.RegisteredClaims
	SID        string  `json:"sid"`
	ATH        *string `json:"ath"`
	ReturnTo   *string `json:"return_to"`
	Extensions *string `json:"extensions"`
}

type delegationClaims struct {
	jwt.RegisteredClaims
	Cnf struct {
		JWK *jose.JWK `json:"jwk"`
	} `json:"cnf"`
}

func (v *Verifier) now() time.Time {
	if v.Clock != nil {
		return v.Clock()
	}
	return time.Now()
}

// agentKey returns the key with kid that fits alg of the agent clientID,
// and the agent's client_name, as v.Resolver loads and caches them
// (webkit/RULES.md choice 1 and its hardening).
func (v *Verifier) agentKey(ctx context.Context, clientID, kid, alg string) (jose.PublicKey, string, error) {
	k, name, err := v.Resolver.Key(ctx, clientID, kid, alg)
	if err != nil {
		return jose.PublicKey{}, "", err
	}
	return jose.PublicKey{Kid: kid, Alg: alg, Key: k}, name, nil
}

// VerifySession verifies the Poppy-Session header token (webkit/RULES.md choice
// 1). accessToken is the Bearer token sent with it, or "" for none: with
// one, the JWT must carry its ath; without, it must carry none. The jti is
// used up, so a token verifies once.
func (v *Verifier) VerifySession(ctx context.Context, token, accessToken string) (Caller, error) {
	s, key, err := v.checkSession(ctx, token, accessToken)
	if err != nil {
		return Caller{}, err
	}
	if err := v.useOnceKey(ctx, s.ReplayKey, s.ReplayUntil); err != nil {
		v.rememberFailure(key, err)
		return Caller{}, fmt.Errorf("session JWT: %w", err)
	}
	return s, nil
}

// CheckSession makes every check of VerifySession but the last: the jti
// is not used up. Whoever calls it must use up ReplayKey until ReplayUntil
// (store.Store.UseOnce, or storedriver.RecordOptions.Once in the same step as
// the approval it records) before it acts on the request, or a replayed
// token would be accepted.
func (v *Verifier) CheckSession(ctx context.Context, token, accessToken string) (Caller, error) {
	s, _, err := v.checkSession(ctx, token, accessToken)
	return s, err
}

// checkSession is CheckSession, also returning the key a failure of these
// exact credentials is remembered under.
func (v *Verifier) checkSession(ctx context.Context, token, accessToken string) (Caller, credentials, error) {
	key, err := v.failedBefore(jose.TypSession, v.Origin, accessToken, token)
	if err != nil {
		return Caller{}, key, fmt.Errorf("session JWT: %w", err)
	}
	var c agentClaims
	s, err := v.verify(ctx, token, jose.TypSession, v.Origin, maxSessionLifetime, accessToken, &c)
	if err == nil && c.ID == "" {
		err = explain.Because(invalid("jti is missing"), "jti is missing: every Session JWT has a jti of its own, used once")
	}
	if err != nil {
		v.rememberFailure(key, err)
		return Caller{}, key, fmt.Errorf("session JWT: %w", err)
	}
	return s, key, nil
}

// replayKey is the key a token's jti is used up under.
func replayKey(iss, jti string) string { return "jti:" + iss + ":" + jti }

// credentials are what a token's failure is remembered for: its kind,
// audience, access token and the token itself.
type credentials struct{ typ, aud, accessToken, token string }

// key is the key a failure of c is remembered under: the SHA-256 of the
// four, each followed by a zero byte.
func (c credentials) key() [32]byte {
	h := sha256.New()
	for _, s := range []string{c.typ, c.aud, c.accessToken, c.token} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var key [32]byte
	h.Sum(key[:0])
	return key
}

// failedBefore returns the remembered failure of exactly these credentials
// (kind, audience, access token and token), and the credentials to
// remember a new one for. A failed token is refused again for 30 s without
// a signature check: its jti was not used up, so the same bytes could
// otherwise be replayed at the price of a verification each. While no
// failure is remembered, there is nothing to look up and no key to hash.
func (v *Verifier) failedBefore(typ, aud, accessToken, token string) (credentials, error) {
	c := credentials{typ, aud, accessToken, token}
	if v.delegationCap < 0 {
		return c, nil
	}
	now := v.now()
	if !v.dlg.anyFailedTokens(now) {
		return c, nil
	}
	err, _ := v.dlg.failedToken(c.key(), now)
	return c, err
}

// rememberFailure remembers a token's failure for its credentials, when it
// is the token's fault (ErrInvalid) and not an outage.
func (v *Verifier) rememberFailure(c credentials, err error) {
	if v.delegationCap < 0 || !errors.Is(err, identity.ErrInvalid) || errors.Is(err, identity.ErrUnavailable) {
		return
	}
	v.dlg.putFailedToken(c.key(), err, v.now(), v.maxDelegations())
}

// VerifyBrowserAssertion verifies the assertion of a browser join
// (webkit/RULES.md choice 3). audience is the join endpoint's URL; accessToken is
// the form's access_token, or "" for a signed-out join.
func (v *Verifier) VerifyBrowserAssertion(ctx context.Context, assertion, audience, accessToken string) (BrowserAssertion, error) {
	b, err := v.CheckBrowserAssertion(ctx, assertion, audience, accessToken)
	if err != nil {
		return BrowserAssertion{}, err
	}
	if err := v.UseBrowserAssertion(ctx, b); err != nil {
		return BrowserAssertion{}, err
	}
	return b, nil
}

// CheckBrowserAssertion makes every check of VerifyBrowserAssertion but the
// last: the jti is not used up. A join calls it, makes its own checks, and
// calls UseBrowserAssertion only once the join can succeed, so that an
// assertion refused for another reason is not spent.
func (v *Verifier) CheckBrowserAssertion(ctx context.Context, assertion, audience, accessToken string) (BrowserAssertion, error) {
	key, err := v.failedBefore(jose.TypBrowser, audience, accessToken, assertion)
	if err != nil {
		return BrowserAssertion{}, fmt.Errorf("browser assertion: %w", err)
	}
	var c agentClaims
	s, err := v.verify(ctx, assertion, jose.TypBrowser, audience, maxBrowserLifetime, accessToken, &c)
	if err != nil {
		v.rememberFailure(key, err)
		return BrowserAssertion{}, fmt.Errorf("browser assertion: %w", err)
	}
	b := BrowserAssertion{Caller: s}
	if c.ReturnTo == nil {
		return BrowserAssertion{}, explain.Because(invalid("browser assertion: return_to is missing"),
			"browser assertion: return_to is missing: it is the absolute URL on "+v.Origin+" the join sends the browser to")
	}
	if err := v.checkReturnTo(*c.ReturnTo); err != nil {
		return BrowserAssertion{}, fmt.Errorf("browser assertion: %w", err)
	}
	b.ReturnTo = *c.ReturnTo
	if c.Extensions != nil {
		b.Extensions = *c.Extensions
	}
	return b, nil
}

// UseBrowserAssertion uses up the jti of an assertion CheckBrowserAssertion
// accepted: ErrInvalid when it was used before (a replay).
func (v *Verifier) UseBrowserAssertion(ctx context.Context, b BrowserAssertion) error {
	if err := v.useOnce(ctx, b.ReplayKey, b.ReplayUntil); err != nil {
		return fmt.Errorf("browser assertion: %w", err)
	}
	return nil
}

// useOnce uses up a token's replay key until until.
func (v *Verifier) useOnce(ctx context.Context, key string, until time.Time) error {
	if key == "" {
		return invalid("jti is missing")
	}
	return v.useOnceKey(ctx, key, until)
}

// useOnceKey uses up a replay key until until: ErrInvalid for a replay.
func (v *Verifier) useOnceKey(ctx context.Context, key string, until time.Time) error {
	first, err := v.Replay.UseOnce(ctx, key, until, v.now())
	if err != nil {
		return fmt.Errorf("%w: replay store: %w", identity.ErrUnavailable, err)
	}
	if !first {
		return explain.Because(invalid("jti was used before (replay)"),
			"jti was used before (a replay): each token is good for one request or one join; sign a new one, with a new jti, every time")
	}
	return nil
}

// verify makes the checks common to a Session JWT and a browser assertion,
// all but the jti: the caller uses it up last (useOnce), so that a token
// failing another check does not take room in the replay store.
func (v *Verifier) verify(ctx context.Context, token, typ, aud string, maxLifetime time.Duration, accessToken string, c *agentClaims) (Caller, error) {
	if v.Resolver == nil || v.Replay == nil || aud == "" {
		return Caller{}, fmt.Errorf("siteverify: Verifier needs Resolver, Replay and an audience")
	}
	if len(token) > jose.MaxTokenBytes {
		return Caller{}, invalid("longer than %d bytes", jose.MaxTokenBytes)
	}
	if token == "" {
		return Caller{}, explain.Because(invalid("%v: token is empty", jwt.ErrTokenMalformed), "the token is empty")
	}
	agentName, err := v.verifySigned(ctx, token, typ, aud, v.now(), c)
	if err != nil {
		return Caller{}, err
	}
	return checkClaims(c, agentName, aud, maxLifetime, accessToken)
}

// verifySigned decodes token into c and checks its JOSE header, its
// delegation, its signature by the delegated key, and its exp, iat, nbf
// and aud at now (jwt.Validator), returning the client_name of the agent
// that delegated.
func (v *Verifier) verifySigned(ctx context.Context, token, typ, aud string, now time.Time, c *agentClaims) (string, error) {
	// The steps of jwt.Parser.ParseWithClaims, in its order and with its
	// strict decoding (b64), validation and signature check, but with the JOSE header
	// decoded once per exact header segment (sessionHeader): every check
	// below still runs on every token.
	h, hb, ok := strings.Cut(token, ".")
	cb, sb, ok2 := strings.Cut(hb, ".")
	if !ok || !ok2 || strings.Contains(sb, ".") {
		return "", explain.Because(invalid("%v: token contains an invalid number of segments", jwt.ErrTokenMalformed),
			"not a compact JWS: a token is three base64url parts (header, claims, signature) joined by \".\"")
	}
	hdr, cached, err := v.sessionHeader(h)
	if err != nil {
		return "", err
	}
	claims, err := jose.B64.DecodeString(cb)
	if err != nil {
		return "", explain.Because(invalid("%v: could not base64 decode claim: %v", jwt.ErrTokenMalformed, err),
			"the claims (second part) are not base64url without padding")
	}
	if err := json.Unmarshal(claims, c); err != nil {
		return "", explain.Because(invalid("%v: could not JSON decode claim: %v", jwt.ErrTokenMalformed, err), claimsWords(err))
	}
	if !hdr.hasAlg {
		return "", explain.Because(invalid("%v: signing method (alg) is unspecified", jwt.ErrTokenUnverifiable), algWords(""))
	}
	method := jwt.GetSigningMethod(hdr.alg)
	if method == nil {
		return "", explain.Because(invalid("%v: signing method (alg) is unavailable", jwt.ErrTokenUnverifiable), algWords(hdr.alg))
	}
	sig, err := jose.B64.DecodeString(sb)
	if err != nil {
		return "", explain.Because(invalid("%v: could not base64 decode signature: %v", jwt.ErrTokenMalformed, err),
			"the signature (third part) is not base64url without padding")
	}
	if !slices.Contains(jose.SigningAlgs, method.Alg()) {
		return "", explain.Because(invalid("%v: signing method %v is invalid", jwt.ErrTokenSignatureInvalid, method.Alg()), algWords(method.Alg()))
	}
	if err := checkHeaderFields(hdr.typ, hdr.crit, typ); err != nil {
		return "", err
	}
	if !hdr.hasDlg {
		return "", explain.Because(invalid("JOSE header poppy_dlg is missing"),
			"JOSE header poppy_dlg is missing: it carries the agent's delegation (a "+jose.TypDelegation+" signed with a key of the agent's JWKS), whose cnf.jwk signs this token")
	}
	if c.Issuer == "" {
		return "", explain.Because(invalid("iss is missing"), "iss is missing: it is the agent's client_id")
	}
	d, err := v.delegationKeyed(ctx, hdr.dlgKey, hdr.dlg, now)
	if err != nil {
		return "", fmt.Errorf("poppy_dlg: %w", err)
	}
	if d.clientID != c.Issuer {
		return "", invalid("iss %q is not the delegation's iss %q", c.Issuer, d.clientID)
	}
	if !d.key.Fits(method.Alg()) {
		return "", invalid("alg %q does not fit the delegated key", method.Alg())
	}
	if err := method.Verify(token[:len(h)+1+len(cb)], sig, d.key.Key); err != nil {
		return "", explain.Because(invalid("%v: %v", jwt.ErrTokenSignatureInvalid, err),
			"the signature does not verify with the delegated key (cnf.jwk of poppy_dlg): sign with that key's private half, over the first two parts exactly as sent")
	}
	err = jwt.NewValidator(
		jwt.WithLeeway(jose.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithAudience(aud),
	).Validate(c)
	if err != nil {
		words, ok := jose.ClaimsWords(err, c, now, aud)
		err := invalid("%v: %v", jwt.ErrTokenInvalidClaims, err)
		if ok {
			return "", explain.Because(err, words)
		}
		return "", err
	}
	if !cached && v.delegationCap >= 0 {
		v.dlg.putHeader(h, hdr)
	}
	return d.agentName, nil
}

// checkClaims makes the checks of verify on a signed token's claims: iat,
// its lifetime, aud exactly, sid, sub and jti, and ath.
func checkClaims(c *agentClaims, agentName string, aud string, maxLifetime time.Duration, accessToken string) (Caller, error) {
	if c.IssuedAt == nil {
		return Caller{}, invalid("iat is missing")
	}
	iat, exp := c.IssuedAt.Time, c.ExpiresAt.Time
	if life := exp.Sub(iat); life <= 0 || life > maxLifetime {
		return Caller{}, explain.Because(invalid("lifetime exp − iat %v is not within (0, %v]", life, maxLifetime),
			fmt.Sprintf("exp − iat is %v: it must be more than 0 and at most %v (the token lives too long)", life, maxLifetime))
	}
	// The audience is exactly one value, the expected one: a token for
	// several sites is a token for none.
	if len(c.Audience) != 1 || c.Audience[0] != aud {
		return Caller{}, explain.Because(invalid("aud is not exactly %q", aud), jose.AudienceWords(c.Audience, aud))
	}
	if err := checkID("sid", c.SID); err != nil {
		return Caller{}, err
	}
	if err := checkID("sub", c.Subject); err != nil {
		return Caller{}, err
	}
	if err := checkID("jti", c.ID); err != nil {
		return Caller{}, err
	}
	switch {
	case accessToken != "" && c.ATH == nil:
		return Caller{}, explain.Because(invalid("ath is missing, and an access token was sent"),
			"ath is missing, and an access token was sent: a signed-in token carries ath, the base64url SHA-256 of the access token")
	case accessToken == "" && c.ATH != nil:
		return Caller{}, explain.Because(invalid("ath is present, and no access token was sent"),
			"ath is present, and no access token was sent with it (Authorization: Bearer, or the join's access_token)")
	case accessToken != "":
		if subtle.ConstantTimeCompare([]byte(*c.ATH), []byte(jose.ATH(accessToken))) != 1 {
			return Caller{}, explain.Because(invalid("ath does not match the access token"),
				"ath does not match the access token sent with it: ath is the base64url (no padding) SHA-256 of the token's ASCII bytes")
		}
	}
	return Caller{
		ClientID:  c.Issuer,
		User:      c.Subject,
		SID:       c.SID,
		AgentName: agentName,
		// The jti is used up until the token can no longer verify.
		ReplayKey:   replayKey(c.Issuer, c.ID),
		ReplayUntil: exp.Add(jose.Leeway),
	}, nil
}

type delegation struct {
	clientID  string
	key       jose.PublicKey // the delegated key, cnf.jwk
	agentName string         // the agent's client_name
	// What the cache re-checks on every use: the agent's key that signed
	// the delegation (kid, alg and the key itself) and the expiry.
	kid, alg  string
	signer    crypto.PublicKey
	expiresAt time.Time
}

// delegationKeyed verifies a poppy_dlg (webkit/RULES.md choice 1): signed by one of
// the agent's long-term keys, chosen by kid and alg both, at most 24 h long,
// not expired, vouching for cnf.jwk.
//
// Through the cache: a delegation that failed is refused again for 30 s
// without a signature check, so replaying junk costs a hash and a map
// lookup; a verified one is not checked again until its exp, but exp,
// AcceptAgent and the agent's current key set (a revoked or rotated key) are
// checked on every use.
//
// key is the SHA-256 of compact, the cache's key (joseHeader.dlgKey); it is
// not used when the cache is off.
func (v *Verifier) delegationKeyed(ctx context.Context, key [32]byte, compact string, now time.Time) (delegation, error) {
	if v.delegationCap < 0 {
		return v.verifyDelegation(ctx, compact, now)
	}
	if d, err, ok := v.dlg.get(key, now); ok {
		if err != nil {
			return delegation{}, err
		}
		return v.recheck(ctx, key, d, now)
	}
	d, err := v.verifyDelegation(ctx, compact, now)
	switch {
	case err == nil:
		v.dlg.putVerified(key, d, v.maxDelegations())
	case errors.Is(err, identity.ErrInvalid) && !errors.Is(err, identity.ErrUnavailable):
		// ErrUnavailable is not the delegation's fault; the Resolver
		// remembers it for the agent.
		v.dlg.putFailed(key, err, now, v.maxDelegations())
	}
	return d, err
}

func (v *Verifier) maxDelegations() int {
	if v.delegationCap > 0 {
		return v.delegationCap
	}
	return defaultMaxDelegations
}

// recheck makes, for a cached verified delegation, the checks that can
// change after it verified.
func (v *Verifier) recheck(ctx context.Context, key [32]byte, d delegation, now time.Time) (delegation, error) {
	if !now.Before(d.expiresAt.Add(jose.Leeway)) {
		err := explain.Because(invalid("delegation is expired"),
			fmt.Sprintf("the delegation expired at %s: sign a new one (it lives at most %v)", d.expiresAt.UTC().Format(time.RFC3339), maxDelegationLifetime))
		v.dlg.putFailed(key, err, now, v.maxDelegations())
		return delegation{}, err
	}
	if v.AcceptAgent != nil && !v.AcceptAgent(d.clientID) {
		return delegation{}, invalid("agent %s is not accepted", d.clientID)
	}
	// The agent's current keys: a key removed from its key set (revoked or
	// rotated out) stops its delegations once the Resolver reloads, cached
	// or not.
	k, name, err := v.agentKey(ctx, d.clientID, d.kid, d.alg)
	if err != nil {
		return delegation{}, err
	}
	if !sameKey(k.Key, d.signer) {
		v.dlg.drop(key)
		return delegation{}, invalid("kid %q of %s is now another key", d.kid, d.clientID)
	}
	d.agentName = name
	return d, nil
}

// sameKey reports whether a and b are the same public key: the same
// *ecdsa.PublicKey (the Resolver's, unchanged since it was loaded), or keys
// that are Equal.
func sameKey(a, b crypto.PublicKey) bool {
	if p, ok := a.(*ecdsa.PublicKey); ok && p != nil {
		if q, ok := b.(*ecdsa.PublicKey); ok && p == q {
			return true
		}
	}
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// verifyDelegation verifies a delegation without the cache.
func (v *Verifier) verifyDelegation(ctx context.Context, compact string, now time.Time) (delegation, error) {
	var c delegationClaims
	var d delegation
	var keyErr error
	p := jwt.NewParser(
		jwt.WithValidMethods(jose.SigningAlgs),
		jwt.WithStrictDecoding(),
		jwt.WithLeeway(jose.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	)
	_, err := p.ParseWithClaims(compact, &c, func(t *jwt.Token) (any, error) {
		if err := checkHeader(t, jose.TypDelegation); err != nil {
			keyErr = err
			return nil, err
		}
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			keyErr = invalid("JOSE header kid is missing")
			return nil, keyErr
		}
		if c.Issuer == "" {
			keyErr = invalid("iss is missing")
			return nil, keyErr
		}
		if v.AcceptAgent != nil && !v.AcceptAgent(c.Issuer) {
			keyErr = invalid("agent %s is not accepted", c.Issuer)
			return nil, keyErr
		}
		k, name, err := v.agentKey(ctx, c.Issuer, kid, t.Method.Alg())
		if err != nil {
			keyErr = err
			return nil, err
		}
		d.agentName, d.kid, d.alg, d.signer = name, kid, t.Method.Alg(), k.Key
		return k.Key, nil
	})
	if keyErr != nil {
		return delegation{}, keyErr
	}
	if err != nil {
		words, ok := jose.ClaimsWords(err, &c, now, "")
		if !ok && errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			words, ok = "the delegation's signature does not verify with the agent's key of its kid", true
		}
		err := invalid("%v", err)
		if ok {
			return delegation{}, explain.Because(err, "delegation: "+words)
		}
		return delegation{}, err
	}
	if c.IssuedAt == nil {
		return delegation{}, invalid("iat is missing")
	}
	if life := c.ExpiresAt.Sub(c.IssuedAt.Time); life <= 0 || life > maxDelegationLifetime {
		return delegation{}, explain.Because(invalid("lifetime exp − iat %v is not within (0, %v]", life, maxDelegationLifetime),
			fmt.Sprintf("exp − iat is %v: a delegation lives more than 0 and at most %v", life, maxDelegationLifetime))
	}
	if c.Cnf.JWK == nil {
		return delegation{}, invalid("cnf.jwk is missing")
	}
	key, err := c.Cnf.JWK.PublicKey()
	if err != nil {
		return delegation{}, invalid("cnf.jwk: %v", err)
	}
	d.clientID, d.key, d.expiresAt = c.Issuer, key, c.ExpiresAt.Time
	return d, nil
}

// delegationCache remembers delegations by the SHA-256 of their exact
// compact form (a 32-byte key stands for a string of up to 16 KiB).
// Verified and failed delegations are kept apart, each bounded, so junk
// fills only the failed half and never evicts a verified delegation.
type delegationCache struct {
	mu       sync.Mutex
	verified map[[32]byte]delegation
	failed   map[[32]byte]failedDelegation
	// tokens are Session JWTs and assertions that failed (failedBefore),
	// bounded as failed is.
	tokens map[[32]byte]failedDelegation
	// tokensUntil is when every entry of tokens has expired: from then on
	// they are all dropped at once (anyFailedTokens).
	tokensUntil time.Time
	// headers are JOSE headers of tokens that verified, decoded, by their
	// exact base64url segment (see sessionHeader).
	headers map[string]joseHeader
}

// Bounds of the decoded JOSE headers kept: a Session JWT's header is its
// poppy_dlg and a few members, about 1 KiB with an ES256 delegated key, so
// the cache holds at most 1024 × (4 KiB + 3 KiB).
const (
	maxHeaders           = 1024
	maxCachedHeaderBytes = 4 << 10
)

func (c *delegationCache) header(seg string) (joseHeader, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.headers[seg]
	return h, ok
}

func (c *delegationCache) putHeader(seg string, h joseHeader) {
	if len(seg) > maxCachedHeaderBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.headers == nil {
		c.headers = make(map[string]joseHeader)
	}
	evictOne(c.headers, maxHeaders)
	c.headers[strings.Clone(seg)] = h // seg is part of a token: not kept
}

// anyFailedTokens reports whether a failed token may be remembered at now:
// false when none is, or all have expired (they are then dropped).
func (c *delegationCache) anyFailedTokens(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tokens) == 0 {
		return false
	}
	if !now.Before(c.tokensUntil) {
		clear(c.tokens)
		return false
	}
	return true
}

func (c *delegationCache) failedToken(key [32]byte, now time.Time) (error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.tokens[key]
	if !ok {
		return nil, false
	}
	if !now.Before(f.until) {
		delete(c.tokens, key)
		return nil, false
	}
	return fmt.Errorf("%w (remembered for %v)", f.err, failedDelegationTTL), true
}

func (c *delegationCache) putFailedToken(key [32]byte, err error, now time.Time, max int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens == nil {
		c.tokens = make(map[[32]byte]failedDelegation)
	}
	evictOne(c.tokens, max)
	until := now.Add(failedDelegationTTL)
	c.tokens[key] = failedDelegation{err: err, until: until}
	if until.After(c.tokensUntil) {
		c.tokensUntil = until
	}
}

type failedDelegation struct {
	err   error
	until time.Time
}

// get returns the cached delegation or failure for key; ok is false when
// there is none (or it has expired).
func (c *delegationCache) get(key [32]byte, now time.Time) (delegation, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.failed[key]; ok {
		if now.Before(f.until) {
			return delegation{}, fmt.Errorf("%w (remembered for %v)", f.err, failedDelegationTTL), true
		}
		delete(c.failed, key)
	}
	d, ok := c.verified[key]
	return d, nil, ok
}

func (c *delegationCache) putVerified(key [32]byte, d delegation, max int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verified == nil {
		c.verified = make(map[[32]byte]delegation)
	}
	evictOne(c.verified, max)
	c.verified[key] = d
}

func (c *delegationCache) putFailed(key [32]byte, err error, now time.Time, max int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.failed = make(map[[32]byte]failedDelegation)
	}
	delete(c.verified, key)
	evictOne(c.failed, max)
	c.failed[key] = failedDelegation{err: err, until: now.Add(failedDelegationTTL)}
}

func (c *delegationCache) drop(key [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.verified, key)
}

// evictOne makes room for one entry in m, bounded by max: an arbitrary
// entry goes (map iteration order is random), which costs O(1) whatever
// fills the map.
func evictOne[K comparable, V any](m map[K]V, max int) {
	for k := range m {
		if len(m) < max {
			return
		}
		delete(m, k)
	}
}

// joseHeader is what verify reads from the JOSE header of a Session JWT or
// a browser assertion, decoded as jwt.Parser decodes it (into a map).
type joseHeader struct {
	alg    string
	hasAlg bool // alg is present and a string
	typ    string
	crit   bool // crit is present
	dlg    string
	hasDlg bool     // poppy_dlg is present and a string
	dlgKey [32]byte // SHA-256 of dlg, the delegation cache's key
}

// sessionHeader decodes the JOSE header segment seg of a Session JWT or a
// browser assertion. A token's header is the same for every token of its
// delegation, so the decoded header of a token that verified is kept by
// its exact segment and cached is true: decoding is a function of those
// bytes alone, and verify makes every check on it again.
func (v *Verifier) sessionHeader(seg string) (h joseHeader, cached bool, err error) {
	if v.delegationCap >= 0 {
		if h, ok := v.dlg.header(seg); ok {
			return h, true, nil
		}
	}
	hb, err := jose.B64.DecodeString(seg)
	if err != nil {
		return joseHeader{}, false, invalid("%v: could not base64 decode header: %v", jwt.ErrTokenMalformed, err)
	}
	var m map[string]any
	if err := json.Unmarshal(hb, &m); err != nil {
		return joseHeader{}, false, invalid("%v: could not JSON decode header: %v", jwt.ErrTokenMalformed, err)
	}
	h.alg, h.hasAlg = m["alg"].(string)
	h.typ, _ = m["typ"].(string)
	_, h.crit = m["crit"]
	h.dlg, h.hasDlg = m["poppy_dlg"].(string)
	if h.hasDlg && v.delegationCap >= 0 {
		h.dlgKey = sha256.Sum256([]byte(h.dlg))
	}
	return h, false, nil
}

// checkHeader checks typ (RFC 7515 §4.1.9: case-insensitive, "application/"
// optional) and refuses crit, since no extension header is understood.
func checkHeader(t *jwt.Token, want string) error {
	typ, _ := t.Header["typ"].(string)
	_, crit := t.Header["crit"]
	return checkHeaderFields(typ, crit, want)
}

// checkHeaderFields is checkHeader on a header's typ (a string, or "") and
// whether it has crit.
func checkHeaderFields(typ string, crit bool, want string) error {
	typ = strings.ToLower(typ)
	if typ != want && typ != "application/"+want {
		err := invalid("JOSE header typ %q is not %q", typ, want)
		if kind, ok := typKinds[strings.TrimPrefix(typ, "application/")]; ok {
			return explain.Because(err, fmt.Sprintf("JOSE header typ %q is not %q: that typ is %s, not %s", typ, want, kind, typKinds[want]))
		}
		return err
	}
	if crit {
		return invalid("JOSE header crit is not understood")
	}
	return nil
}

// checkID checks sid, sub and jti: 1–255 bytes of visible ASCII.
func checkID(claim, s string) error {
	if s == "" || len(s) > maxIDBytes {
		return invalid("%s is not 1–%d bytes", claim, maxIDBytes)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return invalid("%s has a character that is not visible ASCII", claim)
		}
	}
	return nil
}

// checkReturnTo requires an absolute URL on the Verifier's Origin, without
// userinfo: the join answers 303 to it, and must not become an open
// redirect.
func (v *Verifier) checkReturnTo(s string) error {
	if len(s) > jose.MaxURLLength || strings.ContainsAny(s, "\\") {
		return invalid("return_to is not a plain URL of at most %d bytes", jose.MaxURLLength)
	}
	u, err := url.Parse(s)
	if err != nil {
		return invalid("return_to: %v", err)
	}
	o, err := url.Parse(v.Origin)
	if err != nil {
		return fmt.Errorf("siteverify: Verifier.Origin: %w", err)
	}
	if u.User != nil || u.Opaque != "" || !strings.EqualFold(u.Scheme, o.Scheme) || !jose.SameHost(u, o) {
		err := invalid("return_to is not on %s", v.Origin)
		if u.Host == "" {
			return explain.Because(err, fmt.Sprintf("return_to %q is not an absolute URL on %s", s, v.Origin))
		}
		words := fmt.Sprintf("return_to %q is on %s://%s, not on this website's origin %s", s, u.Scheme, u.Host, v.Origin)
		if !strings.EqualFold(u.Hostname(), o.Hostname()) {
			words += " (localhost, 127.0.0.1 and [::1] are different origins: use the origin the website's poppy.json names)"
		}
		return explain.Because(err, words)
	}
	return nil
}

// typKinds names each token's typ, for the words of a typ that is
// another token's.
var typKinds = map[string]string{
	jose.TypSession:    "a Session JWT's (the Poppy-Session header)",
	jose.TypBrowser:    "a browser join assertion's",
	jose.TypDelegation: "a delegation's (poppy_dlg)",
	"at+jwt":           "an access token's",
	"jwt":              "a plain JWT's",
}

// algWords says what is wrong with a token's alg.
func algWords(alg string) string {
	if alg == "" {
		return "JOSE header alg is missing: sign with one of " + strings.Join(jose.SigningAlgs, ", ")
	}
	return fmt.Sprintf("JOSE header alg %q is not one of %s (never none or an HMAC)", alg, strings.Join(jose.SigningAlgs, ", "))
}

// claimsWords says why a token's claims did not decode: a claim of the
// wrong JSON type, such as extensions sent as an array.
func claimsWords(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		want := "a " + te.Type.String()
		switch te.Field {
		case "extensions":
			want = `a string in the Poppy-Extensions syntax, such as "\"operations\";v=\"3\""`
		case "aud":
			want = "a string (or an array of one string)"
		case "exp", "iat", "nbf":
			want = "a number of seconds since 1970"
		case "iss", "sub", "sid", "jti", "ath", "return_to":
			want = "a string"
		}
		return fmt.Sprintf("claim %s must be %s, not a JSON %s", te.Field, want, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "the claims are not a JSON object: " + se.Error()
	}
	return "the claims could not be read: " + err.Error()
}
