package redisstore

import (
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

// The audit log (store.Entry): each operation's entries are a list,
// "<prefix>{<slot>}:log:<operation_id>", in the operation's slot, which
// the step that commits a change appends to in the same script (lib.lua
// audit). An element is the caller's half of the entry (entryHead, JSON:
// what the web server knows before the step) and the script's half
// (entryTail, JSON: what only the step knows, such as which approval it
// used), separated by a newline. The list lives for the audit retention
// after its latest entry, and at least as long as the operation is
// remembered at that step.

// entryHead is the caller's half of a stored entry.
type entryHead struct {
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

// entryTail is the script's half (what the caller may know, entryKnown,
// then the rest): the operation's revision, its summary
// and expires_at, the terms' digest (d, the caller's) or the terms (t,
// when only the store knows them), the stored approval, when it was used
// up, and the log's keep-until (Unix ns).
type entryTail struct {
	entryKnown
	Keep    string `json:"k"`
	Account string `json:"ac"` // the operation's, when the caller didn't know it
}

// auditArgs are the three arguments every script that may write an entry
// takes: the entry's head, the terms' digest ("" when the caller doesn't
// know the terms) and now plus the audit retention.
func (s *rstore) auditArgs(ctx context.Context, what string, owner store.Owner, note string, terms []byte, now time.Time) []any {
	head, digest := entryHeadOf(ctx, what, owner, note, terms, now)
	return []any{head, digest, ns(now.Add(s.auditRetention))}
}

// entryHeadOf is the head of an entry (entryHead, JSON) and the terms'
// digest ("" when terms are nil: the caller doesn't know them).
func entryHeadOf(ctx context.Context, what string, owner store.Owner, note string, terms []byte, now time.Time) (head []byte, digest string) {
	e := storedriver.EntryOf(ctx)
	if what == storekit.EntryResolved || what == storekit.EntryResolvedNotDo {
		note = e.By
	}
	h := entryHead{ID: storekit.NewToken(), What: what, At: now.UnixNano(), Instance: e.Instance,
		Agent: owner.Agent, User: owner.User, Account: owner.Account, Session: e.Session, Kind: e.Kind, Note: note}
	head = h.encode()
	if terms != nil {
		digest = termsDigest(terms)
	}
	return head, digest
}

// encode is json.Marshal(h), byte for byte, without reflection: a head is
// composed for every Take (a claim's entry), Record and Finish.
func (h entryHead) encode() []byte {
	b := make([]byte, 0, 80+len(h.ID)+len(h.What)+len(h.Instance)+len(h.Agent)+len(h.User)+len(h.Account)+len(h.Session)+len(h.Kind)+len(h.Note))
	b = appendJSONString(append(b, `{"id":`...), h.ID)
	b = appendJSONString(append(b, `,"w":`...), h.What)
	b = strconv.AppendInt(append(b, `,"at":`...), h.At, 10)
	b = appendJSONField(b, `,"i":`, h.Instance, true)
	b = appendJSONField(b, `,"ag":`, h.Agent, false)
	b = appendJSONField(b, `,"us":`, h.User, false)
	b = appendJSONField(b, `,"ac":`, h.Account, true)
	b = appendJSONField(b, `,"sid":`, h.Session, true)
	b = appendJSONField(b, `,"kd":`, h.Kind, true)
	b = appendJSONField(b, `,"n":`, h.Note, true)
	return append(b, '}')
}

// appendJSONField appends name and v, unless omitEmpty and v is "".
func appendJSONField(b []byte, name, v string, omitEmpty bool) []byte {
	if omitEmpty && v == "" {
		return b
	}
	return appendJSONString(append(b, name...), v)
}

// appendJSONString appends s as encoding/json writes it: as it is between
// quotes when it is printable ASCII that json escapes nothing of (the
// common case: ids, URLs, kinds), else as json.Marshal writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string: never fails
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// entryKnown is entryTail up to its keep-until: what a step's caller may
// know of an entry before the step.
type entryKnown struct {
	Op       string `json:"o"`
	Revision string `json:"v"`
	Summary  string `json:"s"`
	Expires  string `json:"x"`
	Digest   string `json:"d"`
	Terms    string `json:"t"`
	Approval string `json:"a"`
	Used     string `json:"u"`
}

// tailOf is an entry's tail (entryTail) composed by the caller, where it
// costs Redis nothing (no cjson.encode in the step): what the caller
// knows, then the keep-until, last, so that a step that keeps the log
// longer can put its own there (lib.lua log_known).
func tailOf(t entryKnown, keep time.Time) string {
	b := make([]byte, 0, 64+len(t.Op)+len(t.Revision)+len(t.Summary)+len(t.Expires)+len(t.Digest)+len(t.Terms)+len(t.Approval)+len(t.Used))
	b = t.appendJSON(b)
	b = append(b[:len(b)-1], `,"k":"`...)
	return string(append(strconv.AppendInt(b, keep.UnixNano(), 10), `"}`...))
}

// appendJSON appends json.Marshal(t), byte for byte, without reflection.
func (t entryKnown) appendJSON(b []byte) []byte {
	b = appendJSONField(b, `{"o":`, t.Op, false)
	b = appendJSONField(b, `,"v":`, t.Revision, false)
	b = appendJSONField(b, `,"s":`, t.Summary, false)
	b = appendJSONField(b, `,"x":`, t.Expires, false)
	b = appendJSONField(b, `,"d":`, t.Digest, false)
	b = appendJSONField(b, `,"t":`, t.Terms, false)
	b = appendJSONField(b, `,"a":`, t.Approval, false)
	b = appendJSONField(b, `,"u":`, t.Used, false)
	return append(b, '}')
}

// termsDigest is store.Entry.TermsDigest of canonical terms.
func termsDigest(terms []byte) string {
	sum := sha256.Sum256(terms)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// decodeEntry reads a stored entry; ok is false for a malformed one.
func decodeEntry(v string) (e store.Entry, keep time.Time, ok bool) {
	headJSON, tailJSON, found := strings.Cut(v, "\n")
	var h entryHead
	var t entryTail
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
// batch with one pipelined LRANGE per log: O(keys) in total, in short
// steps, none holding Redis longer than a small command does. An
// operation's entries are in one list, read in one command.
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
		match := globEscape(s.prefix) + "{*}:log:" + id
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

// readLogs reads the logs named by keys and returns their entries in
// [from, to) of those not forgotten by to.
func readLogs(ctx context.Context, node redis.Cmdable, keys []string, from, to time.Time) ([]store.Entry, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := node.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.LRange(ctx, k, 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, err
	}
	var out []store.Entry
	for _, c := range cmds {
		var log []store.Entry
		var keep time.Time
		for _, v := range c.Val() {
			e, k, ok := decodeEntry(v)
			if !ok {
				continue
			}
			keep = later(keep, k)
			if !e.At.Before(from) && e.At.Before(to) {
				log = append(log, e)
			}
		}
		if !to.After(keep) { // forgotten past its keep-until, swept or not
			out = append(out, log...)
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
