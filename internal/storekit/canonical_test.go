package storekit

import (
	"bytes"
	"testing"
)

// W118 W119: the fast path agrees with CanonicalTerms: whatever it calls
// canonical, CanonicalTerms writes back byte for byte.
func TestCanonicalAlready(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{`{"a":1,"b":"x"}`, true},
		{`{"order_id":"ord_7","size":"M"}`, true},
		{`{"a":{"b":[1,2.5,-3e+2,true,false,null,"s",{}],"c":[]},"d":0}`, true},
		{`{"b":1,"a":2}`, false},       // unsorted
		{`{"a":1,"a":2}`, false},       // duplicate
		{`{"a": 1}`, false},            // space
		{` {"a":1}`, false},            // leading space
		{`{"a":1} `, false},            // trailing space
		{`{"a":"\u00e9"}`, false},      // an escape
		{`{"a":"é"}`, false},           // non-ASCII
		{`{"a":"<&>"}`, true},          // kept as is (no HTML escaping)
		{`[1]`, false},                 // not an object
		{`{"a":01}`, false},            // bad number
		{`{"a":1.}`, false},            // bad number
		{`{"a":tru}`, false},           // bad literal
		{`{"a":1`, false},              // truncated
		{`{"a":[1,]}`, false},          // trailing comma
		{`{"A":1,"a":2,"b":3}`, true},  // byte order
		{`{"a":{"d":1,"c":2}}`, false}, // nested unsorted
		{`{"price":{"amount":"70.00","currency":"USD"}}`, true},
	} {
		got := canonicalAlready([]byte(tc.in))
		if got != tc.want {
			t.Errorf("canonicalAlready(%s) = %v, want %v", tc.in, got, tc.want)
		}
		if got {
			c, err := CanonicalTerms([]byte(tc.in))
			if err != nil || !bytes.Equal(c, []byte(tc.in)) {
				t.Errorf("%s is called canonical, but CanonicalTerms writes %s (%v)", tc.in, c, err)
			}
		}
	}
}

func FuzzCanonicalAlready(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":"x"}`, `{"a":{"b":[1,2.5,-3e+2,true,null]}}`, `{"b":1,"a":2}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !canonicalAlready([]byte(s)) {
			return
		}
		c, err := CanonicalTerms([]byte(s))
		if err != nil || !bytes.Equal(c, []byte(s)) {
			t.Fatalf("%q called canonical; CanonicalTerms = %q, %v", s, c, err)
		}
	})
}
