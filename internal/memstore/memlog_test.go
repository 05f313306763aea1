package memstore

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// A memory store's audit log (memlog.go) gives back every entry exactly
// as it was written, whatever its strings and times hold and whichever
// fields it shares with the entry before.
func TestMemLogRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tricky := []string{"", "user", "agent", "usr_1", "https://agent.example/client", "é ü 日本", "\x00\xff\x1f\t\n", "\xc3", "-", "0-", "1796052877-abc"}
	str := func() string {
		if r.IntN(2) == 0 {
			return tricky[r.IntN(len(tricky))]
		}
		b := make([]byte, r.IntN(300))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	tm := func(at time.Time) time.Time {
		switch r.IntN(8) {
		case 0:
			return time.Time{}
		case 1:
			return at
		case 2:
			return time.Unix(r.Int64N(4e9)-2e9, 0) // whole seconds, before 1970 too
		case 3:
			return time.Unix(0, r.Int64())
		case 4:
			return time.Unix(0, math.MinInt64+1+r.Int64N(10))
		case 5:
			return time.Unix(0, math.MaxInt64-r.Int64N(10))
		}
		// Near at, within what Unix ns hold (as the store kept times
		// before this log: out of them, none is exact).
		n := at.UnixNano() + r.Int64N(int64(48*time.Hour)) - int64(24*time.Hour)
		if (at.UnixNano() > 0) != (n > 0) && at.UnixNano() != 0 {
			n = at.UnixNano()
		}
		return time.Unix(0, n)
	}
	digests := []string{"", "not a digest", base64.RawURLEncoding.EncodeToString(make([]byte, 32)), base64.RawURLEncoding.EncodeToString(make([]byte, 31))}
	for run := range 2000 {
		var l memLog
		var want []store.Entry
		var e store.Entry
		at := time.Unix(1796052877, int64(run))
		for i := range 1 + r.IntN(storekit.MaxEntriesPerOperation) {
			change := func() bool { return i == 0 || r.IntN(3) == 0 }
			e.What = entryWhats[r.IntN(len(entryWhats))]
			if change() {
				at = tm(at)
			}
			e.At = at
			if change() {
				e.Kind, e.Session, e.Instance = str(), str(), str()
			}
			e.Reason, e.By = "", ""
			if note := str(); e.What == storekit.EntryResolved || e.What == storekit.EntryResolvedNotDo {
				e.By = note
			} else {
				e.Reason = note
			}
			if change() {
				e.Owner = store.Owner{Agent: str(), User: str(), Account: str()}
			}
			if change() {
				x := tm(at)
				e.Operation = store.Operation{ID: "op_1", Summary: str(), ExpiresAt: x}
				switch r.IntN(3) {
				case 0:
					e.Operation.Revision = storekit.NewRevision(x)
				case 1:
					e.Operation.Revision = strconv.FormatInt(x.Unix(), 10) + "-" + str()
				default:
					e.Operation.Revision = str()
				}
				sum := sha256.Sum256([]byte(str()))
				e.TermsDigest = base64.RawURLEncoding.EncodeToString(sum[:])
				if r.IntN(3) == 0 {
					e.TermsDigest = digests[r.IntN(len(digests))]
				}
			} else if r.IntN(3) == 0 {
				// expires_at alone moves: the revision, named from the
				// one before, no longer starts with its seconds.
				e.Operation.ExpiresAt = tm(at)
			}
			if change() {
				e.Approval = store.Approval{OperationID: "op_1", Revision: e.Operation.Revision, Approver: store.Approver(str()),
					ApprovedAt: tm(at), InputType: str(), Reference: str(), RecordedAt: tm(at)}
			}
			e.Approval.Revision = e.Operation.Revision
			e.Approval.UsedAt = tm(at)
			l.add(e)
			want = append(want, e)
		}
		got := l.entries("op_1", time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64))
		// An entry at the very end of time is past [from, to): the rest.
		var kept []store.Entry
		for _, w := range want {
			if !w.At.Before(time.Unix(0, math.MinInt64)) && w.At.Before(time.Unix(0, math.MaxInt64)) {
				kept = append(kept, w)
			}
		}
		if len(got) != len(kept) || int(l.n) != len(want) {
			t.Fatalf("run %d: %d entries back (n %d), want %d", run, len(got), l.n, len(kept))
		}
		ids := map[string]bool{}
		for i, g := range got {
			w := kept[i]
			w.ID = g.ID
			if !sameEntry(g, w) {
				t.Fatalf("run %d entry %d:\n got %+v\nwant %+v", run, i, g, w)
			}
			ids[g.ID] = true
		}
		if len(ids) != len(got) {
			t.Fatalf("run %d: IDs repeat", run)
		}
	}
}

// sameEntry says whether a and b say the same, their times as instants
// (the zero time as zero).
func sameEntry(a, b store.Entry) bool {
	same := func(x, y time.Time) bool {
		return x.Equal(y) || (x.IsZero() && y.UnixNano() == 0) || (y.IsZero() && x.UnixNano() == 0)
	}
	return fmt.Sprint(a.ID, a.What, a.Instance, a.Owner, a.Session, a.Kind, a.Operation.ID, a.Operation.Revision, a.Operation.Summary,
		a.Operation.Terms == nil, a.TermsDigest, a.Approval.OperationID, a.Approval.Revision, a.Approval.Approver, a.Approval.InputType,
		a.Approval.Reference, a.Reason, a.By) ==
		fmt.Sprint(b.ID, b.What, b.Instance, b.Owner, b.Session, b.Kind, b.Operation.ID, b.Operation.Revision, b.Operation.Summary,
			b.Operation.Terms == nil, b.TermsDigest, b.Approval.OperationID, b.Approval.Revision, b.Approval.Approver, b.Approval.InputType,
			b.Approval.Reference, b.Reason, b.By) &&
		same(a.At, b.At) && same(a.Operation.ExpiresAt, b.Operation.ExpiresAt) && same(a.Approval.ApprovedAt, b.Approval.ApprovedAt) &&
		same(a.Approval.RecordedAt, b.Approval.RecordedAt) && same(a.Approval.UsedAt, b.Approval.UsedAt)
}

// A revision the log keeps as what follows its expires_at's seconds is
// compared, on the next append, with the seconds it followed, not with
// the expires_at of a later entry that moved it alone.
func TestMemLogRevisionAfterExpiresMoved(t *testing.T) {
	at := time.Unix(1796052877, 0)
	e1, e2 := at.Add(10*time.Minute), at.Add(20*time.Minute)
	rev := func(x time.Time) string { return strconv.FormatInt(x.Unix(), 10) + "-abc" }
	var l memLog
	var want []store.Entry
	for i, op := range []store.Operation{
		{ID: "op_1", Revision: rev(e1), ExpiresAt: e1},
		{ID: "op_1", Revision: rev(e1), ExpiresAt: e2}, // expires_at alone moved
		{ID: "op_1", Revision: rev(e2), ExpiresAt: e2}, // the same rest after e2's seconds
	} {
		e := store.Entry{What: storekit.EntryRecorded, At: at.Add(time.Duration(i) * time.Second), Operation: op,
			Approval: store.Approval{OperationID: "op_1", Revision: op.Revision}}
		l.add(e)
		want = append(want, e)
	}
	got := l.entries("op_1", at, at.Add(time.Hour))
	if len(got) != len(want) {
		t.Fatalf("%d entries back, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Operation.Revision != want[i].Operation.Revision {
			t.Errorf("entry %d: revision %q, want %q", i, got[i].Operation.Revision, want[i].Operation.Revision)
		}
	}
}
