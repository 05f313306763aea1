package headers

import (
	"math/rand/v2"
	"testing"

	"github.com/dunglas/httpsfv"
)

// FormatOperation writes Poppy-Operation directly; it must write
// exactly what an RFC 9651 serializer writes, for every sid the kit accepts
// (any visible ASCII, '"' and '\' included) and every valid ref (W53, W57).
func TestFormatOperationMatchesHTTPSFV(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const refChars = "ABCXYZabcxyz0189-_."
	random := func(min, max int, char func() byte) string {
		b := make([]byte, min+rng.IntN(max-min+1))
		for i := range b {
			b[i] = char()
		}
		return string(b)
	}
	sids := []string{"ses_Hq3vT8nW2kLm9xRb", `a"b`, `a\b`, `"\"`, "~!@#$%^&*()"}
	for range 500 {
		sids = append(sids, random(1, 255, func() byte { return byte(0x21 + rng.IntN(0x7e-0x21+1)) }))
	}
	for i, sid := range sids {
		ref := random(1, 300, func() byte { return refChars[rng.IntN(len(refChars))] })
		got, err := FormatOperation(sid, ref)
		if err != nil {
			t.Fatalf("%q %q: %v", sid, ref, err)
		}
		dict := httpsfv.NewDictionary()
		dict.Add("sid", httpsfv.NewItem(sid))
		dict.Add("ref", httpsfv.NewItem(ref))
		want, err := httpsfv.Marshal(dict)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("#%d: got %s\nwant %s", i, got, want)
		}
		if s, r, err := ParseOperation([]string{got}); err != nil || s != sid || r != ref {
			t.Fatalf("#%d round trip: %q %q %v", i, s, r, err)
		}
	}
}
