package storekit

import (
	"strings"
	"testing"
)

// W74: a ref names its operation and revision only in this kit's exact
// form, "<operation_id>.<revision>", or followed by "." and a non-empty
// seal without a ".", which the store that sealed it judges (a computed
// waiting operation, internal/computed). Anything
// else, a real ref with a "." appended included, names nothing, so a store
// never takes it for the real one.
func TestSplitRef(t *testing.T) {
	const id, rev = "op_7Hk2QpRt5Xw9Lm3Nv8Zb", "1791487200-k3Jd9Qx2mW8vAb1C"
	ref := MakeRef(id, rev)
	for _, tc := range []struct {
		ref string
		ok  bool
	}{
		{ref, true},
		{ref + ".AAAAsealed", true}, // the store opens the seal
		{ref + ".", false},
		{ref + "..", false},
		{ref + "..x", false},
		{ref + ".x.", false},
		{ref + ".x.y", false},
		{"." + ref, false},
		{id + ".." + rev, false},
		{id + ".", false},
		{"." + rev, false},
		{id, false},
		{".", false},
		{"", false},
		{" " + ref, false},
		{ref + " ", false},
		{ref + "\n", false},
		{ref + "\x00", false},
		{id + ".re v", false},
		{strings.Repeat("a", MaxIDLength+1) + "." + rev, false},
		{id + "." + strings.Repeat("b", MaxIDLength+1), false},
	} {
		gotID, gotRev, ok := SplitRef(tc.ref)
		if ok != tc.ok {
			t.Errorf("SplitRef(%q): ok %v, want %v", tc.ref, ok, tc.ok)
			continue
		}
		if ok && (gotID != id || gotRev != rev) {
			t.Errorf("SplitRef(%q) = %q %q, want %q %q", tc.ref, gotID, gotRev, id, rev)
		}
		if !ok && (gotID != "" || gotRev != "") {
			t.Errorf("SplitRef(%q) refused it but named %q %q", tc.ref, gotID, gotRev)
		}
		if pid, pok := ParseRef(tc.ref); pok != ok || pid != gotID {
			t.Errorf("ParseRef(%q) = %q %v, SplitRef %q %v", tc.ref, pid, pok, gotID, ok)
		}
	}
}

// FuzzSplitRef: a ref SplitRef accepts is exactly MakeRef of what it
// names, or that followed by "." and a part with no ".": never an empty one.
func FuzzSplitRef(f *testing.F) {
	for _, s := range []string{"op_a.1-b", "op_a.1-b.", "op_a.1-b.c", "op_a..1-b", ".op_a.1-b", "a.b..", "a. b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		id, rev, ok := SplitRef(ref)
		if !ok {
			return
		}
		named := MakeRef(id, rev)
		if !ValidID(id) || !ValidID(rev) || !ValidRef(ref) || !strings.HasPrefix(ref, named) {
			t.Fatalf("accepted %q as %q %q", ref, id, rev)
		}
		if rest := ref[len(named):]; rest != "" && (rest[0] != '.' || len(rest) == 1 || strings.Contains(rest[1:], ".")) {
			t.Fatalf("accepted %q as %q: what follows is %q", ref, named, rest)
		}
	})
}
