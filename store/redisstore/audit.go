package redisstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The audit log (store.Entry): each operation's entries are one string,
// "<prefix>{<slot>}:lg:<operation_id>", in the operation's slot, which the
// step that commits a change rewrites in the same script (lib.lua
// log_write). Its first line is "1:" and the log's keep-until (Unix ns);
// then one line per entry, in the order written, of up to 8 fields
// separated by tabs (lib.lua names them; some are groups of strings
// separated by \x1f). A field is "" when it says what the entry before
// says, `\` when it is "" after one that was not, and the fields "" ends a
// line with are left out: what an operation's entries share (its owner,
// revision, summary, expires_at, terms digest and approval, the Session,
// kind and web server) is kept once, and a performed operation's three
// entries take about 250 bytes where each entry as JSON took about 500.
// A string holding a backslash, a tab, a newline or \x1f is kept with
// them escaped (appendField), byte for byte, so that no field holds a tab,
// a newline or \x1f. The caller composes an entry's first
// fields (entryHeadOf), the step the rest.
//
// Its entries' IDs are not stored: the i-th is "<operation_id>.<its
// first entry's at, base 36>.<i>". A log is begun anew only once its
// keep-until has passed by the step's clock, whose at is then later than
// every at of the log before: no two logs of one operation_id name their
// entries alike.
//
// A version of the kit before this format kept each operation's entries
// as a list, "<prefix>{<slot>}:log:<operation_id>", one JSON element per
// entry (legacyHead, legacyTail); Entries reads those too, so that what
// servers of that version wrote during a rolling deploy is not lost. Such
// a server reads none of the new logs.

// entryCodes are the values of field 1, what an entry says happened.
var entryCodes = map[string]string{
	storekit.EntryRecorded:      "r",
	storekit.EntryDeclined:      "d",
	storekit.EntryClaimed:       "c",
	storekit.EntryReleased:      "l", // take.lua makes it from a claim's head
	storekit.EntryPerformed:     "p",
	storekit.EntryNotPerformed:  "n",
	storekit.EntryUnknown:       "u",
	storekit.EntryResolved:      "P",
	storekit.EntryResolvedNotDo: "N",
}

// entryWhats are entryCodes the other way round.
var entryWhats = func() map[string]string {
	m := make(map[string]string, len(entryCodes))
	for what, code := range entryCodes {
		m[code] = what
	}
	return m
}()

// The fields of an entry's line, counted from 0 (lib.lua counts from 1).
const (
	fWhat     = iota
	fAt       // Unix ns
	fUsed     // the approval's used-at; "=": at
	fContext  // kind, Session, note (Reason, or By of a resolution)
	fOwner    // web server, agent, user, account
	fRevision // revision, summary, expires_at ("-": the revision's seconds)
	fDigest   // the terms digest; "=" or "!" and the terms (digestOfField)
	fApproval // approvalField, its recorded_at left out when it is at
	nFields
)

// groupSep separates the strings of a field that holds several.
const groupSep = "\x1f"

// auditArgs are the three arguments every script that may write an entry
// takes: the entry's head, the terms' digest ("" when the caller doesn't
// know the terms) and now plus the audit retention.
func (s *rstore) auditArgs(ctx context.Context, what string, owner store.Owner, note string, terms []byte, now time.Time) []any {
	head, digest := entryHeadOf(ctx, what, owner, note, terms, now)
	return []any{head, digest, ns(now.Add(s.auditRetention))}
}

