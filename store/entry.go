package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/opsgate/opsgate/internal/storekit"
)

// Entry is the audit record of one store step that committed (§6, §8.1):
// who approved what and how, who declined it and why, when the browser's
// request claimed it, how it ended, and who settled an outcome nobody
// reported. A store writes it in the same atomic step as the change it
// records (one critical section in memory, one Lua script in the
// operation's Cluster slot on Redis), so an entry exists if and only if
// its step committed, and a web server that dies right after a step loses
// none. Read them with Store.Entries; push them to a database or a log
// of the site's own with package store/audit.
//
// It never carries a Session JWT, an access token, a cookie or a claim's
// token: the terms are kept as their digest.
type Entry struct {
	// ID is unique to this entry: the idempotency key of a push.
	ID string
	// What happened, in the protocol's words: "approval recorded",
	// "approval declined", "claimed", "released" (a claim undone before
	// the action started, W144), "performed", "not performed", "outcome
	// unknown", "resolved as performed", "resolved as not performed".
	What string
	// At is the step's time (the caller's clock); Instance the web server
	// that made it (WithEntry, else its host name).
	At       time.Time
	Instance string
	// Owner is whom the operation belongs to: the agent's client_id, the
	// pairwise User ID and the account ("" when signed out).
	Owner
	// Session is the sid of the Session the step was made for ("" for
	// Resolve). Kind is the action's kind (webkit.Action.Kind) on the
	// steps of the Gate (claimed, released, performed, not performed,
	// outcome unknown); "" on the endpoint's, which see only a ref.
	Session, Kind string
	// Operation is the revision the step was about: operation_id,
	// revision, summary and expires_at. Its Terms are left out;
	// TermsDigest is the SHA-256 of the canonical terms, base64url.
	Operation   Operation
	TermsDigest string
	// Approval is the approval the step recorded, declined or used up,
	// with approver, approved_at, input_type and reference exactly as the
	// Personal Agent sent them (§6).
	Approval Approval
	// Reason is why the site declined the approval
	// (RecordOptions.Decline); By is who resolved the outcome, as the site
	// says (WithEntry).
	Reason, By string
}

type entryKey struct{}

// WithEntry returns ctx carrying what a step's Entry says that the store
// can't know: Session (the sid), Kind, By and Instance; its other fields
// are ignored. The Gate and the endpoint set Session and Kind; a site sets
// By before Resolve, naming whoever settles the outcome:
//
//	ctx = store.WithEntry(ctx, store.Entry{By: "staff:alice"})
//	err := st.Resolve(ctx, owner, operationID, store.Done, time.Now())
func WithEntry(ctx context.Context, e Entry) context.Context {
	if prev, ok := ctx.Value(entryKey{}).(*Entry); ok {
		if e.Session == "" {
			e.Session = prev.Session
		}
		if e.Kind == "" {
			e.Kind = prev.Kind
		}
		if e.By == "" {
			e.By = prev.By
		}
		if e.Instance == "" {
			e.Instance = prev.Instance
		}
	}
	return &entryContext{Context: ctx, head: Entry{Session: e.Session, Kind: e.Kind, By: e.By, Instance: e.Instance}}
}

// entryContext is ctx carrying an Entry's head (WithEntry) in one
// allocation: context.WithValue would box the Entry in a second one, on
// every gated request.
type entryContext struct {
	context.Context
	head Entry
	// marker, when not "", is the marker a Take checks first
	// (storekit.WithEntryMarker).
	marker string
}

func (c *entryContext) Value(key any) any {
	switch key {
	case entryKey{}:
		return &c.head
	case storekit.MarkerKey{}:
		if c.marker != "" {
			return &c.marker
		}
	}
	return c.Context.Value(key)
}

func init() {
	storekit.WithEntryMarker = func(ctx context.Context, session, kind, marker string) context.Context {
		c := WithEntry(ctx, Entry{Session: session, Kind: kind}).(*entryContext)
		c.marker = marker
		return c
	}
}

// EntryOf returns what WithEntry put in ctx, for a store of one's own
// that writes Entries: Session, Kind, By, and Instance (the host name
// when none was set).
func EntryOf(ctx context.Context) Entry {
	var e Entry
	if head, ok := ctx.Value(entryKey{}).(*Entry); ok {
		e = *head
	}
	if e.Instance == "" {
		e.Instance = storekit.Instance()
	}
	return e
}

// newEntry is the entry of a step of the memory store (which gives it
// its ID).
func newEntry(ctx context.Context, what string, owner Owner, op Operation, ap Approval, now time.Time) Entry {
	e := EntryOf(ctx)
	e.What, e.At, e.Owner = what, now, owner
	e.TermsDigest = termsDigest(op.Terms)
	op.Terms = nil
	e.Operation, e.Approval = op, ap
	return e
}

// termsDigest is Entry.TermsDigest of canonical terms.
func termsDigest(terms []byte) string {
	sum := sha256.Sum256(terms)
	var b [43]byte // on the stack: the string is the only allocation
	base64.RawURLEncoding.Encode(b[:], sum[:])
	return string(b[:])
}
