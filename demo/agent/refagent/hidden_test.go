package refagent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// The attack run's break: the agent stripped ANSI and C1 controls but let
// bidi and format characters through, so a summary could show an amount
// reversed. Now every character that reorders or hides text is shown as
// [U+XXXX] (A07: the summary is shown as plain text, as it is), and the
// agent says so.
func TestA07HiddenCharactersMadeVisible(t *testing.T) {
	hiddenRunes := []rune{
		0x202A, 0x202B, 0x202C, 0x202D, 0x202E, // embeddings and overrides
		0x2066, 0x2067, 0x2068, 0x2069, // isolates
		0x200B, 0x200C, 0x200D, 0x200E, 0x200F, // zero-width and marks
		0x2060, 0x2061, 0x2062, 0x2063, 0x2064, // word joiner, invisible operators
		0xFEFF,                 // zero-width no-break space
		0x00AD, 0x061C, 0x180E, // other Cf: soft hyphen, Arabic letter mark, Mongolian vowel separator
		0x2028, 0x2029, // line and paragraph separators
	}
	for _, r := range hiddenRunes {
		s := "Refund $" + string(r) + "00.07"
		got := PlainText(s)
		if strings.ContainsRune(got, r) {
			t.Errorf("PlainText kept U+%04X: %q", r, got)
		}
		if want := fmt.Sprintf("[U+%04X]", r); !strings.Contains(got, want) {
			t.Errorf("PlainText(%q) = %q: not made visible", s, got)
		}
		if n := HiddenChars(s); n != 1 {
			t.Errorf("HiddenChars(U+%04X) = %d, want 1", r, n)
		}
	}
	if got := PlainText("Refund $\u202e00.07\u202c to the card"); got != "Refund $[U+202E]00.07[U+202C] to the card" {
		t.Errorf("the reversed amount: %q", got)
	}
	// Plain text, tabs and newlines, and other scripts stay as they are.
	for _, s := range []string{"Exchange the M for the L, for $70.00 more.", "a\tb\nc", "Échange 交換 تبادل"} {
		if got := PlainText(s); got != s || HiddenChars(s) != 0 {
			t.Errorf("PlainText(%q) = %q", s, got)
		}
	}

	terms := json.RawMessage(`{"refund":{"amount":"\u202e00.07","currency":"USD"},"subscription_id":"sub_5Kd1"}`)
	op := store.Operation{ID: "op_1", Revision: "r1", Summary: "Cancel sub_5Kd1. \u202e$00.07\u202c is refunded.\u200b", Terms: terms, ExpiresAt: time.Now().Add(time.Minute)}
	r := &Reference{Method: "POST", URL: "http://shop.test/account/subscription/cancel"}

	t.Run("A07 the question shows them and says so", func(t *testing.T) {
		var log bytes.Buffer
		a := newOffline(t, "http://127.0.0.1:1/")
		a.cfg.Log = &log
		q := a.question(r, op)
		text := q.Text()
		if strings.ContainsAny(text, "\u202e\u202c\u200b") {
			t.Errorf("the question holds the raw characters:\n%q", text)
		}
		for _, want := range []string{"[U+202E]$00.07[U+202C]", "refund.amount: [U+202E]00.07", "WARNING: the summary: 3 character(s) that reorder or hide text", "WARNING: the terms: 1 character(s)"} {
			if !strings.Contains(text, want) {
				t.Errorf("the question lacks %q:\n%s", want, text)
			}
		}
		// A standing instruction doesn't approve it: the user reads it.
		rule, _ := ParseRule("cancel<=100USD")
		d, err := (&Standing{Rules: []Rule{rule}, Log: &bytes.Buffer{}}).Decide(t.Context(), q)
		if err != nil || d.Approve {
			t.Errorf("a standing instruction approved a summary with hidden characters: %+v, %v", d, err)
		}
	})

	t.Run("A07 a decline's reason and alternative", func(t *testing.T) {
		var log bytes.Buffer
		a := newOffline(t, "http://127.0.0.1:1/")
		a.cfg.Log = &log
		a.onDecline(r, "k", &webkit.Decline{OperationID: "op_1", Revision: "r1", Reason: "Call us\u2066 at 555\u2069.",
			Alternative: &webkit.Alternative{Instructions: "Use the \u200fform.", References: []webkit.AlternativeReference{{Type: "web", URL: "https://shop.test/\u202ehelp"}}}})
		out := log.String()
		if strings.ContainsAny(out, "\u2066\u2069\u200f\u202e") {
			t.Errorf("the decline's words hold the raw characters:\n%q", out)
		}
		for _, want := range []string{"Call us[U+2066] at 555[U+2069].", "Use the [U+200F]form.", "https://shop.test/[U+202E]help", "WARNING: the Company's reason and alternative: 4 character(s)"} {
			if !strings.Contains(out, want) {
				t.Errorf("the decline's output lacks %q:\n%s", want, out)
			}
		}
	})
}
