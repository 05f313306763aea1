package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The audit log's format (audit.go) is written by lib.lua and read here:
// these tests write entries with the scripts' own functions, on a real
// redis-server and on miniredis, and read them back with decodeLog.

// auditScript runs lib.lua's log_write with one entry (entry_of's
// arguments), or approval_field of ARGV[1] when KEYS is empty.
var auditScript = redis.NewScript(libLua + `
if #KEYS == 0 then return approval_field(ARGV[1]) end
local t = nil
if ARGV[7] ~= '' then t = ARGV[7] end
local alias = nil
if ARGV[13] ~= '' then alias = {terms_field(ARGV[13]), ARGV[14]} end
local e = entry_of(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], t, ARGV[8], ARGV[9])
if log_write(KEYS[1], e, ARGV[10], nil, ARGV[11], ARGV[12], ARGV[15] == '1', alias) then return 1 end
return 0
`)

// servers are the Redis servers the format is checked on.
func servers(t *testing.T) map[string]*redis.Client {
	_, mini := redistest.Mini(t)
	return map[string]*redis.Client{"redis-server": redistest.Server(t), "miniredis": mini}
}

// tricky are strings a field must carry exactly.
var tricky = []string{"", "usr_1", "https://agent.example/client", `quote"d`, `back\slash`, `\`, "=", "-", "u,t1", "<script>&",
	"line\nbreak\t\x00\x1f", "\x7f", "é ü 日本", "\u2028\u2029", "\xff\xfe invalid UTF-8", "a\xc3", "emoji 🙂", "1:2\n3"}

// asRead is s as a log gives it back: byte for byte.
func asRead(s string) string { return s }

// TestApprovalFieldAsLua: an approval is kept in a log as lib.lua
// approval_field makes it, approvalField makes the same, and
// approvalOfField reads back what decodeApproval reads from the JSON.
func TestApprovalFieldAsLua(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	var jsons []string
	for _, approver := range []string{"user", "agent", "", "username", "third"} {
		for _, s := range tricky {
			for _, ap := range []storedApproval{
				{Approver: approver, RecordedAt: 1796052877123456789},
				{Approver: approver, ApprovedAt: 1796052877000000000, InputType: s, Reference: s, RecordedAt: -5},
				{Approver: approver, InputType: s, RecordedAt: 0},
				{Approver: approver, Reference: `,"recorded_at":1}` + s, RecordedAt: r.Int64()},
				{Approver: approver, Reference: s + `\`, InputType: `",t`, ApprovedAt: -r.Int64()},
			} {
				b, _ := json.Marshal(ap)
				jsons = append(jsons, string(b))
			}
		}
	}
	jsons = append(jsons, "", "{}", `{"approver":"user"}`, `{"approver":"user","recorded_at":1,"extra":2}`, `{"approver":"user","x":1,"recorded_at":1}`, "not json")
	for name, c := range servers(t) {
		for _, j := range jsons {
			got, err := auditScript.Run(t.Context(), c, nil, j).Text()
			if err != nil && err != redis.Nil {
				t.Fatalf("%s: %v", name, err)
			}
			if want := approvalField(j); got != want {
				t.Errorf("%s: approval_field(%s) = %q, approvalField %q", name, j, got, want)
			}
		}
	}
	for _, j := range jsons {
		f := approvalField(j)
		if strings.ContainsAny(f, "\t\n") {
			t.Errorf("approvalField(%s) = %q holds a tab or a newline", j, f)
		}
		if j == "" || j[0] != '{' || !json.Valid([]byte(j)) {
			continue
		}
		if f[0] != '{' && !hasRecordedAt(f) {
			t.Errorf("approvalField(%s) = %q: no recorded_at", j, f)
		}
		if got, want := approvalOfField(f, "op_1", "r1"), decodeApproval(j, "op_1", "r1"); !approvalEqual(got, want) {
			t.Errorf("approvalOfField(%q) = %+v, want %+v (from %s)", f, got, want, j)
		}
	}
}

// logEntry is one entry a test writes through lib.lua, and what it says.
type logEntry struct {
	head, used, rev, summary, x, digest, terms, approval, acct string
	keepAu, k, now                                             string
	alias                                                      [2]string // terms, digest
	want                                                       store.Entry
}

