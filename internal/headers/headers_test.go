package headers

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The spec's own example headers, verbatim (§4, §6, §2).
const (
	specOperationHeader = `sid="ses_Hq3vT8nW2kLm9xRb", ref="exc_5Rt2.1791487200.k3Jd9Qx2mW8v"`
	specApprovalUser    = `operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="user", approved_at=1791487260, input_type="tap", reference="apr_01JD8ZK3Q9"`
	specApprovalAgent   = `operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="agent", approved_at=1791487255, reference="apr_01JD8ZK3R4"`
	specApprovalWebsite = `operation_id="exc_5Rt2", revision="1791487200-k3Jd9Qx2mW8v", approver="user", approved_at=1791487260, input_type="tap"`
	specExtensions      = `"operations";v="3"`
)

func TestSpecExampleHeaders(t *testing.T) {
	t.Run("W57 §4 Poppy-Operation parses and formats back", func(t *testing.T) {
		sid, ref, err := ParseOperation([]string{specOperationHeader})
		if err != nil || sid != "ses_Hq3vT8nW2kLm9xRb" || ref != "exc_5Rt2.1791487200.k3Jd9Qx2mW8v" {
			t.Fatalf("got %q %q %v", sid, ref, err)
		}
		if got, err := FormatOperation(sid, ref); err != nil || got != specOperationHeader {
			t.Fatalf("formatted %q, %v", got, err)
		}
	})
	approvals := []struct {
		name   string
		header string
		want   store.Approval
	}{
		{"W84 §6 APIs user approval", specApprovalUser, store.Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v",
			Approver: ApproverUser, ApprovedAt: time.Unix(1791487260, 0).UTC(), InputType: "tap", Reference: "apr_01JD8ZK3Q9"}},
		{"W84 §6 APIs agent approval", specApprovalAgent, store.Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v",
			Approver: ApproverAgent, ApprovedAt: time.Unix(1791487255, 0).UTC(), Reference: "apr_01JD8ZK3R4"}},
		{"W84 W89 §6 Websites approval", specApprovalWebsite, store.Approval{OperationID: "exc_5Rt2", Revision: "1791487200-k3Jd9Qx2mW8v",
			Approver: ApproverUser, ApprovedAt: time.Unix(1791487260, 0).UTC(), InputType: "tap"}},
	}
	for _, tt := range approvals {
		t.Run(tt.name+" parses and formats back", func(t *testing.T) {
			got, err := ParseApproval([]string{tt.header})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if h, err := FormatApproval(got); err != nil || h != tt.header {
				t.Fatalf("formatted %q, %v", h, err)
			}
		})
	}
	t.Run("A01 §2 Poppy-Extensions parses and formats back", func(t *testing.T) {
		ext, err := ParseExtensions([]string{specExtensions})
		if err != nil || !DeclaresOperations(ext) || len(ext) != 1 {
			t.Fatalf("got %v, %v", ext, err)
		}
		if got := FormatExtensions(ext); got != specExtensions {
			t.Fatalf("formatted %q", got)
		}
	})
}

// wantErr checks err is a *Error for header and member wrapping is.
func wantErr(t *testing.T, err error, header, member string, is error) {
	t.Helper()
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("error %v (%T), want *Error", err, err)
	}
	if he.Header != header || he.Member != member {
		t.Fatalf("error names %s member %q, want %s member %q (%v)", he.Header, he.Member, header, member, err)
	}
	if !errors.Is(err, is) {
		t.Fatalf("error %v does not wrap %v", err, is)
	}
}

