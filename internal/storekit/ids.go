package storekit

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxIDLength is the longest operation_id, revision or reference (webkit/RULES.md
// choice 6, spec 8.2).
const MaxIDLength = 255

// MaxRefLength is the longest ref (§4, W59).
const MaxRefLength = 2048

// ValidID reports whether s is 1 to 255 characters of A–Z a–z 0–9 - _
// (spec 8.2; W22, W23).
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if idBytes[s[i]] != idChar {
			return false
		}
	}
	return true
}

// ValidRef reports whether s is 1 to 2048 characters of A–Z a–z 0–9 - _ .
// (§4, W59).
func ValidRef(s string) bool {
	if len(s) == 0 || len(s) > MaxRefLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if idBytes[s[i]] == 0 {
			return false
		}
	}
	return true
}

// idBytes classes every byte: idChar for A–Z a–z 0–9 - _, refChar for '.'
// (a ref's separator), 0 for any other. A table, since a computed ref is
// hundreds of characters checked on every approval.
var idBytes = func() (t [256]uint8) {
	for c := range 256 {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			t[c] = idChar
		}
	}
	t['.'] = refChar
	return t
}()

const (
	idChar  = 1
	refChar = 2
)

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// random returns n characters from alphabet, uniformly (rejection sampling).
func random(n int) string {
	out := make([]byte, 0, n)
	var buf [32]byte
	for len(out) < n {
		rand.Read(buf[:]) // never fails (crypto/rand)
		for _, b := range buf {
			if b < 248 && len(out) < n { // 248 = 4*62: no modulo bias
				out = append(out, alphabet[b%62])
			}
		}
	}
	return string(out)
}

// NewOperationID returns a fresh operation_id: "op_" and 20 random
// characters (119 bits), so no two actions share one (W21).
func NewOperationID() string { return "op_" + random(20) }

// NewRevision returns a fresh revision for a revision expiring at expiresAt,
// in the spec's own shape: its Unix time, "-", 16 random characters. Every
// new revision is random, so two different terms never share one (W36).
func NewRevision(expiresAt time.Time) string {
	return strconv.FormatInt(expiresAt.Unix(), 10) + "-" + random(16)
}

// NewToken returns a random token for a claim.
func NewToken() string { return random(22) }

// MakeRef returns the ref of an operation's revision: "<operation_id>.<revision>".
// The Company chooses the form of ref (W60); naming the revision lets the
// endpoint tell a ref of newer terms from an approved one.
func MakeRef(operationID, revision string) string { return operationID + "." + revision }

// ParseRef returns the operation_id a ref names. ok is false for a ref that
// is malformed or not of this kit's form, which is then simply not found.
func ParseRef(ref string) (operationID string, ok bool) {
	id, _, ok := SplitRef(ref)
	return id, ok
}

// SplitRef returns the operation_id and the revision a ref names. ok is
// false for a ref that is malformed or not of this kit's form. A ref may
// go on after its revision with a "." and more (a store that computed a
// waiting operation seals it there, and opens the seal to judge it); SplitRef ignores what follows, but not an empty part or a further
// ".": "<ref>." and "<ref>..x" are not "<ref>" (W74). A store answers a well-formed ref whose revision it
// never returned for that operation as not found too: §4 gives "any other
// reference" the same 400 as a made-up one, so `<real operation_id>.madeUp`
// reveals nothing and records nothing.
func SplitRef(ref string) (operationID, revision string, ok bool) {
	if !ValidRef(ref) {
		return "", "", false
	}
	id, rest, found := strings.Cut(ref, ".")
	rev, sealed, more := strings.Cut(rest, ".")
	if !found || !ValidID(id) || !ValidID(rev) || more && (sealed == "" || strings.IndexByte(sealed, '.') >= 0) {
		return "", "", false
	}
	return id, rev, true
}

// Slot returns the digest of an owner's agent and User that every record of
// theirs is filed under: on Redis, the hash tag that keeps all their keys in
// one Cluster slot.
func Slot(agent, user string) string {
	sum := digest(agent, user)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// digest is SHA-256 of a, 0, b; on the stack for the usual lengths, since
// the Gate computes it on every gated request.
func digest(a, b string) [sha256.Size]byte {
	var buf [512]byte
	in := append(append(append(buf[:0], a...), 0), b...)
	return sha256.Sum256(in)
}

// ActionDigest returns the digest an action's approvals are filed under for
// one owner: account and action key.
func ActionDigest(account, key string) string {
	sum := digest(account, key)
	return base64.RawURLEncoding.EncodeToString(sum[:15])
}

// ErrTermsNotObject is returned by CanonicalTerms for terms that are not a
// JSON object (§3: terms is a JSON object, W16).
var ErrTermsNotObject = errors.New("terms must be a JSON object")

// CanonicalTerms returns terms as canonical JSON: object members sorted by
// key, no insignificant space, numbers as written. Terms that mean the same
// give the same bytes (§6 check 3 compares meaning, not bytes: W118; the
// order of JSON members is a difference the kit ignores, W119).
//
// Terms that are canonical already are returned as they are, not copied.
func CanonicalTerms(terms []byte) ([]byte, error) {
	if canonicalAlready(terms) {
		return terms, nil
	}
	dec := json.NewDecoder(bytes.NewReader(terms))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("terms: %w", err)
	}
	if dec.More() {
		return nil, errors.New("terms: trailing data after the JSON object")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, ErrTermsNotObject
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, fmt.Errorf("terms: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// ErrWrongType is a known member of another type than the spec's: a
// Structured Field member (internal/headers, W57, W84) or a JSON member of
// an approval (storedriver.UnmarshalApproval). One error, so that both
// answer errors.Is the same way.
var ErrWrongType = errors.New("member of the wrong type")

// What a store keeps of an approval's optional statements (§6: a Company
// MAY record input_type and reference, and MUST NOT reject or decline an
// approval for them): an input_type of at most MaxInputType bytes and a
// reference of at most MaxKeptReference bytes (ID characters, as the
// endpoint reads it: headers). Longer ones are
// kept as absent, never refused, so that what an agent's approval adds to
// the store is bounded in bytes, not only in count (webkit/RULES.md
// "Bounded work").
const (
	MaxInputType     = 32
	MaxKeptReference = 64
)

// KeptMembers returns what a store keeps of an approval's input_type and
// reference: each as it was sent within its bound in bytes, "" beyond it.
// (The endpoint keeps only a reference of ID characters: headers.)
func KeptMembers(inputType, reference string) (string, string) {
	if len(inputType) > MaxInputType {
		inputType = ""
	}
	if len(reference) > MaxKeptReference {
		reference = ""
	}
	return inputType, reference
}