// randomEntries makes n entries of operation opID at now, each like the
// one before with a chance of each field changing, as an operation's
// steps are.
func randomEntries(r *rand.Rand, opID string, n int, now time.Time) []logEntry {
	str := func() string {
		if r.IntN(2) == 0 {
			return tricky[r.IntN(len(tricky))]
		}
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(3) > 0 {
				b[i] = byte(' ' + r.IntN(95))
			}
		}
		return string(b)
	}
	whats := []string{storekit.EntryRecorded, storekit.EntryDeclined, storekit.EntryClaimed, storekit.EntryReleased, storekit.EntryPerformed,
		storekit.EntryNotPerformed, storekit.EntryUnknown, storekit.EntryResolved, storekit.EntryResolvedNotDo}
	var out []logEntry
	e := store.Entry{Owner: store.Owner{Agent: "https://agent.example/c", User: "usr_1"}}
	rev, summary, terms, x := "1796052877-abcdefghijklmnop", "Exchange the jacket.", `{"n":1}`, time.Unix(1796052877, 0)
	ap := store.Approval{Approver: store.ApproverUser, RecordedAt: now}
	note := ""
	for i := range n {
		change := func() bool { return i == 0 || r.IntN(4) == 0 }
		e.What = whats[r.IntN(len(whats))]
		if change() {
			now = now.Add(time.Duration(r.Int64N(int64(10 * time.Minute))))
		}
		e.At = now
		if change() {
			e.Kind, e.Session, e.Instance = str(), str(), str()
		}
		if change() {
			note = str()
		}
		e.Reason, e.By = note, ""
		if e.What == storekit.EntryResolved || e.What == storekit.EntryResolvedNotDo {
			e.Reason, e.By = "", note
		}
		if change() {
			e.Owner = store.Owner{Agent: str(), User: str(), Account: str()}
		}
		acct := ""
		if r.IntN(6) == 0 {
			acct = str() // the operation's, when the caller doesn't know it
		}
		if change() {
			switch r.IntN(4) {
			case 0:
				rev = fmt.Sprintf("%d-%s", x.Unix(), strconv.Itoa(r.IntN(1000)))
			case 1:
				rev = str()
			case 2:
				rev = fmt.Sprintf("-%d-x", r.IntN(9)+1)
				x = time.Unix(-int64(rev[1]-'0'), 0)
			default:
				rev = fmt.Sprintf("%d-%d", r.IntN(100), r.IntN(100))
			}
			summary = str()
			if r.IntN(3) == 0 {
				x = time.Unix(r.Int64N(4e9), 0)
			} else if r.IntN(3) == 0 {
				x = time.Unix(0, r.Int64N(4e18))
			}
		}
		if change() {
			terms = `{"n":` + strconv.Itoa(r.IntN(5)) + `,"s":"` + strings.ReplaceAll(strings.ReplaceAll(str(), `\`, ""), `"`, "") + `"}`
			if r.IntN(5) == 0 {
				terms += "\t\\\n" // not canonical, still kept exactly
			}
		}
		if change() {
			ap = store.Approval{Approver: store.Approver([]string{"user", "agent", "", "other"}[r.IntN(4)]), InputType: str(), Reference: str(), RecordedAt: now}
			if r.IntN(2) == 0 {
				ap.ApprovedAt = now.Truncate(time.Second)
			}
			if r.IntN(3) == 0 {
				ap.RecordedAt = now.Add(-time.Second)
			}
		}
		ap.UsedAt = time.Time{}
		if r.IntN(2) == 0 {
			ap.UsedAt = now
			if r.IntN(3) == 0 {
				ap.UsedAt = now.Add(-time.Minute)
			}
		}
		le := logEntry{rev: rev, summary: summary, x: ns(x), approval: string(encodeApproval(ap, ap.RecordedAt)), acct: acct, now: ns(now),
			keepAu: ns(now.Add(24 * time.Hour)), k: ns(now.Add(time.Duration(r.Int64N(int64(48 * time.Hour)))))}
		if !ap.UsedAt.IsZero() {
			le.used = ns(ap.UsedAt)
		}
		digest := termsDigest([]byte(terms))
		switch r.IntN(3) {
		case 0:
			le.digest = digest
		case 1:
			le.terms = terms
		default:
			le.digest, le.alias = digest, [2]string{terms, digest}
		}
		ctx := storedriver.WithEntry(context.Background(), store.Entry{Kind: e.Kind, Session: e.Session, Instance: e.Instance, By: e.By})
		le.head, _ = entryHeadOf(ctx, e.What, e.Owner, e.Reason, nil, now)
		if e.Instance == "" {
			e.Instance = storekit.Instance()
		}
		w := e
		w.Owner = store.Owner{Agent: asRead(e.Agent), User: asRead(e.User), Account: asRead(e.Account)}
		if acct != "" {
			w.Account = asRead(acct)
		}
		w.Kind, w.Session, w.Instance, w.Reason, w.By = asRead(e.Kind), asRead(e.Session), asRead(e.Instance), asRead(e.Reason), asRead(e.By)
		w.Operation = store.Operation{ID: opID, Revision: asRead(rev), Summary: asRead(summary), ExpiresAt: x.UTC()}
		w.TermsDigest = digest
		w.Approval = decodeApproval(le.approval, opID, w.Operation.Revision)
		w.Approval.UsedAt = ap.UsedAt
		if w.What == storekit.EntryDeclined {
			w.Approval.RecordedAt = time.Time{}
		}
		le.want = w
		out = append(out, le)
	}
	return out
}

// TestLogAsLuaWritesIt: entries written by lib.lua read back, with
// decodeLog, exactly as they were, whatever their strings hold and
// whichever fields each shares with the one before; and the log keeps
// what they share once.
func TestLogAsLuaWritesIt(t *testing.T) {
	t.Parallel()
	for name, c := range servers(t) {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			runs := 300
			if name == "miniredis" {
				runs = 100
			}
			for run := range runs {
				opID := fmt.Sprint("op_", run)
				key := "t{" + name + "}:lg:" + opID
				now := time.Unix(1796052877, int64(run))
				n := 1 + r.IntN(8)
				if run%25 == 0 {
					n = storekit.MaxEntriesPerOperation
				}
				entries := randomEntries(r, opID, n, now)
				for i, le := range entries {
					written, err := auditScript.Run(t.Context(), c, []string{key}, le.head, le.used, le.rev, le.summary, le.x, le.digest, le.terms,
						le.approval, le.acct, le.keepAu, le.k, le.now, le.alias[0], le.alias[1], "0").Int()
					if err != nil || written != 1 {
						t.Fatalf("log_write: %v %v", written, err)
					}
					if i == 0 && le.used == "" && le.acct == "" {
						// The first line as Record composes it for a computed
						// operation's approval (record.lua).
						v, err := c.Get(t.Context(), key).Result()
						if err != nil {
							t.Fatal(err)
						}
						x, _ := parseTime(le.x)
						var terms []byte
						if le.terms != "" {
							terms = []byte(le.terms)
						}
						keep, lua, _ := strings.Cut(v, "\n")
						got := firstLine(le.head, le.rev, le.summary, x, le.digest, terms, le.approval)
						// Byte for byte, unless a string is escaped (JSON
						// allows more than one way: cjson and Go differ);
						// read alike in any case.
						exact := escapeField(le.rev) == le.rev && escapeField(le.summary) == le.summary
						ge, _, _ := decodeLog(opID, keep+"\n"+got)
						le2, _, _ := decodeLog(opID, v)
						if (exact && got != lua) || len(ge) != 1 || len(le2) != 1 || !entryEqual(ge[0], le2[0]) {
							t.Fatalf("run %d: firstLine\n%q, lib.lua wrote\n%q", run, got, lua)
						}
					}
				}
				v, err := c.Get(t.Context(), key).Result()
				if err != nil {
					t.Fatal(err)
				}
				got, keep, ok := decodeLog(opID, v)
				if !ok || len(got) != len(entries) {
					t.Fatalf("run %d: decodeLog: %d entries, ok %v, want %d\n%q", run, len(got), ok, len(entries), v)
				}
				wantKeep := entries[0].keepAu
				for _, le := range entries {
					for _, k := range []string{le.keepAu, le.k} {
						if len(k) > len(wantKeep) || (len(k) == len(wantKeep) && k > wantKeep) {
							wantKeep = k
						}
					}
				}
				if ns(keep) != wantKeep {
					t.Errorf("run %d: keep %s, want %s", run, ns(keep), wantKeep)
				}
				ids := map[string]bool{}
				for i, e := range got {
					want := entries[i].want
					want.ID = e.ID
					if !entryEqual(e, want) {
						t.Fatalf("run %d entry %d:\n got %+v\nwant %+v\nlog %q", run, i, e, want, v)
					}
					ids[e.ID] = true
				}
				if len(ids) != len(got) {
					t.Errorf("run %d: IDs repeat", run)
				}
				if err := c.Del(t.Context(), key).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func entryEqual(a, b store.Entry) bool {
	return a.ID == b.ID && a.What == b.What && a.At.Equal(b.At) && a.Instance == b.Instance && a.Owner == b.Owner &&
		a.Session == b.Session && a.Kind == b.Kind && a.Operation.ID == b.Operation.ID && a.Operation.Revision == b.Operation.Revision &&
		a.Operation.Summary == b.Operation.Summary && a.Operation.ExpiresAt.Equal(b.Operation.ExpiresAt) && a.Operation.Terms == nil &&
		a.TermsDigest == b.TermsDigest && approvalEqual(a.Approval, b.Approval) && a.Reason == b.Reason && a.By == b.By
}

func approvalEqual(a, b store.Approval) bool {
	return a.OperationID == b.OperationID && a.Revision == b.Revision && a.Approver == b.Approver && a.ApprovedAt.Equal(b.ApprovedAt) &&
		a.InputType == b.InputType && a.Reference == b.Reference && a.RecordedAt.Equal(b.RecordedAt) && a.UsedAt.Equal(b.UsedAt)
}
