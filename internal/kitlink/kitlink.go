// Package kitlink lets package endpoint reach the parts of a webkit.Kit
// that only an endpoint.Mount serves (the kit's browser-facing routes, the
// check that a Kit can work), without making them part of webkit's API.
// Package webkit sets each function in its init; kitlink imports neither
// package, so the Kit is passed as any.
package kitlink

import (
	"net/http"
	"time"

	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit/identity"
)

var (
	// Routes returns the Kit's browser-facing routes (waiting.js, fetch.js,
	// opsgate.css, status), served under its base path.
	Routes func(kit any) http.Handler
	// Check returns why the Kit can't work, or nil.
	Check func(kit any) error
	// JoinHandler returns the Kit's browser join (§2) at url, verifying
	// with v; tokens verifies a signed-in join's access token (nil refuses
	// signed-in joins).
	JoinHandler func(kit any, url string, v *siteverify.Verifier, tokens identity.AccessTokens) http.Handler
	// BasePath is the path the Kit's routes are under, "/_opsgate/".
	BasePath func(kit any) string
	// Store is the Kit's Store as the Gate calls it now: Kit.Store with
	// Kit.StoreTimeout on each call and Kit.Observer seeing each step,
	// read from the Kit's fields at each call, so that the endpoint and
	// the Gate never use two stores (issue 34: one Kit).
	Store func(kit any) store.Store
	// Now is the Kit's time now: Kit.Clock, or time.Now.
	Now func(kit any) time.Time
)
