package memstore

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// memLog is an operation's audit entries, in the order they were written,
// encoded in one string (BenchmarkMemoryRetained): each entry says only
// what differs from the entry before, so what an operation's entries
// share (its owner, revision, summary, expires_at, terms digest and
// approval, the Session, kind and web server) is kept once, as
// redisstore's log keeps it. A performed operation's three entries take
// about 300 bytes where they took about 1,000 as structs.
//
// An entry is a byte of its What (an index in entryWhats, its high four
// bits) and of which of the first fields (lfAt...) differ from the entry
// before's (its low three; the fourth says a uvarint of the others'
// follows), then those fields in order: a string as its uvarint length
// and its bytes; at as a zigzag varint of its difference from the entry
// before's at; the other times the same, from the entry's own at (so that
// a used-at equal to at takes one byte), expires_at in seconds when it is
// whole seconds; the revision without the seconds its name starts with
// when they are expires_at's (store.NewRevision); the terms digest, when
// it is a SHA-256 in base64url, as 0 and its 32 bytes; the approver "user"
// or "agent" as one byte.
//
// Its entries' IDs are not stored: the i-th is "<operation_id>.<its first
// entry's at, base 36>.<i>". A log is begun anew only once it is
// forgotten by the step's clock, whose at is then later than every at of
// the log before (which was kept for the audit retention after each):
// no two logs of one operation name their entries alike.
type memLog struct {
	data string
	// until is when it is forgotten (instant): the audit retention after
	// its latest entry, and no sooner than its operation was remembered
	// at that entry's step.
	until int64
	n     uint8 // entries (at most storekit.MaxEntriesPerOperation)
}

