package storekit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// AppendTerms is json.Marshal as CanonicalTerms reads it: for every value
// it takes, the canonical terms are the same bytes (or the same refusal);
// it declines what it doesn't take; and terms of plain strings come out
// canonical already.
func TestAppendTermsAsJSONMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	strs := []string{"", "ord_1", "stormline-insulated-m", "70.00", `q"uote`, `back\`, "<b>&amp;</b>", "é", "\u2028", "\xff", "tab\t", "\x7f", "emoji 🙂"}
	str := func() string {
		if r.IntN(3) == 0 {
			return strs[r.IntN(len(strs))]
		}
		b := make([]byte, r.IntN(10))
		for i := range b {
			b[i] = byte(' ' + r.IntN(95))
		}
		return string(b)
	}
	type named map[string]any
	var value func(depth int) any
	value = func(depth int) any {
		switch k := r.IntN(14); {
		case k < 4 || depth > 3:
			return str()
		case k == 4:
			return r.IntN(2) == 0
		case k == 5:
			return nil
		case k == 6:
			return r.IntN(1000) - 500
		case k == 7:
			return r.Float64() * 100 // declined: json.Marshal's float form
		case k == 8:
			m := map[string]string{}
			for range r.IntN(4) {
				m[str()] = str()
			}
			return m
		case k == 9:
			return []string{str(), str()}
		case k == 10:
			var a []any
			for range r.IntN(4) {
				a = append(a, value(depth+1))
			}
			return a
		case k == 11:
			return named{"n": str()} // declined: a named type
		case k == 12:
			return uint64(r.Uint64())
		default:
			m := map[string]any{}
			for range r.IntN(5) {
				m[str()] = value(depth + 1)
			}
			return m
		}
	}
	took, declined := 0, 0
	for i := range 20_000 {
		var v any = value(0)
		if i%2 == 0 {
			m := map[string]any{"order_id": str()}
			for range r.IntN(4) {
				m[str()] = value(1)
			}
			v = m
		}
		got, ok := AppendTerms([]byte("x"), v)
		if !ok {
			declined++
			if string(got) != "x" {
				t.Fatalf("declined %#v but changed b: %q", v, got)
			}
			continue
		}
		took++
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("AppendTerms took %#v, which json.Marshal refuses: %v", v, err)
		}
		c1, err1 := CanonicalTerms(got[1:])
		c2, err2 := CanonicalTerms(want)
		if (err1 == nil) != (err2 == nil) || !bytes.Equal(c1, c2) {
			t.Fatalf("%#v:\n AppendTerms %s -> %s, %v\n json.Marshal %s -> %s, %v", v, got[1:], c1, err1, want, c2, err2)
		}
	}
	if took < 5000 || declined < 1000 {
		t.Errorf("took %d, declined %d: the cases don't cover both", took, declined)
	}
	plain := map[string]any{"order_id": "ord_1", "replacement_sku": "stormline-insulated-m", "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}, "qty": 2, "gift": false, "notes": nil, "tags": []any{"a", 1}}
	b, ok := AppendTerms(nil, plain)
	if !ok || !canonicalAlready(b) {
		t.Errorf("plain terms: %s (ok %v) not canonical already", b, ok)
	}
}
