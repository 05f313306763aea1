// Package identity holds what a website sets up to know who is calling:
// the Resolver that loads each Personal Agent's keys, and the access
// tokens that sign a Session in to an account (webkit/RULES.md choices 1
// and 2). endpoint.NewMount takes both in endpoint.Config and builds the
// kit's Session and join verifier from them; a website never calls that
// verifier itself.
//
// The Resolver loads an agent's Client ID Metadata Document (at its
// client_id URL, naming itself) and its key set (jwks_uri, same host), and
// keeps them: a failed load is remembered for 30 s, an unknown kid reloads
// the key set at most every 30 s, keys loaded before are kept for an hour
// while reloads fail. It follows no redirects, dials no private address and
// bounds every document's size and every load's time. Its zero value is
// ready; set AllowLocal for local development, or HTTPClient for tests.
//
// AccessTokens verifies the Bearer token an agent sends for a signed-in
// Session. JWTAccessTokens is the default, for RFC 9068 JWTs from the
// website's own authorization server; a website whose provider issues
// opaque tokens plugs in its own (introspection, for example):
//
//	cfg := endpoint.Config{
//		Origin:       "https://shop.example",
//		Kit:          kit,
//		Resolver:     &identity.Resolver{},
//		AccessTokens: &identity.JWTAccessTokens{Issuer: "https://shop.example", Keys: keys},
//	}
//
// Errors wrap ErrInvalid (the agent's fault: the kit answers 401
// invalid_session) or ErrUnavailable (the agent's keys could not be
// reached: 503 with Retry-After).
//
// Tokens and keys are credentials: nothing in this package logs them, and
// no error message contains one.
package identity