// entryHeadOf is the head of an entry, what its caller knows (fields
// 0-4 of its line, fUsed left ""), and the terms' digest ("" when terms
// are nil: the caller doesn't know them).
func entryHeadOf(ctx context.Context, what string, owner store.Owner, note string, terms []byte, now time.Time) (head string, digest string) {
	e := storedriver.EntryOf(ctx)
	if what == storekit.EntryResolved || what == storekit.EntryResolvedNotDo {
		note = e.By
	}
	code, ok := entryCodes[what]
	if !ok {
		code = escapeField(what) // not one of the kit's: kept as it is
	}
	b := make([]byte, 0, 40+len(e.Kind)+len(e.Session)+len(e.Instance)+len(note)+len(owner.Agent)+len(owner.User)+len(owner.Account))
	b = append(b, code...)
	b = strconv.AppendInt(append(b, '\t'), now.UnixNano(), 10)
	b = append(b, '\t', '\t')
	for i, f := range [...]string{e.Kind, e.Session, note, e.Instance, owner.Agent, owner.User, owner.Account} {
		switch i {
		case 0:
		case 3:
			b = append(b, '\t')
		default:
			b = append(b, groupSep...)
		}
		b = appendField(b, f)
	}
	if terms != nil {
		digest = termsDigest(terms)
	}
	return string(b), digest
}

// firstLine is the line of a log's first entry (lib.lua log_write from
// no entry before): its head (entryHeadOf), the revision rev, its summary
// and expires_at x, the terms digest ("": terms), and the stored approval
// (JSON).
func firstLine(head, rev, summary string, x time.Time, digest string, terms []byte, approvalJSON string) string {
	if digest == "" && terms != nil {
		digest = termsField(terms)
	}
	what, rest, _ := strings.Cut(head, "\t")
	at, rest, _ := strings.Cut(rest, "\t")
	ctx, owner, _ := strings.Cut(strings.TrimPrefix(rest, "\t"), "\t")
	xs := ns(x)
	if revisionSeconds(rev)+"000000000" == xs {
		xs = "-"
	}
	ap := approvalField(approvalJSON)
	if (strings.HasPrefix(ap, "u") || strings.HasPrefix(ap, "a")) && strings.HasSuffix(ap, ",t"+at) {
		ap = ap[:len(ap)-len(at)-2]
	}
	w := []string{what, at, "", ctx, owner, escapeField(rev) + groupSep + escapeField(summary) + groupSep + xs, digest, ap}
	for len(w) > 1 && w[len(w)-1] == "" {
		w = w[:len(w)-1]
	}
	return strings.Join(w, "\t") + "\n"
}

// fieldEscapes escape the bytes a string of a log's line may not hold
// as they are (lib.lua esc): a backslash, a tab, a newline and \x1f.
var fieldEscapes = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\x1f", `\s`)

// appendField appends s as a string of a log's line: itself, or with
// each backslash, tab, newline and \x1f escaped (\\, \t, \n, \s), as
// lib.lua esc writes it.
func appendField(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "\\\t\n\x1f") {
		return append(b, s...)
	}
	return append(b, fieldEscapes.Replace(s)...)
}

func escapeField(s string) string { return string(appendField(nil, s)) }

// unescapeField reads a string as appendField (or lib.lua esc) wrote it,
// byte for byte; ok is false for an escape that none of them writes.
func unescapeField(f string) (string, bool) {
	if !strings.ContainsRune(f, '\\') {
		return f, true
	}
	b := make([]byte, 0, len(f))
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c == '\\' {
			if i++; i == len(f) {
				return "", false
			}
			switch f[i] {
			case '\\':
			case 't':
				c = '\t'
			case 'n':
				c = '\n'
			case 's':
				c = 0x1f
			default:
				return "", false
			}
		}
		b = append(b, c)
	}
	return string(b), true
}

