package webkit

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// The waiting page's handle carries the ref sealed (W64): it opens only
// under the kit's keys, unaltered, and not after maxWait.
func TestHandleSeal(t *testing.T) {
	now := time.Date(2026, 10, 8, 12, 0, 0, 0, time.UTC)
	keys := [][]byte{[]byte(strings.Repeat("h", 32)), []byte(strings.Repeat("e", 32))}
	s := newHandleSeal(keys)
	h := waitHandle{Ref: "op_1.1791487200-k3Jd9Qx2mW8v", Terms: "abc"}
	sealed := s.seal(h, now)
	if strings.Contains(sealed, "k3Jd9Qx2mW8v") || strings.Contains(sealed, "op_1") {
		t.Fatalf("W64: the handle shows the ref: %s", sealed)
	}
	if got, ok := s.open(sealed, now.Add(time.Hour)); !ok || got != h {
		t.Fatalf("open = %+v %v", got, ok)
	}
	if s.seal(h, now) == sealed {
		t.Error("two seals of the same handle are equal: the nonce is not random")
	}
	// The status URL carries it as it is (sealAfter): never anything a
	// query would escape.
	for range 100 {
		u := s.sealAfter("/_opsgate/status?w=", h, now)
		w, ok := strings.CutPrefix(u, "/_opsgate/status?w=")
		if !ok || url.QueryEscape(w) != w {
			t.Fatalf("status URL %q: the handle needs escaping", u)
		}
		if got, ok := s.open(w, now); !ok || got != h {
			t.Fatalf("the status URL's handle opens as %+v %v", got, ok)
		}
	}
	if _, ok := s.open(sealed, now.Add(maxWait+time.Second)); ok {
		t.Error("a handle opened after maxWait")
	}
	// Every single-character change is refused, even one in the bits
	// base64 leaves unused in the last character: a handle is written
	// one way only.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range sealed {
		for _, ch := range []byte(alphabet) {
			if ch == sealed[i] || (i < len(sealed)-1 && ch != 'A' && ch != 'B') {
				continue
			}
			if got, ok := s.open(sealed[:i]+string(ch)+sealed[i+1:], now); ok {
				t.Fatalf("handle altered at %d to %q opened as %+v", i, ch, got)
			}
		}
	}
	for _, junk := range []string{"", "abc", "!!!", strings.Repeat("A", 4000), sealed[:10] + "\r\n" + sealed[10:]} {
		if _, ok := s.open(junk, now); ok {
			t.Errorf("junk %q opened", junk)
		}
	}
	// Other keys can't open it; after rotation (new pair first) it still opens.
	other := newHandleSeal([][]byte{[]byte(strings.Repeat("x", 32)), []byte(strings.Repeat("y", 32))})
	if _, ok := other.open(sealed, now); ok {
		t.Error("opened under other keys")
	}
	rotated := newHandleSeal(append([][]byte{[]byte(strings.Repeat("x", 32)), []byte(strings.Repeat("y", 32))}, keys...))
	if got, ok := rotated.open(sealed, now); !ok || got != h {
		t.Errorf("after key rotation: %+v %v", got, ok)
	}
}

// The handle is on every waiting page: its string is its only allocation.
func TestHandleSealAllocations(t *testing.T) {
	s := newHandleSeal([][]byte{[]byte(strings.Repeat("h", 32)), []byte(strings.Repeat("e", 32))})
	h := waitHandle{Ref: "op_1.1791487200-k3Jd9Qx2mW8v." + strings.Repeat("x", 200), Terms: "abc"}
	now := time.Date(2026, 10, 8, 12, 0, 0, 0, time.UTC)
	if n := testing.AllocsPerRun(100, func() { s.seal(h, now) }); n > 1 {
		t.Errorf("seal: %v allocations, want 1", n)
	}
}
