package storedriver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"

	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

type entryKey struct{}

// WithEntry returns ctx carrying what a step's store.Entry says that the
// store can't know: Session (the sid), Kind, By and Instance; its other
// fields are ignored. The Gate and the endpoint set Session and Kind; a
// store's public Resolve sets By.
func WithEntry(ctx context.Context, e store.Entry) context.Context {
	if prev, ok := ctx.Value(entryKey{}).(*store.Entry); ok {
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
	return &entryContext{Context: ctx, head: store.Entry{Session: e.Session, Kind: e.Kind, By: e.By, Instance: e.Instance}}
}

// entryContext is ctx carrying an Entry's head (WithEntry) in one
// allocation: context.WithValue would box the Entry in a second one, on
// every gated request.
type entryContext struct {
	context.Context
	head store.Entry
	// marker, when not "", is the marker a Take checks first
	// (WithEntryMarker).
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

// WithEntryMarker is WithEntry(ctx, {Session: session, Kind: kind}), also
// carrying the marker a Take checks first (storekit.MarkerKey): the Gate's
// one context for a gated request, in one allocation.
func WithEntryMarker(ctx context.Context, session, kind, marker string) context.Context {
	c := WithEntry(ctx, store.Entry{Session: session, Kind: kind}).(*entryContext)
	c.marker = marker
	return c
}

// EntryOf returns what WithEntry put in ctx, for a store writing an
// entry: Session, Kind, By, and Instance (the host name
// when none was set).
func EntryOf(ctx context.Context) store.Entry {
	var e store.Entry
	if head, ok := ctx.Value(entryKey{}).(*store.Entry); ok {
		e = *head
	}
	if e.Instance == "" {
		e.Instance = storekit.Instance()
	}
	return e
}

// TermsDigest is store.Entry.TermsDigest of canonical terms.
func TermsDigest(terms []byte) string {
	sum := sha256.Sum256(terms)
	var b [43]byte // on the stack: the string is the only allocation
	base64.RawURLEncoding.Encode(b[:], sum[:])
	return string(b[:])
}

type answerKey struct{}

// WithAnswer returns ctx carrying the answer a Finish with
// store.OutcomePerformed keeps with the operation, for as long as it is
// remembered: an API's response or an MCP tool's result, which a retry
// with the same approval gets again (§7: "gets the response the Company
// gave the first time"; P90, M90). A store keeps at most
// storekit.MaxAnswer bytes of it, and none when it is longer; Record
// returns it with AlreadyPerformed (RecordReply.Answer).
func WithAnswer(ctx context.Context, answer []byte) context.Context {
	return context.WithValue(ctx, answerKey{}, answer)
}

// AnswerOf returns what WithAnswer put in ctx, for a store's Finish: nil
// for none, or one longer than storekit.MaxAnswer.
func AnswerOf(ctx context.Context) []byte {
	a, _ := ctx.Value(answerKey{}).([]byte)
	if len(a) > storekit.MaxAnswer {
		return nil
	}
	return a
}
