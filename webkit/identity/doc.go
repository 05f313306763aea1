// Package identity verifies who is calling: the Personal Agent's Session JWT
// (the Poppy-Session header), its browser join assertion, and the access
// token that signs a Session in, as webkit/RULES.md choices 1–3 fix them.
// It is the website's side only: the agent's side (its keys, delegations,
// signing) is not for websites, and webkittest's Agent plays it in a
// site's tests.
//
// A Session JWT is verified in three steps, each a check of webkit/RULES.md
// choice 1:
//
//  1. The Resolver loads the agent's Client ID Metadata Document (at its
//     client_id URL, naming itself) and its key set (jwks_uri, same host),
//     with the 1.0 hardening: failures remembered 30 s, an unknown kid
//     reloading the key set at most every 30 s, old keys kept 1 h while
//     reloads fail, no redirects, no private addresses, bounded sizes.
//  2. The delegation in the JOSE header poppy_dlg is verified with the
//     agent key of its kid and alg, and yields the delegated key (cnf.jwk).
//  3. The Session JWT is verified with the delegated key, and its claims:
//     iss, aud (the Company's origin), sid, sub, iat, exp, jti (single use,
//     through the Verifier's ReplayStore, such as the kit's store.Store)
//     and ath (bound to the access token).
//
// Errors wrap ErrInvalid (answer 401 invalid_session) or ErrUnavailable
// (answer 503 with Retry-After).
//
// endpoint.NewMount builds the Verifier itself: a website sets only the
// Resolver's options and its AccessTokens in endpoint.Config. A website that
// verifies by hand (its own join, its own Authenticator) does this:
//
//	v := &identity.Verifier{
//		Origin:   "https://shop.example",
//		Resolver: &identity.Resolver{},
//		Replay:   st, // a store.Store
//	}
//	tokens := &identity.JWTAccessTokens{Issuer: "https://shop.example", Keys: keys}
//
//	bearer, err := identity.ParseAuthorization(r.Header)
//	if err != nil { /* 400 or 401 */ }
//	s, err := v.VerifySession(r.Context(), r.Header.Get("Poppy-Session"), bearer)
//	if err != nil { /* 401 invalid_session, or 503 for ErrUnavailable */ }
//	if bearer != "" {
//		at, err := tokens.VerifyAccessToken(r.Context(), bearer)
//		if err == nil {
//			err = identity.CheckAccessToken(s, at)
//		}
//		// signed in as at.Account
//	}
//
// Tokens and keys are credentials: nothing in this package logs them, and
// no error message contains one.
package identity
