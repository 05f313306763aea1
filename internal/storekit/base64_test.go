package storekit

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestAppendBase64(t *testing.T) {
	for n := range 200 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*37 + n)
		}
		want := "p." + base64.RawURLEncoding.EncodeToString(b)
		var sb strings.Builder
		sb.WriteString("p.")
		AppendBase64(&sb, b)
		if got := sb.String(); got != want {
			t.Fatalf("AppendBase64 of %d bytes = %q, want %q", n, got, want)
		}
	}
	b := make([]byte, 300)
	if n := testing.AllocsPerRun(100, func() {
		var sb strings.Builder
		sb.Grow(3 + base64.RawURLEncoding.EncodedLen(len(b)))
		sb.WriteString("op.")
		AppendBase64(&sb, b)
		_ = sb.String()
	}); n > 1 {
		t.Errorf("a grown Builder with AppendBase64: %v allocations, want 1", n)
	}
}
