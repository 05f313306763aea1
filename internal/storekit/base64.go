package storekit

import (
	"encoding/base64"
	"strings"
)

// AppendBase64 writes the base64url of b without padding to sb, through a
// buffer on the stack: a caller that grows sb to its final length first
// builds a ref or a handle in the string's own allocation.
func AppendBase64(sb *strings.Builder, b []byte) {
	enc := base64.RawURLEncoding
	var chunk [64]byte
	for len(b) > 0 {
		n := min(len(b), 48) // 48 bytes are 64 characters, no partial quantum
		m := enc.EncodedLen(n)
		enc.Encode(chunk[:m], b[:n])
		sb.Write(chunk[:m])
		b = b[n:]
	}
}
