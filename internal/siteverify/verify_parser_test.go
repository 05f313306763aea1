package siteverify

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/agenttest"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/webkit/identity"
)

// verifySignedWithParser is verifySigned as it was written on
// jwt.Parser.ParseWithClaims, with the JOSE header decoded on every call:
// the reference FuzzVerifySignedMatchesParser holds verifySigned to.
func (v *Verifier) verifySignedWithParser(ctx context.Context, token, typ, aud string, now time.Time, c *agentClaims) (string, error) {
	var agentName string
	var keyErr error
	p := jwt.NewParser(
		jwt.WithValidMethods(jose.SigningAlgs),
		jwt.WithStrictDecoding(),
		jwt.WithLeeway(jose.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithAudience(aud),
	)
	_, err := p.ParseWithClaims(token, c, func(t *jwt.Token) (any, error) {
		if err := checkHeader(t, typ); err != nil {
			keyErr = err
			return "", err
		}
		dlg, ok := t.Header["poppy_dlg"].(string)
		if !ok {
			keyErr = invalid("JOSE header poppy_dlg is missing")
			return "", keyErr
		}
		if c.Issuer == "" {
			keyErr = invalid("iss is missing")
			return "", keyErr
		}
		d, err := v.delegationKeyed(ctx, sha256.Sum256([]byte(dlg)), dlg, now)
		if err != nil {
			keyErr = fmt.Errorf("poppy_dlg: %w", err)
			return "", keyErr
		}
		if d.clientID != c.Issuer {
			keyErr = invalid("iss %q is not the delegation's iss %q", c.Issuer, d.clientID)
			return "", keyErr
		}
		if !d.key.Fits(t.Method.Alg()) {
			keyErr = invalid("alg %q does not fit the delegated key", t.Method.Alg())
			return "", keyErr
		}
		agentName = d.agentName
		return d.key.Key, nil
	})
	if keyErr != nil {
		return "", keyErr
	}
	if err != nil {
		return "", invalid("%v", err)
	}
	return agentName, nil
}

// FuzzVerifySignedMatchesParser: verifySigned, with its cache of decoded
// JOSE headers, decodes every token to the same claims, and accepts or
// refuses it with the same error, as jwt.Parser.ParseWithClaims does. A
// token is taken as it is, or, when header or claims is set, made of them
// ($DLG, $ISS, $NOW and $EXP replaced by the delegation, the agent, now and
// now + 1 min) and signed with the delegated key, so that any header and
// claims reach every check.
func FuzzVerifySignedMatchesParser(f *testing.F) {
	e := fuzzEnv(f)
	for _, c := range []agentside.SessionClaims{{Audience: origin, SID: "ses_1", User: "usr_1"}, {Audience: origin, SID: "s", User: "u", AccessToken: "at"}, {Audience: "https://other.example", SID: "s", User: "u"}} {
		tok, err := e.d.SessionJWT(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok, "", "", jose.TypSession)
	}
	f.Add(junkDelegation(e, e.a.Keys.Kid(), "ES256", 64), "", "", jose.TypSession)
	f.Add(b64json(map[string]any{"alg": "none"})+"."+b64json(jwt.MapClaims{"iss": "https://x.example/a"})+".", "", "", jose.TypSession)
	f.Add("a.b.c", "", "", jose.TypBrowser)
	claims := `{"iss":"$ISS","aud":"https://shop.example","sid":"s","sub":"u","iat":$NOW,"exp":$EXP,"jti":"j"}`
	f.Add("", `{"alg":"ES256","typ":"poppy-session+jwt","poppy_dlg":"$DLG"}`, claims, jose.TypSession)
	f.Add("", `{"alg":"ES256","typ":"Application/Poppy-Session+JWT","poppy_dlg":"$DLG","crit":null}`, claims, jose.TypSession)
	f.Add("", `{"ALG":"none","alg":"ES256","typ":"poppy-session+jwt","poppy_dlg":"$DLG","poppy_dlg":1}`, `{"ISS":"$ISS","aud":["https://shop.example"],"exp":"$EXP","iat":$NOW.5}`, jose.TypSession)
	f.Fuzz(func(t *testing.T, token, header, claims, typ string) {
		now := e.clk.Now()
		if header != "" || claims != "" {
			r := strings.NewReplacer("$DLG", e.d.Compact(), "$ISS", e.a.ClientID, "$NOW", fmt.Sprint(now.Unix()), "$EXP", fmt.Sprint(now.Add(time.Minute).Unix()))
			input := jose.B64.EncodeToString([]byte(r.Replace(header))) + "." + jose.B64.EncodeToString([]byte(r.Replace(claims)))
			sig, err := jwt.SigningMethodES256.Sign(input, e.d.Signer())
			if err != nil {
				t.Fatal(err)
			}
			token = input + "." + jose.B64.EncodeToString(sig)
		}
		var got, want agentClaims
		ga, gerr := e.v.verifySigned(t.Context(), token, typ, origin, now, &got)
		wa, werr := e.v.verifySignedWithParser(t.Context(), token, typ, origin, now, &want)
		// A delegation that failed is remembered (and says so) for the
		// second call: the first call's failure is compared without it.
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error()+remembered != werr.Error() && gerr.Error() != werr.Error() {
			t.Fatalf("verifySigned: %v\nParseWithClaims: %v", gerr, werr)
		}
		if ga != wa || !reflect.DeepEqual(got, want) {
			t.Fatalf("verifySigned: %q %+v\nParseWithClaims: %q %+v", ga, got, wa, want)
		}
	})
}

var remembered = fmt.Sprintf(" (remembered for %v)", failedDelegationTTL)

// TestHeaderCache: the JOSE header of a token that verified is kept, and
// a token with the same header is checked in full: a bad signature, a
// lifetime too long or a replayed jti is refused as without the cache. A
// refused token's header is not kept.
func TestHeaderCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := e.session(t, agentside.SessionClaims{})
	if _, err := e.v.VerifySession(t.Context(), good, ""); err != nil {
		t.Fatal(err)
	}
	if n := len(e.v.dlg.headers); n != 1 {
		t.Fatalf("%d headers kept, want 1", n)
	}
	if _, err := e.v.VerifySession(t.Context(), good, ""); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("replay: err = %v", err)
	}
	// The same header (same delegation and key), another signature.
	next := e.session(t, agentside.SessionClaims{})
	head, _, _ := strings.Cut(good, ".")
	if h2, _, _ := strings.Cut(next, "."); h2 != head {
		t.Fatal("two Session JWTs of one delegation have different headers")
	}
	bad := next[:strings.LastIndex(next, ".")+1] + strings.Repeat("A", 86)
	if _, err := e.v.VerifySession(t.Context(), bad, ""); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("bad signature with a kept header: err = %v", err)
	}
	if _, err := e.v.VerifySession(t.Context(), next, ""); err != nil {
		t.Fatal(err)
	}
	// A header never seen, refused: not kept.
	other, err := e.a.Keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forged := agenttest.Forge(t, "ES256", other.Signer(), map[string]any{"typ": jose.TypSession, "poppy_dlg": e.d.Compact()}, e.claims())
	if _, err := e.v.VerifySession(t.Context(), forged, ""); !errors.Is(err, identity.ErrInvalid) {
		t.Fatalf("forged: err = %v", err)
	}
	if n := len(e.v.dlg.headers); n != 1 {
		t.Fatalf("%d headers kept after a refused token, want 1", n)
	}
}
