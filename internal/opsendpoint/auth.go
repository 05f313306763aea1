package opsendpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// IdentityAuthenticator is the kit's default Authenticator: the Session JWT
// verified by webkit/identity (webkit/RULES.md choice 1) and, when the request
// carries one, the access token (choice 2), which must have been issued to
// the Session's agent and then names the account the Session is signed in
// to. The endpoint requires no scope (§4, W71).
type IdentityAuthenticator struct {
	Verifier *siteverify.Verifier
	// AccessTokens verifies access tokens; nil refuses every request that
	// carries one (the website then has no signed-in Sessions).
	AccessTokens identity.AccessTokens
}

// Authenticate implements Authenticator: the Session JWT's jti is used up.
func (a IdentityAuthenticator) Authenticate(ctx context.Context, r *http.Request) (webkit.Session, error) {
	s, _, err := a.authenticate(ctx, r, false)
	return s, err
}

// AuthenticateDeferred implements DeferredAuthenticator: the Session JWT's
// jti is returned, for the endpoint to use up in the same store step as
// the approval the request records.
func (a IdentityAuthenticator) AuthenticateDeferred(ctx context.Context, r *http.Request) (webkit.Session, Replay, error) {
	return a.authenticate(ctx, r, true)
}

func (a IdentityAuthenticator) authenticate(ctx context.Context, r *http.Request, deferReplay bool) (webkit.Session, Replay, error) {
	values := r.Header.Values(headers.Session)
	if len(values) != 1 || values[0] == "" {
		return webkit.Session{}, Replay{}, fmt.Errorf("%w: exactly one Poppy-Session header is required", ErrUnauthenticated)
	}
	var token string
	if len(r.Header.Values("Authorization")) > 0 {
		t, err := siteverify.ParseAuthorization(r.Header)
		if err != nil {
			return webkit.Session{}, Replay{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
		}
		token = t
	}
	verify := a.Verifier.VerifySession
	if deferReplay {
		verify = a.Verifier.CheckSession
	}
	s, err := verify(ctx, values[0], token) // also checks ath against the token
	if err != nil {
		return webkit.Session{}, Replay{}, classify(err, ErrUnauthenticated)
	}
	session := webkit.Session{ID: s.SID, Agent: s.ClientID, User: s.User}
	var replay Replay
	if deferReplay {
		replay = Replay{Key: s.ReplayKey, Until: s.ReplayUntil}
	}
	if token == "" {
		return session, replay, nil
	}
	if a.AccessTokens == nil {
		return webkit.Session{}, Replay{}, fmt.Errorf("%w: this website accepts no access tokens", ErrInvalidToken)
	}
	at, err := a.AccessTokens.VerifyAccessToken(ctx, token)
	if err != nil {
		return webkit.Session{}, Replay{}, classify(err, ErrInvalidToken)
	}
	if err := siteverify.CheckAccessToken(s, at); err != nil {
		return webkit.Session{}, Replay{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if at.Account == "" {
		return webkit.Session{}, Replay{}, fmt.Errorf("%w: the access token names no account (sub)", ErrInvalidToken)
	}
	session.Account = at.Account
	return session, replay, nil
}

// classify maps identity's two failures to the endpoint's: keys or replay
// store unreachable → ErrUnavailable (503), anything else → invalid.
func classify(err error, invalid error) error {
	if errors.Is(err, identity.ErrUnavailable) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", invalid, err)
}