// instant is t in Unix nanoseconds, clamped to what an int64 holds
// (years 1678 to 2262), so that instants compare as the times do.
func instant(t time.Time) int64 {
	switch {
	case t.Before(minInstant):
		return math.MinInt64
	case t.After(maxInstant):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minInstant, maxInstant = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// forgottenAt says whether a log kept until until is forgotten at now.
func (l *memLog) forgottenAt(now time.Time) bool { return instant(now) > l.until }

// keep makes l kept until t at least.
func (l *memLog) keep(t time.Time) { l.until = max(l.until, instant(t)) }

// memOrphanLog is a log that outlives its operation, in memory.logs, on
// a timer of its own.
type memOrphanLog struct {
	timer memTimer
	memLog
}

// logFields are what an entry says, as a log keeps them.
type logFields struct {
	what                                      uint8
	at, used, expires, approvedAt, recordedAt int64
	kind, session, instance, note             string
	agent, user, account                      string
	revision, summary, digest                 string
	approver, inputType, reference            string
	// As an append decodes the entry before (memLog.decode with raw):
	// revisionRest says revision is only what follows its expires_at's
	// seconds and "-", and digestRaw that digest is its 32 bytes, both
	// slices of the log, so that comparing them allocates nothing;
	// revisionOf is the expires_at whose seconds it follows.
	revisionRest, digestRaw bool
	revisionOf              int64
}

// The fields of an entry, in the order they are encoded.
const (
	lfAt = iota
	lfUsed
	lfKind
	lfSession
	lfInstance
	lfNote
	lfAgent
	lfUser
	lfAccount
	lfExpires // before lfRevision, whose name it may spell
	lfRevision
	lfSummary
	lfDigest
	lfApprover
	lfApprovedAt
	lfInputType
	lfReference
	lfRecordedAt
	lfCount
)

// entryWhats are the values of Entry.What, by logFields.what.
var entryWhats = [...]string{storekit.EntryRecorded, storekit.EntryDeclined, storekit.EntryClaimed, storekit.EntryReleased,
	storekit.EntryPerformed, storekit.EntryNotPerformed, storekit.EntryUnknown, storekit.EntryResolved, storekit.EntryResolvedNotDo}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// fieldsOf is what e says, as a log keeps it.
func fieldsOf(e store.Entry) logFields {
	note := e.Reason
	if e.By != "" {
		note = e.By
	}
	a := e.Approval
	return logFields{
		what: uint8(slices.Index(entryWhats[:], e.What)),
		at:   nanos(e.At), used: nanos(a.UsedAt), expires: nanos(e.Operation.ExpiresAt),
		approvedAt: nanos(a.ApprovedAt), recordedAt: nanos(a.RecordedAt),
		kind: e.Kind, session: e.Session, instance: e.Instance, note: note,
		agent: e.Agent, user: e.User, account: e.Account,
		revision: e.Operation.Revision, summary: e.Operation.Summary, digest: e.TermsDigest,
		approver: string(a.Approver), inputType: a.InputType, reference: a.Reference,
	}
}

// strings are f's string fields, by their place among the fields.
func (f *logFields) strings() [lfCount]*string {
	var s [lfCount]*string
	s[lfKind], s[lfSession], s[lfInstance], s[lfNote] = &f.kind, &f.session, &f.instance, &f.note
	s[lfAgent], s[lfUser], s[lfAccount] = &f.agent, &f.user, &f.account
	s[lfRevision], s[lfSummary], s[lfDigest] = &f.revision, &f.summary, &f.digest
	s[lfApprover], s[lfInputType], s[lfReference] = &f.approver, &f.inputType, &f.reference
	return s
}

// times are f's time fields (Unix ns), by their place among the fields.
func (f *logFields) times() [lfCount]*int64 {
	var t [lfCount]*int64
	t[lfAt], t[lfUsed], t[lfExpires], t[lfApprovedAt], t[lfRecordedAt] = &f.at, &f.used, &f.expires, &f.approvedAt, &f.recordedAt
	return t
}

// add appends e after the entries of l, which the last of says prev.
func (l *memLog) add(e store.Entry) {
	var prev logFields
	l.decode(&prev, true, nil)
	f := fieldsOf(e)
	var buf [256]byte
	enc := appendEntry(buf[:0], &prev, &f)
	var b strings.Builder
	b.Grow(len(l.data) + len(enc))
	b.WriteString(l.data)
	b.Write(enc)
	l.data = b.String()
	l.n++
}

// sameAs says whether field i of f is what it is in prev, which may be
// decoded raw (logFields.revisionRest, digestRaw).
func (f *logFields) sameAs(prev *logFields, i int) bool {
	switch {
	case i == lfRevision && prev.revisionRest:
		var buf [24]byte
		p := appendRevisionSeconds(buf[:0], prev.revisionOf)
		return len(f.revision) == len(p)+len(prev.revision) && f.revision[:len(p)] == string(p) && f.revision[len(p):] == prev.revision
	case i == lfDigest && prev.digestRaw:
		raw, ok := digestBytes(f.digest)
		return ok && string(raw[:]) == prev.digest
	}
	fs, ps := f.strings(), prev.strings()
	if fs[i] != nil {
		return *fs[i] == *ps[i]
	}
	ft, pt := f.times(), prev.times()
	return *ft[i] == *pt[i]
}

// appendEntry appends the entry f says after one that prev says.
func appendEntry(b []byte, prev, f *logFields) []byte {
	fs, ft := f.strings(), f.times()
	var mask uint64
	for i := range lfCount {
		if !f.sameAs(prev, i) {
			mask |= 1 << i
		}
	}
	what := min(f.what, 15)
	if mask>>3 == 0 {
		b = append(b, what<<4|byte(mask))
	} else {
		b = binary.AppendUvarint(append(b, what<<4|8|byte(mask&7)), mask>>3)
	}
	for i := range lfCount {
		if mask&(1<<i) == 0 {
			continue
		}
		switch i {
		case lfAt:
			b = binary.AppendVarint(b, int64(uint64(f.at)-uint64(prev.at)))
		case lfExpires:
			// Whole seconds (as store keeps expires_at): their difference
			// from at's, doubled (two bytes for ten minutes); else 1 and
			// the difference in ns.
			if d := f.expires/1e9 - f.at/1e9; f.expires%1e9 == 0 && d > -1<<40 && d < 1<<40 {
				b = binary.AppendVarint(b, 2*d)
			} else {
				b = binary.AppendVarint(binary.AppendVarint(b, 1), int64(uint64(f.expires)-uint64(f.at)))
			}
		case lfRevision:
			// store.NewRevision's names start with their expires_at's
			// seconds: 0 and the rest; else its length plus one.
			var buf [24]byte
			if rest, ok := strings.CutPrefix(f.revision, string(appendRevisionSeconds(buf[:0], f.expires))); ok && f.expires%1e9 == 0 {
				b = binary.AppendUvarint(append(b, 0), uint64(len(rest)))
				b = append(b, rest...)
			} else {
				b = binary.AppendUvarint(b, uint64(len(f.revision))+1)
				b = append(b, f.revision...)
			}
		case lfDigest:
			if raw, ok := digestBytes(f.digest); ok {
				b = append(append(b, 0), raw[:]...)
			} else {
				b = binary.AppendUvarint(b, uint64(len(f.digest))+1)
				b = append(b, f.digest...)
			}
		case lfApprover:
			switch store.Approver(f.approver) {
			case store.ApproverUser:
				b = append(b, 0)
			case store.ApproverAgent:
				b = append(b, 1)
			default:
				b = binary.AppendUvarint(b, uint64(len(f.approver))+2)
				b = append(b, f.approver...)
			}
		default:
			if ft[i] != nil {
				b = binary.AppendVarint(b, int64(uint64(*ft[i])-uint64(f.at)))
			} else {
				b = binary.AppendUvarint(b, uint64(len(*fs[i])))
				b = append(b, *fs[i]...)
			}
		}
	}
	return b
}

// appendRevisionSeconds appends how a revision named by store.NewRevision
// for expires_at x (Unix ns, whole seconds) starts: its seconds and "-".
func appendRevisionSeconds(b []byte, x int64) []byte {
	return append(strconv.AppendInt(b, x/1e9, 10), '-')
}

// digestBytes is the 32 bytes a terms digest (storedriver.TermsDigest:
// unpadded base64url) encodes, when it is one and encodes them exactly;
// with no allocation, as every audit entry a store writes passes here.
func digestBytes(digest string) (raw [32]byte, ok bool) {
	const n = 43 // base64.RawURLEncoding.EncodedLen(32)
	if len(digest) != n {
		return raw, false
	}
	var src, again [n]byte
	copy(src[:], digest)
	if k, err := base64.RawURLEncoding.Decode(raw[:], src[:]); err != nil || k != 32 {
		return raw, false
	}
	base64.RawURLEncoding.Encode(again[:], raw[:])
	return raw, string(again[:]) == digest
}

// decode decodes l's entries into f in order, calling yield (when not
// nil) after each; f is then its last. With raw, a revision and a digest
// stay as the log keeps them (logFields.revisionRest, digestRaw), for
// comparing only. A log is only ever written by add, so it decodes;
// should it not, the entries after the fault are left out.
func (l *memLog) decode(f *logFields, raw bool, yield func(i int)) {
	d := l.data
	// uvarint and varint read a number off d.
	uvarint := func() (uint64, bool) {
		v, n := binary.Uvarint([]byte(d[:min(len(d), binary.MaxVarintLen64)]))
		d = d[max(n, 0):]
		return v, n > 0
	}
	varint := func() (int64, bool) {
		v, n := binary.Varint([]byte(d[:min(len(d), binary.MaxVarintLen64)]))
		d = d[max(n, 0):]
		return v, n > 0
	}
	// str reads n bytes off d.
	str := func(n uint64) (string, bool) {
		if uint64(len(d)) < n {
			return "", false
		}
		s := d[:n]
		d = d[n:]
		return s, true
	}
	for i := 0; d != ""; i++ {
		head := d[0]
		d = d[1:]
		f.what = head >> 4
		mask := uint64(head & 7)
		if head&8 != 0 {
			more, ok := uvarint()
			if !ok {
				return
			}
			mask |= more << 3
		}
		fs, ft := f.strings(), f.times()
		for k := range lfCount {
			if mask&(1<<k) == 0 {
				continue
			}
			ok := true
			switch k {
			case lfAt:
				var v int64
				v, ok = varint()
				f.at = int64(uint64(f.at) + uint64(v))
			case lfExpires:
				var v int64
				if v, ok = varint(); ok && v%2 == 0 {
					f.expires = (f.at/1e9 + v/2) * 1e9
				} else if ok {
					v, ok = varint()
					f.expires = int64(uint64(f.at) + uint64(v))
				}
			case lfRevision:
				var n uint64
				if n, ok = uvarint(); ok && n == 0 {
					var rest string
					if n, ok = uvarint(); ok {
						rest, ok = str(n)
					}
					if f.revisionRest = raw; raw {
						f.revision, f.revisionOf = rest, f.expires
					} else {
						var buf [64]byte
						f.revision = string(append(appendRevisionSeconds(buf[:0], f.expires), rest...))
					}
				} else if ok {
					f.revisionRest = false
					f.revision, ok = str(n - 1)
				}
			case lfDigest:
				var n uint64
				if n, ok = uvarint(); ok && n == 0 {
					var b string
					b, ok = str(32)
					if f.digestRaw = raw; raw {
						f.digest = b
					} else {
						var enc [43]byte
						base64.RawURLEncoding.Encode(enc[:], []byte(b))
						f.digest = string(enc[:])
					}
				} else if ok {
					f.digestRaw = false
					f.digest, ok = str(n - 1)
				}
			case lfApprover:
				var n uint64
				switch n, ok = uvarint(); {
				case !ok:
				case n == 0:
					f.approver = string(store.ApproverUser)
				case n == 1:
					f.approver = string(store.ApproverAgent)
				default:
					f.approver, ok = str(n - 2)
				}
			default:
				if ft[k] != nil {
					var v int64
					v, ok = varint()
					*ft[k] = int64(uint64(f.at) + uint64(v))
				} else {
					var n uint64
					if n, ok = uvarint(); ok {
						*fs[k], ok = str(n)
					}
				}
			}
			if !ok {
				return
			}
		}
		if yield != nil {
			yield(i)
		}
	}
}

// entry is the Entry fields f say, the i-th of the log of operation id,
// whose first entry's at is at0.
func (f *logFields) entry(id string, at0 int64, i int) store.Entry {
	e := store.Entry{
		ID: id + "." + strconv.FormatInt(at0, 36) + "." + strconv.Itoa(i),
		At: fromNanos(f.at), Instance: f.instance, Owner: store.Owner{Agent: f.agent, User: f.user, Account: f.account},
		Session: f.session, Kind: f.kind, TermsDigest: f.digest,
		Operation: store.Operation{ID: id, Revision: f.revision, Summary: f.summary, ExpiresAt: fromNanos(f.expires)},
		Approval: store.Approval{OperationID: id, Revision: f.revision, Approver: store.Approver(f.approver),
			ApprovedAt: fromNanos(f.approvedAt), InputType: f.inputType, Reference: f.reference,
			RecordedAt: fromNanos(f.recordedAt), UsedAt: fromNanos(f.used)},
	}
	if int(f.what) < len(entryWhats) {
		e.What = entryWhats[f.what]
	}
	if e.What == storekit.EntryResolved || e.What == storekit.EntryResolvedNotDo {
		e.By = f.note
	} else {
		e.Reason = f.note
	}
	return e
}

// entries are l's entries of operation id with At in [from, to).
func (l *memLog) entries(id string, from, to time.Time) []store.Entry {
	var out []store.Entry
	var at0 int64
	var f logFields
	l.decode(&f, false, func(i int) {
		if i == 0 {
			at0 = f.at
		}
		if at := fromNanos(f.at); !at.Before(from) && at.Before(to) {
			out = append(out, f.entry(id, at0, i))
		}
	})
	return out
}