func TestParseApproval(t *testing.T) {
	const base = `operation_id="op_1", revision="r1", approver="user"`
	minimal := store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverUser}
	tests := []struct {
		name   string
		values []string
		want   store.Approval // checked when is == nil
		member string
		is     error
	}{
		{"W82 optional members missing", []string{base}, minimal, "", nil},
		{"W85 unknown member ignored", []string{base + `, sig=:AAAA:`}, minimal, "", nil},
		{"W85 unknown members of every type ignored", []string{base + `, a=1, b=?0, c=(1 2), d=tok, e=@1, f=%"x", g=1.5, h`}, minimal, "", nil},
		{"W85 parameters on known members ignored", []string{`operation_id="op_1";x=1, revision="r1";y, approver="user";z="q"`}, minimal, "", nil},
		{"W83 unknown input_type", []string{base + `, input_type="blink"`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverUser, InputType: "blink"}, "", nil},
		{"W83 empty input_type", []string{base + `, input_type=""`}, minimal, "", nil},
		{"W80 input_type dropped with agent", []string{`operation_id="op_1", revision="r1", approver="agent", input_type="tap"`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverAgent}, "", nil},
		{"W80 input_type of any type ignored with agent", []string{`operation_id="op_1", revision="r1", approver="agent", input_type=(1)`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverAgent}, "", nil},
		{"W79 approved_at long ago", []string{base + `, approved_at=0`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverUser, ApprovedAt: time.Unix(0, 0).UTC()}, "", nil},
		{"W84 members in any order", []string{`approver="user", approved_at=5, revision="r1", operation_id="op_1"`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverUser, ApprovedAt: time.Unix(5, 0).UTC()}, "", nil},
		{"W84 several field lines", []string{`operation_id="op_1"`, `revision="r1", approver="user"`}, minimal, "", nil},
		{"W84 a repeated member: the last wins", []string{base + `, approver="agent"`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverAgent}, "", nil},
		{"W84 escaped String", []string{base + `, input_type="a\"b\\c"`},
			store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverUser, InputType: `a"b\c`}, "", nil},

		{"W84 no header", nil, store.Approval{}, "operation_id", ErrMissingMember},
		{"W84 empty header", []string{""}, store.Approval{}, "operation_id", ErrMissingMember},
		{"W84 not a Dictionary", []string{`"op_1", "r1"`}, store.Approval{}, "", ErrMalformed},
		{"W84 bare keys are Booleans, not the members", []string{`op_1, r1, user`}, store.Approval{}, "operation_id", ErrMissingMember},
		{"W84 trailing comma", []string{base + `,`}, store.Approval{}, "", ErrMalformed},
		{"W84 unterminated String", []string{`operation_id="op_1`}, store.Approval{}, "", ErrMalformed},
		{"W84 non-ASCII", []string{`operation_id="opé"`}, store.Approval{}, "", ErrMalformed},
		{"W84 JSON is not a Dictionary", []string{`{"operation_id":"op_1"}`}, store.Approval{}, "", ErrMalformed},
		{"W84 operation_id a Token", []string{`operation_id=op_1, revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrWrongType},
		{"W84 operation_id an Inner List", []string{`operation_id=("op_1"), revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrWrongType},
		{"W84 operation_id a Boolean", []string{`operation_id, revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrWrongType},
		{"W84 revision an Integer", []string{`operation_id="op_1", revision=1, approver="user"`}, store.Approval{}, "revision", ErrWrongType},
		{"W84 approver a Token", []string{`operation_id="op_1", revision="r1", approver=user`}, store.Approval{}, "approver", ErrWrongType},
		{"W78 operation_id missing", []string{`revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrMissingMember},
		{"W78 revision missing", []string{`operation_id="op_1", approver="user"`}, store.Approval{}, "revision", ErrMissingMember},
		{"W78 approver missing", []string{`operation_id="op_1", revision="r1"`}, store.Approval{}, "approver", ErrMissingMember},
		{"W78 approver other than user or agent", []string{`operation_id="op_1", revision="r1", approver="signed"`}, store.Approval{}, "approver", ErrBadValue},
		{"W78 approver is case-sensitive", []string{`operation_id="op_1", revision="r1", approver="User"`}, store.Approval{}, "approver", ErrBadValue},
		{"W78 approver empty", []string{`operation_id="op_1", revision="r1", approver=""`}, store.Approval{}, "approver", ErrBadValue},
		{"W22 operation_id empty", []string{`operation_id="", revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrBadValue},
		{"W22 operation_id with a space", []string{`operation_id="op 1", revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrBadValue},
		{"W22 operation_id of 256 characters", []string{`operation_id="` + strings.Repeat("a", 256) + `", revision="r1", approver="user"`}, store.Approval{}, "operation_id", ErrBadValue},
		{"W23 revision with a dot", []string{`operation_id="op_1", revision="r.1", approver="user"`}, store.Approval{}, "revision", ErrBadValue},
		{"too long", []string{base + `, x="` + strings.Repeat("a", MaxBytes) + `"`}, store.Approval{}, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseApproval(tt.values)
			if tt.is != nil {
				wantErr(t, err, Approval, tt.member, tt.is)
				if got != (store.Approval{}) {
					t.Fatalf("an error returned the approval %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if err := ValidateApproval(got); err != nil {
				t.Fatalf("parsed approval does not validate: %v", err)
			}
		})
	}
}

func TestHeaderErrorText(t *testing.T) {
	_, err := ParseApproval([]string{`operation_id="op_1", revision="r1", approver="robot"`})
	if want := `Poppy-Approval: member "approver": must be "user" or "agent"`; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	_, err = ParseApproval([]string{`revision="r1"`})
	if want := `Poppy-Approval: member "operation_id": missing`; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	_, _, err = ParseOperation([]string{strings.Repeat("a", MaxBytes+1)})
	if want := `Poppy-Operation: longer than 8192 bytes`; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	_, err = ParseExtensions([]string{`"operations";v=`})
	if err == nil || !strings.HasPrefix(err.Error(), `Poppy-Extensions: not a Structured Field List (`) {
		t.Fatalf("got %v", err)
	}
	he := &Error{Header: Operation, Member: "ref", Err: ErrBadValue}
	if errors.Unwrap(he) != ErrBadValue {
		t.Fatal("Unwrap does not return Err")
	}
}

func TestMaxBytes(t *testing.T) {
	// Joined as RFC 9651 joins field lines: with ", ".
	valid := `sid="s", ref="` + strings.Repeat("a", 2048) + `"`
	pad := func(n int) string { return strings.Repeat(" ", n) }
	t.Run("at the limit parses", func(t *testing.T) {
		v := valid + pad(MaxBytes-len(valid))
		if _, _, err := ParseOperation([]string{v}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("one byte over is refused", func(t *testing.T) {
		v := valid + pad(MaxBytes-len(valid)+1)
		_, _, err := ParseOperation([]string{v})
		wantErr(t, err, Operation, "", ErrMalformed)
	})
	t.Run("field lines count with their separators", func(t *testing.T) {
		a := `sid="s"` + pad(MaxBytes/2)
		b := `ref="r"` + pad(MaxBytes-len(a)-len(`ref="r"`)-1) // joined: a + ", " + b = limit + 1
		_, _, err := ParseOperation([]string{a, b})
		wantErr(t, err, Operation, "", ErrMalformed)
		b = b[:len(b)-1]
		if _, _, err := ParseOperation([]string{a, b}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("every parser refuses", func(t *testing.T) {
		long := []string{strings.Repeat("x", MaxBytes+1)}
		_, err := ParseApproval(long)
		wantErr(t, err, Approval, "", ErrMalformed)
		_, err = ParseExtensions(long)
		wantErr(t, err, Extensions, "", ErrMalformed)
	})
	t.Run("many empty field lines", func(t *testing.T) {
		_, err := ParseExtensions(make([]string, MaxBytes))
		wantErr(t, err, Extensions, "", ErrMalformed)
	})
}

func TestParseOperation(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		sid     string
		ref     string
		member  string
		is      error
		comment string
	}{
		{name: "W57 Dictionary of two Strings", values: []string{`sid="ses_1", ref="op_1.r1"`}, sid: "ses_1", ref: "op_1.r1"},
		{name: "W57 members in any order", values: []string{`ref="op_1.r1", sid="ses_1"`}, sid: "ses_1", ref: "op_1.r1"},
		{name: "W57 other members ignored", values: []string{`sid="ses_1", x=?1, ref="op_1.r1";p=1`}, sid: "ses_1", ref: "op_1.r1"},
		{name: "W57 two field lines", values: []string{`sid="ses_1"`, `ref="op_1.r1"`}, sid: "ses_1", ref: "op_1.r1"},
		{name: "W59 ref of 2048 characters", values: []string{`sid="s", ref="` + strings.Repeat(".", 2048) + `"`}, sid: "s", ref: strings.Repeat(".", 2048)},
		{name: "W59 ref of 2049 characters", values: []string{`sid="s", ref="` + strings.Repeat("a", 2049) + `"`}, member: "ref", is: ErrBadValue},
		{name: "W59 ref with a slash", values: []string{`sid="s", ref="a/b"`}, member: "ref", is: ErrBadValue},
		{name: "W59 ref empty", values: []string{`sid="s", ref=""`}, member: "ref", is: ErrBadValue},
		{name: "W57 ref a Token", values: []string{`sid="s", ref=op_1.r1`}, member: "ref", is: ErrWrongType},
		{name: "W57 sid a Token", values: []string{`sid=s, ref="r"`}, member: "sid", is: ErrWrongType},
		{name: "W57 sid a Byte Sequence", values: []string{`sid=:AAAA:, ref="r"`}, member: "sid", is: ErrWrongType},
		{name: "W57 ref missing", values: []string{`sid="s"`}, member: "ref", is: ErrMissingMember},
		{name: "W57 sid missing", values: []string{`ref="r"`}, member: "sid", is: ErrMissingMember},
		{name: "W57 no header", values: nil, member: "sid", is: ErrMissingMember},
		{name: "W57 sid with a space", values: []string{`sid="s 1", ref="r"`}, member: "sid", is: ErrBadValue},
		{name: "W57 not a Dictionary", values: []string{`"s", "r"`}, is: ErrMalformed},
		{name: "W57 HTML is not a Dictionary", values: []string{`<p>ref="x"</p>`}, is: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sid, ref, err := ParseOperation(tt.values)
			if tt.is != nil {
				wantErr(t, err, Operation, tt.member, tt.is)
				if sid != "" || ref != "" {
					t.Fatalf("an error returned %q %q", sid, ref)
				}
				return
			}
			if err != nil || sid != tt.sid || ref != tt.ref {
				t.Fatalf("got %q %q %v", sid, ref, err)
			}
		})
	}
}

func TestFormatOperation(t *testing.T) {
	tests := []struct {
		name     string
		sid, ref string
		want     string
		member   string
		is       error
	}{
		{"W57 W53 two Strings", "ses_1", "op_1.r1", `sid="ses_1", ref="op_1.r1"`, "", nil},
		{"W59 ref too long", "ses_1", strings.Repeat("a", 2049), "", "ref", ErrBadValue},
		{"W59 ref bad character", "ses_1", `a"b`, "", "ref", ErrBadValue},
		{"W59 ref empty", "ses_1", "", "", "ref", ErrMissingMember},
		{"W58 sid empty", "", "r", "", "sid", ErrMissingMember},
		{"W58 sid of 256 characters", strings.Repeat("s", 256), "r", "", "sid", ErrBadValue},
		{"W58 sid with a space", "ses 1", "r", "", "sid", ErrBadValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FormatOperation(tt.sid, tt.ref)
			if tt.is != nil {
				wantErr(t, err, Operation, tt.member, tt.is)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}

func TestApprovalHeader(t *testing.T) {
	t.Run("A35 W80 input_type never written with agent", func(t *testing.T) {
		a := store.Approval{OperationID: "o", Revision: "r", Approver: ApproverAgent, InputType: "tap"}
		got, err := FormatApproval(a)
		if err != nil || got != `operation_id="o", revision="r", approver="agent"` {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("W82 optional members not written when missing", func(t *testing.T) {
		a := store.Approval{OperationID: "o", Revision: "r", Approver: ApproverUser}
		got, err := FormatApproval(a)
		if err != nil || got != `operation_id="o", revision="r", approver="user"` {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("A34 approved_at in whole seconds", func(t *testing.T) {
		a := store.Approval{OperationID: "o", Revision: "r", Approver: ApproverUser, ApprovedAt: time.Unix(1791487260, 999_000_000)}
		got, err := FormatApproval(a)
		if err != nil || got != `operation_id="o", revision="r", approver="user", approved_at=1791487260` {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("input_type escaped", func(t *testing.T) {
		a := store.Approval{OperationID: "o", Revision: "r", Approver: ApproverUser, InputType: `say "yes"`}
		got, err := FormatApproval(a)
		if err != nil || got != `operation_id="o", revision="r", approver="user", input_type="say \"yes\""` {
			t.Fatalf("got %q, %v", got, err)
		}
	})
}

func TestParseExtensions(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   map[string]string
		ops    bool
	}{
		{"A01 the spec's declaration", []string{`"operations";v="3"`}, map[string]string{"operations": "3"}, true},
		{"a Token name", []string{`operations;v="3"`}, map[string]string{"operations": "3"}, true},
		{"v a Token", []string{`operations;v=v3`}, map[string]string{"operations": "v3"}, false},
		{"v an Integer keeps its text", []string{`operations;v=3`}, map[string]string{"operations": "3"}, true},
		{"v a Decimal keeps its text", []string{`operations;v=3.1`}, map[string]string{"operations": "3.1"}, true},
		{"v a Decimal with a zero", []string{`operations;v=3.0`}, map[string]string{"operations": "3.0"}, true},
		{"W13 minor version counts", []string{`"operations";v="3.2"`}, map[string]string{"operations": "3.2"}, true},
		{"W13 other major version", []string{`"operations";v="2"`}, map[string]string{"operations": "2"}, false},
		{"W13 other major version 4", []string{`"operations";v="4"`}, map[string]string{"operations": "4"}, false},
		{"W13 no version", []string{`"operations"`}, map[string]string{"operations": ""}, false},
		{"W13 v a Boolean is no version", []string{`"operations";v`}, map[string]string{"operations": ""}, false},
		{"W13 v a Byte Sequence is no version", []string{`"operations";v=:Mw==:`}, map[string]string{"operations": ""}, false},
		{"other parameters ignored", []string{`"operations";x=1;v="3";y`}, map[string]string{"operations": "3"}, true},
		{"other extensions kept", []string{`"payments";v="1", "operations";v="3"`}, map[string]string{"payments": "1", "operations": "3"}, true},
		{"W11 only other extensions", []string{`"payments";v="3"`}, map[string]string{"payments": "3"}, false},
		{"two field lines", []string{`"payments";v="1"`, `"operations";v="3"`}, map[string]string{"payments": "1", "operations": "3"}, true},
		{"a repeated name: the first is kept", []string{`"x";v="1", "x";v="2"`}, map[string]string{"x": "1"}, false},
		{"W13 a repeated operations: v3 wins", []string{`"operations";v="2", "operations";v="3", "operations";v="4"`}, map[string]string{"operations": "3"}, true},
		{"Inner Lists and other items skipped", []string{`("operations";v="3"), 3;v="3", ?1, "operations";v="3"`}, map[string]string{"operations": "3"}, true},
		{"W11 no header", nil, map[string]string{}, false},
		{"W11 empty header", []string{""}, map[string]string{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseExtensions(tt.values)
			if err != nil {
				t.Fatal(err)
			}
			if !equalExtensions(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			if DeclaresOperations(got) != tt.ops {
				t.Fatalf("Operations() = %v, want %v", DeclaresOperations(got), tt.ops)
			}
		})
	}
	malformed := []struct {
		name   string
		values []string
	}{
		{"a Dictionary is not a List", []string{`operations=3`}},
		{"trailing comma", []string{`"operations";v="3",`}},
		{"JSON", []string{`{"operations":"3"}`}},
		{"unterminated String", []string{`"operations`}},
	}
	for _, tt := range malformed {
		t.Run("malformed "+tt.name, func(t *testing.T) {
			got, err := ParseExtensions(tt.values)
			wantErr(t, err, Extensions, "", ErrMalformed)
			if DeclaresOperations(got) {
				t.Fatal("a malformed header declares operations")
			}
		})
	}
}

func TestExtensionsHeader(t *testing.T) {
	tests := []struct {
		name string
		ext  map[string]string
		want string
	}{
		{"A01 operations v3", map[string]string{"operations": "3"}, `"operations";v="3"`},
		{"sorted by name", map[string]string{"zeta": "1", "operations": "3", "alpha": "2.0"}, `"alpha";v="2.0", "operations";v="3", "zeta";v="1"`},
		{"no version written without v", map[string]string{"x": ""}, `"x"`},
		{"escaped", map[string]string{`a"b`: `1\2`}, `"a\"b";v="1\\2"`},
		{"not printable left out", map[string]string{"é": "1", "ok": "\x7f", "operations": "3"}, `"operations";v="3"`},
		{"empty", map[string]string{}, ``},
		{"nil", nil, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatExtensions(tt.ext); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func equalExtensions(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Round-trip properties: random valid values → Format → Parse → equal.

const (
	idChars  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	refChars = idChars + "."
)

func randomString(r *rand.Rand, chars string, minLen, maxLen int) string {
	n := minLen + r.IntN(maxLen-minLen+1)
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[r.IntN(len(chars))]
	}
	return string(b)
}

// randomPrintable is printable ASCII, quotes and backslashes included.
func randomPrintable(r *rand.Rand, maxLen int) string {
	b := make([]byte, r.IntN(maxLen+1))
	for i := range b {
		b[i] = byte(0x20 + r.IntN(0x7f-0x20))
	}
	return string(b)
}

// randomID favours short IDs and sometimes reaches the 255 limit.
func randomID(r *rand.Rand) string {
	if r.IntN(20) == 0 {
		return randomString(r, idChars, 200, 255)
	}
	return randomString(r, idChars, 1, 40)
}

func randomApproval(r *rand.Rand) store.Approval {
	a := store.Approval{OperationID: randomID(r), Revision: randomID(r), Approver: ApproverUser}
	if r.IntN(2) == 0 {
		a.Approver = ApproverAgent
	}
	if r.IntN(3) > 0 {
		a.ApprovedAt = time.Unix(r.Int64N(sfMaxInteger+1), 0).UTC()
	}
	if a.Approver == ApproverUser && r.IntN(3) > 0 {
		a.InputType = randomPrintable(r, 20)
	}
	if r.IntN(2) == 0 {
		a.Reference = randomID(r)
	}
	return a
}

const roundTrips = 20000

func TestApprovalRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(84, 85))
	for i := range roundTrips {
		want := randomApproval(r)
		h, err := FormatApproval(want)
		if err != nil {
			t.Fatalf("#%d %+v: Header: %v", i, want, err)
		}
		got, err := ParseApproval([]string{h})
		if err != nil {
			t.Fatalf("#%d %q: ParseApproval: %v", i, h, err)
		}
		// A reference longer than the Company keeps is read as absent,
		// never refused (storekit.MaxKeptReference).
		if len(want.Reference) > storekit.MaxKeptReference {
			want.Reference = ""
		}
		if got != want {
			t.Fatalf("#%d %q:\ngot  %+v\nwant %+v", i, h, got, want)
		}
	}
}

// An input_type or reference longer than the Company keeps is read as
// absent and reported, never a reason to refuse the approval (§6 "MUST NOT
// reject or decline"; bounded bytes per approval).
func TestApprovalLongMembersKeptAsAbsent(t *testing.T) {
	long := strings.Repeat("x", 7000)
	ref := strings.Repeat("r", storekit.MaxKeptReference+1)
	a, ignored, err := ParseApprovalReport([]string{`operation_id="op_1", revision="r1", approver="user", input_type="` + long + `", reference="` + ref + `"`})
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if a.InputType != "" || a.Reference != "" || a.OperationID != "op_1" {
		t.Errorf("kept %+v", a)
	}
	if len(ignored) != 2 || ignored[0].Member != "input_type" || ignored[1].Member != "reference" {
		t.Errorf("ignored %v, want input_type and reference reported", ignored)
	}
	kept := strings.Repeat("t", storekit.MaxInputType)
	keptRef := strings.Repeat("r", storekit.MaxKeptReference)
	a, ignored, err = ParseApprovalReport([]string{`operation_id="op_1", revision="r1", approver="user", input_type="` + kept + `", reference="` + keptRef + `"`})
	if err != nil || a.InputType != kept || a.Reference != keptRef || len(ignored) != 0 {
		t.Errorf("at the bounds: %+v %v %v", a, ignored, err)
	}
}

func TestOperationHeaderRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(57, 59))
	for i := range roundTrips {
		sid := randomID(r)
		ref := randomString(r, refChars, 1, 80)
		if r.IntN(20) == 0 {
			ref = randomString(r, refChars, 2000, 2048)
		}
		h, err := FormatOperation(sid, ref)
		if err != nil {
			t.Fatalf("#%d: Format(%q, %q): %v", i, sid, ref, err)
		}
		gotSID, gotRef, err := ParseOperation([]string{h})
		if err != nil || gotSID != sid || gotRef != ref {
			t.Fatalf("#%d %q: got %q %q %v", i, h, gotSID, gotRef, err)
		}
	}
}

func TestExtensionsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 13))
	for i := range roundTrips {
		want := map[string]string{}
		for range r.IntN(5) {
			want[randomPrintable(r, 12)] = randomPrintable(r, 6)
		}
		if r.IntN(2) == 0 {
			want["operations"] = []string{"3", "3.1", "2", "4", ""}[r.IntN(5)]
		}
		h := FormatExtensions(want)
		got, err := ParseExtensions([]string{h})
		if err != nil {
			t.Fatalf("#%d %q: %v", i, h, err)
		}
		if !equalExtensions(got, want) {
			t.Fatalf("#%d %q:\ngot  %v\nwant %v", i, h, got, want)
		}
		if DeclaresOperations(got) != DeclaresOperations(want) {
			t.Fatalf("#%d %q: Operations() changed", i, h)
		}
	}
}

func TestApprovalHeaderTooLong(t *testing.T) {
	a := store.Approval{OperationID: "o", Revision: "r", Approver: ApproverUser, InputType: strings.Repeat("t", MaxBytes)}
	_, err := FormatApproval(a)
	wantErr(t, err, Approval, "", ErrMalformed)
}

// §6: "MUST NOT reject or decline an approval because an optional member is
// missing or because it doesn't recognize the input_type". A malformed
// optional member is treated as absent, and reported.
func TestParseApprovalMalformedOptionalMembers(t *testing.T) {
	const base = `operation_id="op_1", revision="r1", approver="user"`
	minimal := store.Approval{OperationID: "op_1", Revision: "r1", Approver: ApproverUser}
	tests := []struct {
		name   string
		header string
		member string
		is     error
	}{
		{"W82 approved_at negative", base + `, approved_at=-1`, "approved_at", ErrBadValue},
		{"W82 approved_at a String", base + `, approved_at="1791487260"`, "approved_at", ErrWrongType},
		{"W82 approved_at a Decimal", base + `, approved_at=1791487260.5`, "approved_at", ErrWrongType},
		{"W82 approved_at a Date", base + `, approved_at=@1791487260`, "approved_at", ErrWrongType},
		{"W82 approved_at an Inner List", base + `, approved_at=(1)`, "approved_at", ErrWrongType},
		{"W83 input_type a Token", base + `, input_type=tap`, "input_type", ErrWrongType},
		{"W83 input_type a Boolean", base + `, input_type=?1`, "input_type", ErrWrongType},
		{"W82 reference a Byte Sequence", base + `, reference=:AAAA:`, "reference", ErrWrongType},
		{"W82 reference with a dot", base + `, reference="a.b"`, "reference", ErrBadValue},
		{"W82 reference empty", base + `, reference=""`, "reference", ErrBadValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ignored, err := ParseApprovalReport([]string{tt.header})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got != minimal {
				t.Fatalf("got %+v, want %+v (the malformed member absent)", got, minimal)
			}
			if len(ignored) != 1 {
				t.Fatalf("ignored %v, want one member reported", ignored)
			}
			wantErr(t, ignored[0], Approval, tt.member, tt.is)
			if a, err := ParseApproval([]string{tt.header}); err != nil || a != minimal {
				t.Fatalf("ParseApproval = %+v, %v", a, err)
			}
		})
	}
	t.Run("W82 well-formed optional members beside a malformed one are kept", func(t *testing.T) {
		got, ignored, err := ParseApprovalReport([]string{base + `, approved_at=-5, input_type="voice", reference="apr_1"`})
		if err != nil || len(ignored) != 1 || got.InputType != "voice" || got.Reference != "apr_1" || !got.ApprovedAt.IsZero() {
			t.Fatalf("got %+v, ignored %v, err %v", got, ignored, err)
		}
	})
}
