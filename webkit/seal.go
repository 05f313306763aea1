package webkit

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
)

// handleSeal encrypts and authenticates a waiting page's handle (its ref
// and terms digest), so the page's HTML never shows the revision (W64) and
// nobody can make one for a ref they guessed. AES-256-GCM under a key
// derived from each hash key given to New: the first seals, all open, so
// handles survive key rotation like join cookies. A handle expires maxWait
// after it was sealed.
//
// It is on every 403 the Gate answers, so it is a few allocations, where a
// securecookie (HMAC, then AES-CTR, JSON and base64 twice) was twenty.
type handleSeal struct{ aeads []cipher.AEAD }

// handleLabel separates the handle's key, and its additional data, from
// every other use of the cookie keys.
const handleLabel = "opsgate wait handle v1"

// newHandleSeal derives one AEAD from the hash key of each securecookie
// pair in keys (New has checked them).
func newHandleSeal(keys [][]byte) handleSeal {
	var s handleSeal
	for i := 0; i+1 < len(keys); i += 2 {
		m := hmac.New(sha256.New, keys[i])
		m.Write([]byte(handleLabel))
		block, err := aes.NewCipher(m.Sum(nil))
		if err != nil {
			continue // unreachable: a SHA-256 sum is an AES-256 key
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		s.aeads = append(s.aeads, aead)
	}
	return s
}

// seal returns the handle for h, expiring maxWait after now.
func (s handleSeal) seal(h waitHandle, now time.Time) string { return s.sealAfter("", h, now) }

// sealAfter returns prefix followed by the handle for h, in one string:
// the status URL the Gate hands out is built without copying the handle
// again. The handle is unpadded base64url, which a query never needs to
// escape. "" when there are no keys.
func (s handleSeal) sealAfter(prefix string, h waitHandle, now time.Time) string {
	if len(s.aeads) == 0 {
		return ""
	}
	aead := s.aeads[0]
	// plaintext: expiry (8 bytes, Unix seconds), ref, 0, terms digest
	n := aead.NonceSize()
	size := n + 8 + len(h.Ref) + 1 + len(h.Terms) + aead.Overhead()
	scratch, _ := handleScratch.Get().(*[]byte)
	if scratch == nil {
		scratch = new([]byte)
	}
	if cap(*scratch) < size {
		*scratch = make([]byte, 0, size)
	}
	defer handleScratch.Put(scratch)
	buf := (*scratch)[:n:size]
	rand.Read(buf[:n]) // never fails (crypto/rand)
	pt := binary.BigEndian.AppendUint64(buf[n:], uint64(now.Add(maxWait).Unix()))
	pt = append(pt, h.Ref...)
	pt = append(pt, 0)
	pt = append(pt, h.Terms...)
	out := aead.Seal(buf[:n], buf[:n], pt, handleLabelBytes)
	var sb strings.Builder
	sb.Grow(len(prefix) + base64.RawURLEncoding.EncodedLen(len(out)))
	sb.WriteString(prefix)
	storekit.AppendBase64(&sb, out)
	return sb.String()
}

// handleScratch holds seal's buffers (*[]byte): the handle's string is
// its only allocation.
var handleScratch sync.Pool

// handleLabelBytes is handleLabel as the AEAD's additional data, made once:
// a conversion passed to an interface's method is made on every call.
var handleLabelBytes = []byte(handleLabel)

// open returns the handle sealed in v, if one of the keys sealed it and it
// has not expired.
func (s handleSeal) open(v string, now time.Time) (waitHandle, bool) {
	// Strict, and no line breaks (which any base64 decoder skips), so a
	// handle is written one way only.
	raw, err := base64.RawURLEncoding.Strict().DecodeString(v)
	if err != nil || strings.ContainsAny(v, "\r\n") {
		return waitHandle{}, false
	}
	for _, aead := range s.aeads {
		n := aead.NonceSize()
		if len(raw) < n+aead.Overhead()+8 {
			return waitHandle{}, false
		}
		pt, err := aead.Open(nil, raw[:n], raw[n:], handleLabelBytes)
		if err != nil {
			continue
		}
		if int64(binary.BigEndian.Uint64(pt)) < now.Unix() {
			return waitHandle{}, false
		}
		ref, terms, ok := bytes.Cut(pt[8:], []byte{0})
		if !ok {
			return waitHandle{}, false
		}
		return waitHandle{Ref: string(ref), Terms: string(terms)}, true
	}
	return waitHandle{}, false
}
