package storekit

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
)

// Slot and ActionDigest name records already stored (Redis hash tags): they
// must stay SHA-256 of the two strings joined by a zero byte, whatever their
// lengths.
func TestDigestsAreStable(t *testing.T) {
	old := func(a, b string, n int) string {
		h := sha256.New()
		h.Write([]byte(a))
		h.Write([]byte{0})
		h.Write([]byte(b))
		return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:n])
	}
	for _, p := range [][2]string{
		{"", ""},
		{"https://agent.example/client", "usr_1"},
		{strings.Repeat("a", 600), "u"},
		{"a", strings.Repeat("u", 1000)},
	} {
		if got, want := Slot(p[0], p[1]), old(p[0], p[1], 12); got != want {
			t.Errorf("Slot(%.20q, %.20q) = %s, want %s", p[0], p[1], got, want)
		}
		if got, want := ActionDigest(p[0], p[1]), old(p[0], p[1], 15); got != want {
			t.Errorf("ActionDigest = %s, want %s", got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Slot("https://agent.example/client", "usr_1") }); n > 1 {
		t.Errorf("Slot allocates %v times, want 1 (the string)", n)
	}
}
