package jose

import "testing"

// The ath claim binds a Session JWT to its access token (webkit/RULES.md
// choice 1).
func TestATH(t *testing.T) {
	if got, want := ATH("eyJhbGciOi.eyJzdWIiOi.Qp4w"), "Qx2gqpH984MAfLBVJ0dA-dNS7J4vKE54aPLoD3jWnz8"; got != want {
		t.Errorf("ATH = %s, want %s", got, want)
	}
}