// termsDigest is store.Entry.TermsDigest of canonical terms.
func termsDigest(terms []byte) string {
	sum := sha256.Sum256(terms)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// termsField is terms where a log keeps a terms digest that the step
// doesn't know, as lib.lua terms_field makes it.
func termsField(t []byte) string {
	if !bytes.ContainsAny(t, "\t\n") {
		return "=" + string(t)
	}
	return "!" + escapeField(string(t))
}

// digestOfField reads field fDigest: a digest, or terms the step knew
// without their digest ("=" and them, or "!" and them escaped:
// termsField), of which it is the digest.
func digestOfField(f string) (string, bool) {
	switch {
	case f == "":
		return "", true
	case f[0] == '=':
		return termsDigest([]byte(f[1:])), true
	case f[0] == '!':
		t, ok := unescapeField(f[1:])
		return termsDigest([]byte(t)), ok
	}
	return f, true
}

// resolveLine resolves one line of a log against the fields of the line
// before (st, changed in place), as lib.lua log_read does.
func resolveLine(line string, st *[nFields]string) {
	for f := 0; f < nFields && line != ""; f++ {
		v, rest, _ := strings.Cut(line, "\t")
		line = rest
		switch {
		case v == "":
			continue
		case v == `\`:
			v = ""
		case f == fUsed && v == "=":
			v = st[fAt]
		case f == fApproval && (v[0] == 'u' || v[0] == 'a') && !hasRecordedAt(v):
			v += ",t" + st[fAt]
		}
		st[f] = v
	}
}

// revisionSeconds is what a revision's name starts with before its first
// "-" after at least one digit, as lib.lua matches '^(%-?%d+)%-'; "" when
// it does not start so.
func revisionSeconds(rev string) string {
	i := 0
	if strings.HasPrefix(rev, "-") {
		i = 1
	}
	j := i
	for j < len(rev) && rev[j] >= '0' && rev[j] <= '9' {
		j++
	}
	if j == i || j >= len(rev) || rev[j] != '-' {
		return ""
	}
	return rev[:j]
}

// hasRecordedAt says whether an approval field ends with its recorded_at
// (",t" and an integer), as lib.lua finds ',t%-?%d+$'.
func hasRecordedAt(v string) bool {
	j := len(v)
	for j > 0 && v[j-1] >= '0' && v[j-1] <= '9' {
		j--
	}
	if j == len(v) {
		return false
	}
	if j > 0 && v[j-1] == '-' {
		j--
	}
	return j >= 2 && v[j-2:j] == ",t"
}

// decodeLog reads the log of operation opID (the string of its key): its
// entries, in the order written, and its keep-until; ok is false for a
// value that is no log of this format. A line that doesn't decode is left
// out; the lines after it still resolve against what it says.
func decodeLog(opID, v string) (entries []store.Entry, keep time.Time, ok bool) {
	first, rest, found := strings.Cut(v, "\n")
	k, isLog := strings.CutPrefix(first, "1:")
	if !found || !isLog {
		return nil, time.Time{}, false
	}
	if keep, ok = parseTime(k); !ok {
		return nil, time.Time{}, false
	}
	var st [nFields]string
	var names string // "<operation_id>.<first entry's at, base 36>."
	for i := 0; rest != ""; i++ {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		resolveLine(line, &st)
		if i == 0 {
			at, err := strconv.ParseInt(st[fAt], 10, 64)
			if err != nil {
				return nil, keep, true // the entries can't be named
			}
			names = opID + "." + strconv.FormatInt(at, 36) + "."
		}
		if e, ok := entryOfFields(opID, &st); ok {
			e.ID = names + strconv.Itoa(i)
			entries = append(entries, e)
		}
	}
	return entries, keep, true
}

// group splits field f, a group of n strings, and unescapes them.
func group(f string, n int) ([]string, bool) {
	parts := strings.Split(f, groupSep)
	if len(parts) != n {
		return nil, false
	}
	for i, p := range parts {
		var ok bool
		if parts[i], ok = unescapeField(p); !ok {
			return nil, false
		}
	}
	return parts, true
}

// entryOfFields is the entry the resolved fields of a line say.
func entryOfFields(opID string, st *[nFields]string) (store.Entry, bool) {
	what, ok := entryWhats[st[fWhat]]
	if !ok {
		if what, ok = unescapeField(st[fWhat]); !ok {
			return store.Entry{}, false
		}
	}
	c, ok1 := group(st[fContext], 3)
	o, ok2 := group(st[fOwner], 4)
	r, ok3 := group(st[fRevision], 3)
	at, ok4 := parseTime(st[fAt])
	digest, ok5 := digestOfField(st[fDigest])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return store.Entry{}, false
	}
	rev, x := r[0], r[2]
	if x == "-" {
		x = revisionSeconds(rev) + "000000000"
	}
	e := store.Entry{What: what, At: at, Instance: o[0],
		Owner:   store.Owner{Agent: o[1], User: o[2], Account: o[3]},
		Session: c[1], Kind: c[0], TermsDigest: digest,
		Operation: store.Operation{ID: opID, Revision: rev, Summary: r[1]}}
	if x, ok := parseTime(x); ok {
		e.Operation.ExpiresAt = x
	}
	e.Approval = approvalOfField(st[fApproval], opID, rev)
	if what == storekit.EntryDeclined { // recorded nowhere
		e.Approval.RecordedAt = time.Time{}
	}
	if st[fUsed] != "" {
		e.Approval.UsedAt, _ = parseTime(st[fUsed])
	}
	if what == storekit.EntryResolved || what == storekit.EntryResolvedNotDo {
		e.By = c[2]
	} else {
		e.Reason = c[2]
	}
	return e, true
}

// approvalField is a stored approval (encodeApproval's JSON) as a log
// keeps it, as lib.lua approval_field makes it: "u" or "a" for its
// approver, then ",p" approved_at, ",i" input_type, ",r" reference and
// ",t" recorded_at as the JSON has them (a member's name can't be inside
// a JSON string, whose quotes are escaped); the JSON itself when it has
// another shape.
func approvalField(j string) string {
	var c string
	var i int
	switch {
	case strings.HasPrefix(j, `{"approver":"user"`):
		c, i = "u", len(`{"approver":"user"`)
	case strings.HasPrefix(j, `{"approver":"agent"`):
		c, i = "a", len(`{"approver":"agent"`)
	default:
		return j
	}
	if !strings.HasSuffix(j, "}") {
		return j
	}
	for _, m := range [...][2]string{{`,"approved_at":`, ",p"}, {`,"input_type":`, ",i"}, {`,"reference":`, ",r"}} {
		if strings.HasPrefix(j[i:], m[0]) {
			v := i + len(m[0])
			next := strings.Index(j[v:], `,"`)
			if next < 0 {
				next = len(j) - 1 - v
			}
			c, i = c+m[1]+j[v:v+next], v+next
		}
	}
	rec, ok := strings.CutPrefix(j[i:], `,"recorded_at":`)
	if !ok {
		return j
	}
	rec = rec[:len(rec)-1]
	if digits := strings.TrimPrefix(rec, "-"); digits == "" || strings.Trim(digits, "0123456789") != "" {
		return j // as lib.lua matches '^%-?%d+$'
	}
	return c + ",t" + rec
}

// approvalOfField reads an approval field (approvalField, its recorded_at
// resolved); a malformed one leaves fields zero, as decodeApproval does.
func approvalOfField(f, opID, rev string) store.Approval {
	if f == "" || f[0] == '{' {
		return decodeApproval(f, opID, rev)
	}
	var sa storedApproval
	switch f[0] {
	case 'u':
		sa.Approver = string(store.ApproverUser)
	case 'a':
		sa.Approver = string(store.ApproverAgent)
	}
	bad := func() store.Approval { return store.Approval{OperationID: opID, Revision: rev} }
	for rest := f[1:]; rest != ""; {
		if len(rest) < 2 || rest[0] != ',' {
			return bad()
		}
		name, v := rest[1], rest[2:]
		switch name {
		case 'p', 't':
			end := strings.IndexByte(v, ',')
			if end < 0 {
				end = len(v)
			}
			n, err := strconv.ParseInt(v[:end], 10, 64)
			if err != nil {
				return bad()
			}
			if name == 'p' {
				sa.ApprovedAt = n
			} else {
				sa.RecordedAt = n
			}
			rest = v[end:]
		case 'i', 'r':
			end := jsonStringEnd(v)
			var s string
			if end < 0 || json.Unmarshal([]byte(v[:end]), &s) != nil {
				return bad()
			}
			if name == 'i' {
				sa.InputType = s
			} else {
				sa.Reference = s
			}
			rest = v[end:]
		default:
			return bad()
		}
	}
	a := store.Approval{OperationID: opID, Revision: rev, Approver: store.Approver(sa.Approver), InputType: sa.InputType, Reference: sa.Reference}
	if sa.ApprovedAt != 0 {
		a.ApprovedAt = time.Unix(0, sa.ApprovedAt).UTC()
	}
	if sa.RecordedAt != 0 {
		a.RecordedAt = time.Unix(0, sa.RecordedAt).UTC()
	}
	return a
}

// jsonStringEnd is the length of the JSON string v starts with, up to and
// including its closing quote; -1 when v starts with none.
func jsonStringEnd(v string) int {
	if v == "" || v[0] != '"' {
		return -1
	}
	for i := 1; i < len(v); i++ {
		switch v[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// legacyEntry is an entry as a version of the kit before this format
// kept it, one element of the list "<prefix>{<slot>}:log:<operation_id>":
// the caller's half (legacyHead, JSON) and the script's (legacyTail,
// JSON), separated by a newline.
type legacyHead struct {
	ID       string `json:"id"`
	What     string `json:"w"`
	At       int64  `json:"at"`
	Instance string `json:"i,omitempty"`
	Agent    string `json:"ag"`
	User     string `json:"us"`
	Account  string `json:"ac,omitempty"`
	Session  string `json:"sid,omitempty"`
	Kind     string `json:"kd,omitempty"`
	Note     string `json:"n,omitempty"` // Reason, or By of a resolution
}

type legacyTail struct {
	Op       string `json:"o"`
	Revision string `json:"v"`
	Summary  string `json:"s"`
	Expires  string `json:"x"`
	Digest   string `json:"d"`
	Terms    string `json:"t"`
	Approval string `json:"a"`
	Used     string `json:"u"`
	Keep     string `json:"k"`
	Account  string `json:"ac"` // the operation's, when the caller didn't know it
}

// decodeLegacyEntry reads an element of a list an earlier version kept;
// ok is false for a malformed one.
func decodeLegacyEntry(v string) (e store.Entry, keep time.Time, ok bool) {
	headJSON, tailJSON, found := strings.Cut(v, "\n")
	var h legacyHead
	var t legacyTail
	if !found || json.Unmarshal([]byte(headJSON), &h) != nil || json.Unmarshal([]byte(tailJSON), &t) != nil {
		return store.Entry{}, time.Time{}, false
	}
	keep, ok = parseTime(t.Keep)
	if !ok {
		return store.Entry{}, time.Time{}, false
	}
	if t.Account != "" {
		h.Account = t.Account
	}
	e = store.Entry{ID: h.ID, What: h.What, At: time.Unix(0, h.At).UTC(), Instance: h.Instance,
		Owner: store.Owner{Agent: h.Agent, User: h.User, Account: h.Account}, Session: h.Session, Kind: h.Kind,
		Operation: store.Operation{ID: t.Op, Revision: t.Revision, Summary: t.Summary}, TermsDigest: t.Digest}
	if x, ok := parseTime(t.Expires); ok {
		e.Operation.ExpiresAt = x
	}
	if e.TermsDigest == "" && t.Terms != "" {
		e.TermsDigest = termsDigest([]byte(t.Terms))
	}
	e.Approval = decodeApproval(t.Approval, t.Op, t.Revision)
	if h.What == storekit.EntryDeclined { // recorded nowhere
		e.Approval.RecordedAt = time.Time{}
	}
	if t.Used != "" {
		e.Approval.UsedAt, _ = parseTime(t.Used)
	}
	if h.What == storekit.EntryResolved || h.What == storekit.EntryResolvedNotDo {
		e.By = h.Note
	} else {
		e.Reason = h.Note
	}
	return e, keep, true
}

// Entries implements store.Store. It SCANs every master (each Cluster node
// in turn) for the store's audit logs, a batch at a time, and reads each
// batch with one pipelined GET per log (LRANGE for an earlier version's):
// O(keys) in total, in short steps, none holding Redis longer than a
// small command does. An operation's entries are in one key, read in one
// command.
func (s *rstore) Entries(ctx context.Context, operationID string, from, to time.Time) iter.Seq2[store.Entry, error] {
	return func(yield func(store.Entry, error) bool) {
		fail := func(err error) { yield(store.Entry{}, fmt.Errorf("redisstore: entries: %w", err)) }
		if operationID != "" && !storekit.ValidID(operationID) {
			return // no such operation
		}
		nodes, err := s.masters(ctx)
		if err != nil {
			fail(err)
			return
		}
		id := "*"
		if operationID != "" {
			id = operationID
		}
		// "lg:" and an earlier version's "log:" (both start with l,
		// which no other key of an owner's does).
		match := globEscape(s.prefix) + "{*}:l*:" + id
		for _, node := range nodes {
			var cursor uint64
			for {
				keys, next, err := node.Scan(ctx, cursor, match, scanBatch).Result()
				if err != nil {
					fail(err)
					return
				}
				found, err := readLogs(ctx, node, keys, from, to)
				if err != nil {
					fail(err)
					return
				}
				for _, e := range found {
					if !yield(e, nil) {
						return
					}
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
	}
}

// logKeyKind is what an audit log key found by SCAN is: its operation_id
// and whether it is an earlier version's list (legacy); ok is false for a
// key of another kind.
func logKeyKind(key string) (opID string, legacy, ok bool) {
	i := strings.LastIndex(key, "}:")
	if i < 0 {
		return "", false, false
	}
	rest := key[i+2:]
	if id, found := strings.CutPrefix(rest, "lg:"); found {
		return id, false, true
	}
	if id, found := strings.CutPrefix(rest, "log:"); found {
		return id, true, true
	}
	return "", false, false
}

// readLogs reads the logs named by keys and returns their entries in
// [from, to) of those not forgotten by to.
func readLogs(ctx context.Context, node redis.Cmdable, keys []string, from, to time.Time) ([]store.Entry, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := node.Pipeline()
	cmds := make([]redis.Cmder, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		id, legacy, ok := logKeyKind(k)
		switch {
		case !ok:
			continue
		case legacy:
			cmds[i] = pipe.LRange(ctx, k, 0, -1)
		default:
			cmds[i] = pipe.Get(ctx, k)
		}
		ids[i] = id
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	var out []store.Entry
	for i, c := range cmds {
		var log []store.Entry
		var keep time.Time
		switch c := c.(type) {
		case *redis.StringCmd:
			v, err := c.Result()
			if err != nil {
				continue // gone since the SCAN
			}
			var ok bool
			if log, keep, ok = decodeLog(ids[i], v); !ok {
				continue
			}
		case *redis.StringSliceCmd:
			for _, v := range c.Val() {
				e, k, ok := decodeLegacyEntry(v)
				if !ok {
					continue
				}
				keep = later(keep, k)
				log = append(log, e)
			}
		default:
			continue
		}
		if !to.After(keep) { // forgotten past its keep-until, swept or not
			for _, e := range log {
				if !e.At.Before(from) && e.At.Before(to) {
					out = append(out, e)
				}
			}
		}
	}
	return out, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// scanBatch is how many keys one SCAN step of Entries asks for: each step
// is short, so reading the ledger never blocks Redis for other web
// servers.
const scanBatch = 500

// globEscape escapes the glob characters of a key prefix for SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
