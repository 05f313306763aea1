// Package testenv decides what a test does when something it needs from the
// machine (a redis-server, a Chromium) is missing: it skips with the reason,
// unless OPSGATE_REQUIRE names the thing, as .ci/run does, and then it fails.
//
// go test -short is another matter: a long test (a fault suite, a cluster,
// a real browser) skips with t.Skip("-short: …") before it looks for what
// it needs, so a -short skip is never a missing program and
// OPSGATE_REQUIRE does not turn it into a failure.
package testenv

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Required reports whether OPSGATE_REQUIRE (a comma-separated list, e.g.
// "redis,chromium") names what.
func Required(what string) bool {
	return slices.Contains(strings.Split(os.Getenv("OPSGATE_REQUIRE"), ","), what)
}

// Missing skips t because what is missing, or fails it when what is required.
func Missing(t testing.TB, what, reason string) {
	t.Helper()
	if Required(what) {
		t.Fatalf("%s is required (OPSGATE_REQUIRE=%s) but missing: %s", what, os.Getenv("OPSGATE_REQUIRE"), reason)
	}
	t.Skipf("SKIP: %s missing: %s (set OPSGATE_REQUIRE=%s to make this fail)", what, reason, what)
}
