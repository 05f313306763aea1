package headers

import (
	"errors"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// Fuzz targets: the parsers never panic, and whatever they accept is valid
// and survives formatting and parsing again unchanged. The input is split on
// "\n" into field lines, as r.Header.Values would give them.

func fieldLines(s string) []string { return strings.Split(s, "\n") }

func FuzzParseApproval(f *testing.F) {
	for _, s := range []string{
		specApprovalUser, specApprovalAgent, specApprovalWebsite,
		`operation_id="o", revision="r", approver="agent", input_type="tap"`,
		`operation_id="o", revision="r", approver="user", sig=:AAAA:, x=(1 2);a`,
		`operation_id="o"` + "\n" + `revision="r", approver="user"`,
		`operation_id="o", revision="r", approver="user", approved_at=-1`,
		`operation_id="o", revision="r", approver="robot"`,
		`operation_id=o, revision="r", approver="user"`,
		`approved_at=1.5`, ``, `,`, `"`, `a=(`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseApproval(fieldLines(s))
		if err != nil {
			if a != (store.Approval{}) {
				t.Fatalf("error %v with approval %+v", err, a)
			}
			return
		}
		if err := ValidateApproval(a); err != nil {
			t.Fatalf("accepted %q but Validate: %v", s, err)
		}
		if a.Approver == ApproverAgent && a.InputType != "" {
			t.Fatalf("W80: input_type kept with agent: %q", s)
		}
		h, err := FormatApproval(a)
		if errors.Is(err, ErrMalformed) {
			return // canonical spacing made a huge input_type longer than MaxBytes
		}
		if err != nil {
			t.Fatalf("accepted %q but Header: %v", s, err)
		}
		b, err := ParseApproval([]string{h})
		if err != nil || b != a {
			t.Fatalf("%q → %q → %+v, %v; want %+v", s, h, b, err, a)
		}
	})
}

func FuzzParseOperation(f *testing.F) {
	for _, s := range []string{
		specOperationHeader,
		`ref="a.b", sid="s"`,
		`sid="s"` + "\n" + `ref="r"`,
		`sid="s", ref=r`, `sid="s", ref="a/b"`, `sid="s.1", ref="r"`,
		``, `sid`, `sid=`, `;`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sid, ref, err := ParseOperation(fieldLines(s))
		if err != nil {
			if sid != "" || ref != "" {
				t.Fatalf("error %v with %q %q", err, sid, ref)
			}
			return
		}
		h, err := FormatOperation(sid, ref)
		if err != nil {
			t.Fatalf("accepted %q but Format: %v", s, err)
		}
		sid2, ref2, err := ParseOperation([]string{h})
		if err != nil || sid2 != sid || ref2 != ref {
			t.Fatalf("%q → %q → %q %q %v", s, h, sid2, ref2, err)
		}
	})
}

func FuzzParseExtensions(f *testing.F) {
	for _, s := range []string{
		specExtensions,
		`operations;v=3`, `operations;v=3.1`, `operations;v=v3`, `"operations";v=?1`,
		`"operations";v="2", "operations";v="3"`,
		`"payments";v="1"` + "\n" + `"operations";v="3"`,
		`("operations";v="3"), 1, ?0, :AA==:, @0, %"x"`,
		``, `,`, `"`, `a;`, `operations=3`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ext, err := ParseExtensions(fieldLines(s))
		if err != nil {
			if DeclaresOperations(ext) {
				t.Fatalf("error %v declares operations", err)
			}
			return
		}
		h := FormatExtensions(ext)
		if len(h) > MaxBytes {
			return // canonical quoting and spacing can outgrow the input
		}
		back, err := ParseExtensions([]string{h})
		if err != nil || !equalExtensions(back, ext) {
			t.Fatalf("%q → %v → %q → %v, %v", s, ext, h, back, err)
		}
	})
}

// FuzzRef: refs (§4; RULES.md choice 6) as the endpoint and
// the Gate read them: a ref that splits is valid, rebuilds exactly, and
// travels in Poppy-Operation unchanged.
func FuzzRef(f *testing.F) {
	for _, s := range []string{
		"op_a.1-b", "op_abc.rev_1", "a.b", "a.b.c", ".b", "a.", "a", "", "a/b", "a b.c",
		strings.Repeat("a", 255) + "." + strings.Repeat("b", 255),
		strings.Repeat("a", 256) + ".b", strings.Repeat("a.", 1025),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		id, rev, ok := storekit.SplitRef(ref)
		if pid, pok := storekit.ParseRef(ref); pok != ok || pid != id {
			t.Fatalf("ParseRef(%q) = %q %v; SplitRef %q %v", ref, pid, pok, id, ok)
		}
		if !ok {
			if id != "" || rev != "" {
				t.Fatalf("refused %q with %q %q", ref, id, rev)
			}
			return
		}
		// What follows the revision, if anything, starts with "." (a
		// store's sealed operation, storekit.SplitRef).
		if named := storekit.MakeRef(id, rev); !storekit.ValidID(id) || !storekit.ValidID(rev) || !storekit.ValidRef(ref) ||
			!strings.HasPrefix(ref, named) || (len(ref) > len(named) && ref[len(named)] != '.') {
			t.Fatalf("accepted %q as %q %q", ref, id, rev)
		}
		h, err := FormatOperation("ses_1", ref)
		if err != nil {
			t.Fatalf("accepted %q but FormatOperation: %v", ref, err)
		}
		sid, back, err := ParseOperation([]string{h})
		if err != nil || sid != "ses_1" || back != ref {
			t.Fatalf("%q → %q → %q %q %v", ref, h, sid, back, err)
		}
	})
}
