// Package explain says, in words for an agent's developer, why the kit
// refused a request: the reason a website on test or staging sends beside
// the spec's error code, in error_description (§4 allows other members),
// when its webkit.Kit.ExplainRefusals is on.
//
// Reasons are made where the errors are: an error keeps its message (the
// kit's logs and tests read it) and may carry better words for the agent
// (Because). Reason is the one place that turns an error into the words
// an answer carries. No reason holds a token, a key, or anything of
// another agent, User or account: only what the refused request itself
// sent, and the site's own configuration (its origin, its limits).
package explain

import "strings"

// MaxReason bounds the words an answer carries.
const MaxReason = 600

// because is an error with better words for the agent than its message.
type because struct {
	err   error
	words string
}

func (b *because) Error() string { return b.err.Error() }
func (b *because) Unwrap() error { return b.err }

// Because returns err, with the same message and the same errors.Is, that
// Reason says in words. A nil err stays nil.
func Because(err error, words string) error {
	if err == nil {
		return nil
	}
	return &because{err: err, words: words}
}

// sentinels are the messages of the kit's sentinel errors that an error's
// message starts its parts with: identity.ErrInvalid and ErrUnavailable,
// and the operations endpoint's Authenticator errors. They name the kit's
// package, not what the agent did, so a reason leaves them out (a test
// holds this list to the errors' messages).
var sentinels = []string{
	"identity: invalid: ",
	"identity: unavailable: ",
	"endpoint: invalid session: ",
	"endpoint: invalid access token: ",
	"endpoint: verification unavailable: ",
}

// Reason is err in words for the agent: its message, with the words of
// each Because in it in place of that error's message, and without the
// kit's sentinel prefixes; at most MaxReason bytes. "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	for e := err; e != nil; {
		if b, ok := e.(*because); ok {
			s = strings.Replace(s, b.err.Error(), b.words, 1)
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				if r := Reason(x); r != "" {
					s = strings.Replace(s, x.Error(), r, 1)
				}
			}
			e = nil
		default:
			e = nil
		}
	}
	for _, p := range sentinels {
		s = strings.ReplaceAll(s, p, "")
	}
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), ":"))
	return Clip(s)
}

// Clip bounds words to MaxReason bytes, on a rune boundary.
func Clip(s string) string {
	if len(s) <= MaxReason {
		return s
	}
	cut := MaxReason - len("…")
	for cut > 0 && !runeStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func runeStart(b byte) bool { return b&0xC0 != 0x80 }
