// Package siteverify is the website's verifier of the Personal Agent's
// proofs of identity, which endpoint.NewMount builds and hands to the
// operations endpoint and to the browser join (webkit/RULES.md choices 1
// and 3):
//
//   - the Session JWT of the Poppy-Session header, on every request to
//     `endpoint` (operations spec §6 "What the Company checks": the Session
//     header checks come first), with the Bearer access token it names by
//     its ath (ParseAuthorization, CheckAccessToken);
//   - the browser join assertion (a poppy-browser+jwt) of the join form,
//     whose extensions claim is what step 2 of the join declares for the
//     browser's requests (operations spec §2).
//
// Both are verified in three steps, each a check of webkit/RULES.md choice
// 1:
//
//  1. The agent's keys come from its identity.Resolver (metadata document,
//     key set, with the hardening of webkit/RULES.md "Agent identity and
//     hardening").
//  2. The delegation in the JOSE header poppy_dlg is verified with the
//     agent key of its kid and alg (at most 24 h long), and yields the
//     delegated key (cnf.jwk).
//  3. The token is verified with the delegated key, and its claims: iss,
//     aud (the website's origin, or the join's URL), sid, sub, iat, exp (at
//     most 300 s, 60 s for an assertion, 30 s leeway), jti (single use,
//     through the ReplayStore, the kit's store) and ath.
//
// Delegations, decoded JOSE headers and tokens that failed are cached by
// their exact bytes, bounded, so that junk replayed without end costs a
// hash and a map lookup (W146: AcceptAgent is still asked on every use).
//
// Errors wrap identity.ErrInvalid (answer 401 invalid_session) or
// identity.ErrUnavailable (answer 503 with Retry-After). Nothing here logs
// a token or a key, and no error message contains one.
package siteverify
