package computed

import (
	"encoding/base64"
	"encoding/binary"
	"regexp"
	"strings"
	"testing"
	"time"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

func testOp() Op {
	return Op{Epoch: Epoch(time.Unix(1_800_000_000, 0), 24*time.Hour), Action: "AcTiOnDiGeSt", Account: "acct-1",
		Expires: time.Unix(1_800_000_600, 0).UTC(), Minted: time.Unix(1_800_000_000, 123).UTC(), Terms: []byte(`{"size":"M"}`), Summary: "Exchange it."}
}

func TestSealOpen(t *testing.T) {
	k, err := NewSealer(NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	c := testOp()
	c.ID = k.ID("base-1", c)
	rev := k.Revision(c.ID, c)
	ref := k.Seal("base-1", c.ID, rev, c)
	t.Run("W22 W23 ids and the ref use the ID characters", func(t *testing.T) {
		if !idPattern.MatchString(c.ID) || !idPattern.MatchString(rev) || !strings.HasPrefix(c.ID, "op_") {
			t.Errorf("id %q, revision %q", c.ID, rev)
		}
		if !strings.HasPrefix(ref, c.ID+"."+rev+".") || !regexp.MustCompile(`^[A-Za-z0-9_.-]+$`).MatchString(ref) {
			t.Errorf("ref %q", ref)
		}
		if len(ref) > Size(c) {
			t.Errorf("ref of %d characters, Size says %d", len(ref), Size(c))
		}
		// What the docs say of a ref's length: about 165 characters plus
		// 4/3 of its terms, summary and account (with an action digest of
		// storekit.ActionDigest's 20 characters).
		for _, n := range []int{0, 180, 1000} {
			d := c
			d.Action, d.Terms, d.Summary = "AAAAAAAAAAAAAAAAAAAA", make([]byte, n), ""
			d.ID = k.ID("base-1", d)
			got := len(k.Seal("base-1", d.ID, k.Revision(d.ID, d), d))
			if want := 165 + 4*(n+len(d.Account))/3; got < want-5 || got > want+5 {
				t.Errorf("%d bytes of terms: a ref of %d characters, the docs say about %d", n, got, want)
			}
		}
		if !IsSealed(ref) || IsSealed(c.ID+"."+rev) {
			t.Errorf("IsSealed")
		}
	})
	t.Run("it opens to what was sealed", func(t *testing.T) {
		got, gotRev, err := k.Open("base-1", ref)
		if err != nil || gotRev != rev || got.ID != c.ID || got.Epoch != c.Epoch || got.Action != c.Action || got.Account != c.Account ||
			!got.Expires.Equal(c.Expires) || !got.Minted.Equal(c.Minted) || string(got.Terms) != string(c.Terms) || got.Summary != c.Summary {
			t.Errorf("Open: %+v %q %v, want %+v %q", got, gotRev, err, c, rev)
		}
	})
	t.Run("W19 W20 W24 W25 W36 the same action keeps its id; other terms or expires_at, another revision", func(t *testing.T) {
		d := c
		d.Terms = []byte(`{"size":"L"}`)
		e := c
		e.Expires = e.Expires.Add(time.Second)
		if k.ID("base-1", d) != c.ID || k.Revision(c.ID, d) == rev || k.Revision(c.ID, e) == rev {
			t.Errorf("ids or revisions do not follow the terms")
		}
		f := c
		f.Action = "another"
		if k.ID("base-1", f) == c.ID || k.ID("base-2", c) == c.ID {
			t.Errorf("W21: another action or owner shares the id")
		}
	})
	t.Run("W74 anything else is not sealed", func(t *testing.T) {
		other, _ := NewSealer(NewSecret())
		flipped := []byte(ref)
		flipped[len(flipped)-3] ^= 1
		for name, open := range map[string]func() error{
			"another owner":  func() error { _, _, err := k.Open("base-2", ref); return err },
			"another secret": func() error { _, _, err := other.Open("base-1", ref); return err },
			"a byte changed": func() error { _, _, err := k.Open("base-1", string(flipped)); return err },
			"another id":     func() error { _, _, err := k.Open("base-1", "op_x"+ref[len(c.ID):]); return err },
			"cut short":      func() error { _, _, err := k.Open("base-1", ref[:len(ref)-10]); return err },
			"no seal":        func() error { _, _, err := k.Open("base-1", c.ID+"."+rev); return err },
			"not base64":     func() error { _, _, err := k.Open("base-1", c.ID+"."+rev+".!!"); return err },
			"a line break":   func() error { _, _, err := k.Open("base-1", ref[:len(ref)-4]+"\n"+ref[len(ref)-4:]); return err },
			"another revision": func() error {
				d := c
				d.Terms = []byte(`{}`)
				return func() error {
					_, _, err := k.Open("base-1", c.ID+"."+k.Revision(c.ID, d)+ref[len(c.ID)+1+len(rev):])
					return err
				}()
			},
		} {
			if err := open(); err != ErrNotSealed {
				t.Errorf("%s: %v, want ErrNotSealed", name, err)
			}
		}
	})
	t.Run("W74 a ref changed in any one character is not sealed", func(t *testing.T) {
		// base64 leaves 2 or 4 bits of a seal's last character unused; a
		// lenient decoder opened a ref whose last character was changed in
		// those bits only (the conformance check's mutate found it).
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
		for i := range len(ref) {
			for _, ch := range []byte(alphabet) {
				if ch == ref[i] || (i < len(ref)-1 && ch%7 != byte(i)%7) {
					continue // every character at the end; a seventh elsewhere
				}
				changed := ref[:i] + string(ch) + ref[i+1:]
				if _, _, err := k.Open("base-1", changed); err != ErrNotSealed {
					t.Fatalf("position %d changed to %q: %v, want ErrNotSealed", i, ch, err)
				}
			}
		}
	})
	t.Run("W74 a ref naming another key period is not sealed, and leaves today's keys kept", func(t *testing.T) {
		prefix := ref[:len(c.ID)+1+len(rev)+1]
		raw, err := base64.RawURLEncoding.DecodeString(ref[len(prefix):])
		if err != nil {
			t.Fatal(err)
		}
		now := period(time.Now())
		for _, n := range []int64{now + 1, now + 2, now + 1_000_000, 1<<63 - 1, now - 1, now - 1_000, 0} {
			forged := append([]byte(nil), raw...)
			binary.BigEndian.PutUint64(forged, uint64(n))
			if _, _, err := k.Open("base-1", prefix+base64.RawURLEncoding.EncodeToString(forged)); err != ErrNotSealed {
				t.Errorf("period %d: %v, want ErrNotSealed", n, err)
			}
		}
		// The ref of this period still opens with a kept key: none of the
		// forged periods but the next one displaced it.
		if cur, prev := k.cur.Load(), k.prev.Load(); !(cur != nil && cur.n == now || prev != nil && prev.n == now) {
			t.Errorf("this period's key is no longer kept: cur %v, prev %v", cur, prev)
		}
		if _, _, err := k.Open("base-1", ref); err != nil {
			t.Errorf("the ref itself: %v", err)
		}
	})
	t.Run("every ref has a nonce of its own", func(t *testing.T) {
		if again := k.Seal("base-1", c.ID, rev, c); again == ref {
			t.Errorf("sealed twice alike")
		}
	})
	if _, err := NewSealer([]byte("short")); err == nil {
		t.Errorf("NewSealer took a short secret")
	}
}

// FuzzOpen: whatever a ref holds, Open answers ErrNotSealed or what was
// sealed, and never panics (the store then answers not found, W74).
func FuzzOpen(f *testing.F) {
	k, _ := NewSealer(make([]byte, SecretSize))
	c := testOp()
	c.ID = k.ID("b", c)
	ref := k.Seal("b", c.ID, k.Revision(c.ID, c), c)
	f.Add(ref)
	f.Add(ref[:len(ref)/2])
	f.Add("op_x.1-a.AAAA")
	f.Add("..")
	f.Fuzz(func(t *testing.T, ref string) {
		got, rev, err := k.Open("b", ref)
		if err != nil {
			if err != ErrNotSealed {
				t.Fatalf("Open(%q): %v", ref, err)
			}
			return
		}
		if !strings.HasPrefix(ref, got.ID+"."+rev+".") {
			t.Fatalf("Open(%q) = %s %s", ref, got.ID, rev)
		}
		// A ref opens written one way only: the way Seal writes its seal.
		_, _, sealed := parts(ref)
		raw, _ := base64.RawURLEncoding.DecodeString(sealed)
		if canonical := got.ID + "." + rev + "." + base64.RawURLEncoding.EncodeToString(raw); ref != canonical {
			t.Fatalf("Open(%q) opened a ref written otherwise than %q", ref, canonical)
		}
	})
}

// TestKeptKeys: the keys kept are this period's and the one before (the
// refs a site opens most), whatever order they are first asked in; a
// period further back is derived each time, and one after the next one
// has no key.
func TestKeptKeys(t *testing.T) {
	k, err := NewSealer(NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	now := period(time.Now())
	for _, n := range []int64{now, now - 1, now - 5} { // as after a restart
		if k.key(n) == nil {
			t.Fatalf("period %d: no key", n)
		}
	}
	if cur, prev := k.cur.Load(), k.prev.Load(); cur == nil || prev == nil || cur.n != now || prev.n != now-1 {
		t.Errorf("kept %v and %v, want periods %d and %d", cur, prev, now, now-1)
	}
	if k.key(now+2) != nil {
		t.Errorf("a key for the period after the next one")
	}
}

// Every 403 a store computes calls ID, Revision and Seal: each makes
// only the string it returns (Seal works in a pooled buffer).
func TestSealerAllocations(t *testing.T) {
	if raceOn {
		t.Skip("the race detector's own allocations")
	}
	k, err := NewSealer(NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	c := testOp()
	c.ID = k.ID("base-1", c)
	rev := k.Revision(c.ID, c)
	k.Seal("base-1", c.ID, rev, c) // the period's key, once
	for _, f := range []struct {
		name string
		f    func()
	}{
		{"ID", func() { k.ID("base-1", c) }},
		{"Revision", func() { k.Revision(c.ID, c) }},
		{"Seal", func() { k.Seal("base-1", c.ID, rev, c) }},
		{"Epoch", func() { Epoch(time.Unix(1_800_000_000, 0), 24*time.Hour) }},
	} {
		want := 1.0
		if f.name == "Epoch" {
			want = 0
		}
		if n := testing.AllocsPerRun(100, f.f); n > want {
			t.Errorf("%s: %v allocations, want %v", f.name, n, want)
		}
	}
}
