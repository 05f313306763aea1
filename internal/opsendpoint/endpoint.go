// Package opsendpoint is the agent-facing operations endpoint of a website
// (§4 and §6 "Websites", §7): the URL listed as `endpoint` in poppy.json,
// usually /poppy/operations. The Personal Agent POSTs a ref taken from its
// browser's Poppy-Operation header to get the operation, then POSTs it
// again with Poppy-Approval to approve it, and later to look up its status.
//
// The endpoint never performs anything: it records approvals, and the Gate
// (package webkit) performs the action when the browser repeats its request.
//
// A website never imports this package: endpoint.NewMount builds the
// endpoint from the Kit and serves it. It is here for the Mount, and for the
// demo's load tools and the checker's faulty toy websites, which build an
// endpoint on its own or wrap its Authenticator.
package opsendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// MaxBodyBytes is the largest request body the endpoint reads: {"ref": …}
// with a 2048-character ref fits easily.
const MaxBodyBytes = 4 << 10

// RetryAfter is the Retry-After value (seconds) of the endpoint's 503s.
const RetryAfter = 2

// Authenticator verifies the Session header and the access token of a
// request, as an API does (§4: "The endpoint checks the Session header and
// the access token as an API does"; W70). The default is built from
// webkit/identity (see IdentityAuthenticator); a website whose identity
// provider verifies Poppy Sessions plugs in its own.
//
// Errors: wrap ErrUnauthenticated for a missing, invalid or foreign Session
// (401 invalid_session), ErrInvalidToken for a bad access token (401
// invalid_token), ErrUnavailable when it cannot tell now, e.g. the agent's
// keys cannot be fetched (503 with Retry-After, never 401).
type Authenticator interface {
	// Authenticate returns the Session the request was sent in: its sid,
	// agent and User from the Session header and, when an access token came
	// with it, the account (Extensions are not used here).
	Authenticate(ctx context.Context, r *http.Request) (webkit.Session, error)
}

// Errors an Authenticator wraps.
var (
	ErrUnauthenticated = errors.New("endpoint: invalid session")
	ErrInvalidToken    = errors.New("endpoint: invalid access token")
	ErrUnavailable     = errors.New("endpoint: verification unavailable")
)

// DeclineRequest is what the decline hook sees: the approval, the revision
// it approves, and the Session that sent it (§6 "Declining an approval").
// endpoint.DeclineRequest is the website's copy, with the same fields.
//
// The hook's Reason and Alternative go to the agent as they are, so they
// must carry nothing the Session couldn't already see (W130): say what the
// User can do instead in words that hold for any Session ("Only the
// account holder can cancel the subscription."), never the rule or score
// that decided it, nor another account's or User's data. Give no reason
// code (W131): none is sent.
type DeclineRequest struct {
	Operation store.Operation
	Approval  store.Approval
	Session   webkit.Session
}

// Endpoint is the operations endpoint, an http.Handler. Built by New, it
// reads its store, clock, logger and observer from the Kit on every
// request, as the Gate does, so that a Kit changed after the endpoint was
// built never leaves the two apart; a field set here overrides the Kit's
// (tests, the demo's load tools).
type Endpoint struct {
	Store storedriver.Store
	Auth  Authenticator
	// Decline, when set, is asked once checks 1–3 pass whether the website
	// declines the approval (§6, W123). It returns nil to accept it. It
	// must put nothing in Reason that the Session couldn't already see
	// (W130), and Reason is short plain language for the User (W128). A
	// declined approval is never recorded (W134). On a website this is the
	// only place an approval is declined, never at the browser's request
	// (W132).
	Decline func(ctx context.Context, d DeclineRequest) *webkit.Decline
	Clock   func() time.Time
	Logger  *slog.Logger
	// Observer sees each answer (webkit.Event, route "endpoint").
	Observer webkit.Observer
	// Explain sends, beside each refusal's error, why in words
	// (error_description), as the Kit's ExplainRefusals does.
	Explain bool

	kit    *webkit.Kit // New's: read live where a field above is unset
	kitRun storewrap.Cached
}

// New returns the endpoint of kit: its store (each call with the kit's
// StoreTimeout, so a stalled store gets a 503 in bounded time, and seen
// by its Observer), clock, logger and observer, read from the Kit's
// fields on every request.
func New(kit *webkit.Kit, auth Authenticator) *Endpoint {
	return &Endpoint{Auth: auth, kit: kit}
}

// explaining reports whether refusals say why (Explain, or the Kit's
// ExplainRefusals now).
func (e *Endpoint) explaining() bool {
	return e.Explain || e.kit != nil && e.kit.ExplainRefusals
}

// why is err's reason for the agent when the endpoint explains its
// refusals, else "".
func (e *Endpoint) why(err error) string {
	if !e.explaining() {
		return ""
	}
	return explain.Reason(err)
}

// store is the store the endpoint calls: Store, or the Kit's now.
func (e *Endpoint) store() storedriver.Store {
	if e.Store != nil || e.kit == nil {
		return e.Store
	}
	return KitStore(e.kit, &e.kitRun)
}

// KitStore is kit's Store as the Gate calls it now: each call with the
// Kit's StoreTimeout (one second when unset) and seen by its Observer,
// read from the Kit's fields at each call, so that the endpoint, the
// join's replay check and the Gate never use two stores (issue 34: one
// Kit). c keeps the wrapped store while those fields stay the same.
func KitStore(kit *webkit.Kit, c *storewrap.Cached) storedriver.Store {
	var o storewrap.StepObserver
	if kit.Observer != nil {
		o = kit.Observer
	}
	d, _ := storedriver.Of(kit.Store) // Kit.Check refused any other
	return c.Wrap(d, kit.StoreTimeout, o)
}

// observer is Observer, or the Kit's now.
func (e *Endpoint) observer() webkit.Observer {
	if e.Observer != nil || e.kit == nil {
		return e.Observer
	}
	return e.kit.Observer
}

// ServeHTTP answers one request, in the order of checks the spec gives:
// method, version, extension, body, Session and access token, then checks
// 1–3 of §6 (through the store, atomically).
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The endpoint's span, when the Observer traces: the Event labels it;
	// the Session's verification (with the identity fetches), the store
	// steps and the website's Decline are its children.
	obs := e.observer()
	r, sp := spans.Begin(r, obs, "opsgate.endpoint", spans.Labels{Route: "endpoint"})
	defer sp.End(spans.Labels{}, nil) // after the Event, deferred next
	if obs != nil {
		ow := &observedWriter{ResponseWriter: w}
		defer func() { obs.Observe(r.Context(), ow.event()) }()
		w = ow
	}
	if r.Method != http.MethodPost { // W69
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "invalid_request", "the operations endpoint takes POST only")
		return
	}
	if err := checkVersion(r.Header.Values(headers.Version)); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	// W14: a request that doesn't declare operations v3 gets no operation.
	if !declaresOperations(r.Header.Values(headers.Extensions)) {
		note(w, "extension_required", "")
		body := map[string]string{"error": "extension_required", "extension": "operations"}
		if e.explaining() {
			body["error_description"] = extensionsWhy(r.Header.Values(headers.Extensions))
		}
		writeJSON(w, http.StatusForbidden, body)
		return
	}
	ref, err := readRef(w, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	session, replay, err := e.authenticate(r) // W70
	switch {
	case errors.Is(err, ErrUnavailable):
		e.log().Warn("opsgate endpoint: cannot verify the Session now", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		writeError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the Session cannot be verified now; try again")
		return
	case errors.Is(err, ErrInvalidToken):
		note(w, "unauthenticated", "token")
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		why := "the access token is not valid for this Session"
		if e.explaining() {
			why = e.why(err)
		}
		writeError(w, http.StatusUnauthorized, "invalid_token", why)
		return
	case err != nil:
		writeInvalidSession(w, e.why(err))
		return
	}
	owner := session.Owner()
	if replay.Key != "" {
		replay.Key = storekit.OnceKey(owner.Agent, owner.User, replay.Key)
	}

	if _, rev, ok := storekit.SplitRef(ref); ok && storekit.RevisionVia(rev) != "" {
		// W88: a ref whose revision an API or MCP server returned goes to
		// no one, and this endpoint never issued it: as a made-up ref,
		// with nothing recorded.
		if !e.useReplay(w, r.Context(), replay) {
			return
		}
		note(w, "not_found", "")
		writeInvalidRequest(w, e.refWhy(ref, owner, nil, e.now()))
		return
	}
	values := r.Header.Values(headers.Approval)
	approval, ignored, err := headers.ParseApprovalReport(values)
	if len(values) == 0 || err != nil {
		// A lookup, or a malformed approval: the token is used up first,
		// in a step of its own (an approval's is used up with its record).
		if !e.useReplay(w, r.Context(), replay) {
			return
		}
	}
	if len(values) == 0 {
		e.lookup(w, r.Context(), session, ref)
		return
	}
	if err != nil { // W78, W84: nothing recorded
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	for _, m := range ignored { // W82, W83: treated as absent, never refused
		e.log().Info("opsgate endpoint: ignored a malformed optional member of Poppy-Approval", "member", m.Member, "reason", m.Err.Error())
	}
	e.approve(w, r.Context(), session, ref, approval, replay)
}

// declaresOperations reports whether a request's Poppy-Extensions lines
// declare operations v3 (W14). The verdict on the last single line seen is
// kept: an agent sends the same line on every request, and parsing it as
// a Structured Field List costs a dozen allocations.
func declaresOperations(values []string) bool {
	if len(values) == 1 {
		if last := lastExtensions.Load(); last != nil && last.line == values[0] {
			return last.declares
		}
	}
	ext, err := headers.ParseExtensions(values)
	declares := err == nil && headers.DeclaresOperations(ext)
	if len(values) == 1 {
		lastExtensions.Store(&extensionsVerdict{values[0], declares})
	}
	return declares
}

// extensionsVerdict is one Poppy-Extensions line and whether it declares
// operations v3.
type extensionsVerdict struct {
	line     string
	declares bool
}

var lastExtensions atomic.Pointer[extensionsVerdict]

// Replay is a request's single-use key (a Session JWT's jti) that its
// Authenticator left for the endpoint to use up, until Until.
type Replay struct {
	Key   string
	Until time.Time
}

// DeferredAuthenticator is an Authenticator that can leave the request's
// single-use key to the endpoint, which uses it up in the same store step
// as the approval it records (storedriver.RecordOptions.Once), or on its own
// before a lookup: the approval request then costs one store round trip,
// and a replay is still refused before anything is recorded.
// IdentityAuthenticator is one.
type DeferredAuthenticator interface {
	Authenticator
	// AuthenticateDeferred is Authenticate without using up the request's
	// single-use key, which it returns instead.
	AuthenticateDeferred(ctx context.Context, r *http.Request) (webkit.Session, Replay, error)
}

func (e *Endpoint) authenticate(r *http.Request) (s webkit.Session, replay Replay, err error) {
	ctx, sp := spans.Start(r.Context(), "opsgate.endpoint.authenticate", spans.Labels{Route: "endpoint"})
	defer func() { sp.End(spans.Labels{}, err) }()
	if d, ok := e.Auth.(DeferredAuthenticator); ok {
		return d.AuthenticateDeferred(ctx, r)
	}
	s, err = e.Auth.Authenticate(ctx, r)
	return s, Replay{}, err
}

// useReplay uses up the request's single-use key on its own; false when the
// request was answered (a replay, or the store down).
func (e *Endpoint) useReplay(w http.ResponseWriter, ctx context.Context, replay Replay) bool {
	if replay.Key == "" {
		return true
	}
	first, err := e.store().UseOnce(ctx, replay.Key, replay.Until, e.now())
	switch {
	case errors.Is(err, storedriver.ErrRateLimited): // the store's overall cap of single-use markers
		note(w, "rate_limited", "overall")
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many requests; try again later")
		return false
	case err != nil:
		e.storeDown(w, err)
		return false
	case !first:
		note(w, "unauthenticated", "replay")
		writeInvalidSession(w, e.replayWhy()) // the token was used before
		return false
	}
	return true
}

// lookup answers a ref without an approval (§4, §6 "Looking up an approved
// operation").
func (e *Endpoint) lookup(w http.ResponseWriter, ctx context.Context, session webkit.Session, ref string) {
	owner := session.Owner()
	now := e.now()
	rec, found, err := e.store().Lookup(ctx, owner, ref, now)
	if err != nil {
		e.storeDown(w, err)
		return
	}
	if !found { // W74, W76
		note(w, "not_found", "")
		writeInvalidRequest(w, e.refWhy(ref, owner, nil, now))
		return
	}
	if rec.Owner.Account != owner.Account { // §3
		if rec.Owner.Account != "" && owner.Account == "" {
			writeChallenge(w, e.explaining()) // W44, W73
			return
		}
		note(w, "not_found", "")
		writeInvalidRequest(w, e.refWhy(ref, owner, &rec, now)) // W77
		return
	}
	switch rec.Status {
	case storedriver.StatusApproved:
		// The ref of newer terms than the approved ones (§3 "New terms"):
		// its revision needs an approval of its own, so the agent gets it
		// (W72, W34) rather than the status of an older revision's approval.
		if newerTermsThanApproved(rec, ref, e.now()) {
			writeApprovalRequired(w, rec.Current, "")
			return
		}
		writeStatus(w, rec.Current.ID, rec.Status) // W105, W106
	case storedriver.StatusPerforming, storedriver.StatusPerformed: // W107–W109
		writeStatus(w, rec.Current.ID, rec.Status)
	default:
		if rec.Expired { // W75
			note(w, "not_found", "")
			writeInvalidRequest(w, e.refWhy(ref, owner, &rec, now))
			return
		}
		writeApprovalRequired(w, rec.Current, e.staleWhy(ref, rec.Current)) // W72
	}
}

// newerTermsThanApproved reports whether ref names the operation's current
// revision, unexpired, and no approval was ever recorded for that revision.
func newerTermsThanApproved(rec storedriver.Found, ref string, now time.Time) bool {
	_, rev, _ := storekit.SplitRef(ref) // a sealed ref's revision is its middle part
	if rev != rec.Current.Revision || now.After(rec.Current.ExpiresAt) {
		return false
	}
	for _, a := range rec.Approvals {
		if a.Revision == rev {
			return false
		}
	}
	return true
}

// approve makes checks 1–3 and records the approval (§6 "What the Company
// checks"): the store answers as the first failing check says (W111). a is
// the approval as headers.ParseApproval read it, the record the store keeps
// (input_type already dropped with agent, W80; W81).
func (e *Endpoint) approve(w http.ResponseWriter, ctx context.Context, session webkit.Session, ref string, a store.Approval, replay Replay) {
	owner := session.Owner()
	now := e.now()
	// The store's audit entry of the approval or its decline names the
	// Session (§8.1).
	ctx = storedriver.WithEntry(ctx, store.Entry{Session: session.ID})
	// The request's single-use key is used up by the first Record, before
	// its checks: a replay records nothing.
	once := storedriver.RecordOptions{Once: replay.Key, OnceUntil: replay.Until}
	if storekit.RevisionVia(a.Revision) != "" {
		e.approveForeign(w, ctx, session, ref, a, once)
		return
	}
	if e.Decline != nil {
		// W124: the website declines only once checks 1–3 pass.
		checks := once
		checks.CheckOnly = true
		once = storedriver.RecordOptions{}
		reply, err := e.store().Record(ctx, owner, ref, a, now, checks)
		if err != nil {
			e.storeDown(w, err)
			return
		}
		if reply.Result == storedriver.Recorded {
			dctx, sp := spans.Start(ctx, "opsgate.endpoint.decline", spans.Labels{Route: "endpoint"})
			d := e.Decline(dctx, DeclineRequest{Operation: reply.Operation, Approval: a, Session: session})
			sp.End(spans.Labels{Outcome: declineOutcome(d)}, nil)
			if d != nil {
				e.decline(w, ctx, session, ref, a, d)
				return
			}
		} else {
			e.answer(w, ctx, session, ref, a, reply)
			return
		}
	}
	reply, err := e.store().Record(ctx, owner, ref, a, now, once)
	if err != nil {
		e.storeDown(w, err)
		return
	}
	e.answer(w, ctx, session, ref, a, reply)
}

// approveForeign answers an approval, sent to the endpoint, of a revision
// that an API or MCP server returned: never recorded here (§6
// "Websites"; W88). Checks 1 and 2 come first, in a step that records
// nothing (W111); when they pass, check 3 fails, and the answer is the
// ref's own operation, with the website's revision (W100, W122).
func (e *Endpoint) approveForeign(w http.ResponseWriter, ctx context.Context, session webkit.Session, ref string, a store.Approval, once storedriver.RecordOptions) {
	owner := session.Owner()
	now := e.now()
	once.CheckOnly = true
	reply, err := e.store().Record(ctx, owner, ref, a, now, once)
	if err != nil {
		e.storeDown(w, err)
		return
	}
	if reply.Result == storedriver.Recorded || reply.Result == storedriver.AlreadyRecorded {
		rec, found, err := e.store().Lookup(ctx, owner, ref, now)
		switch {
		case err != nil:
			e.storeDown(w, err)
			return
		case !found || rec.Expired:
			reply = storedriver.RecordReply{Result: storedriver.NotFound}
		default:
			reply = storedriver.RecordReply{Result: storedriver.RevisionMismatch, Operation: rec.Current}
		}
	}
	e.answer(w, ctx, session, ref, a, reply)
}

// declineOutcome labels the span of the website's Decline.
func declineOutcome(d *webkit.Decline) string {
	if d != nil {
		return "declined"
	}
	return "accepted"
}

// decline records the website's decline of approval a, in a store step
// of its own (its audit entry, with its reason, §6, §8.1), and answers it:
// approval_declined, recording no approval (W125, W126, W134). When the
// checks no longer pass (the operation changed since), the answer is
// theirs.
func (e *Endpoint) decline(w http.ResponseWriter, ctx context.Context, session webkit.Session, ref string, a store.Approval, d *webkit.Decline) {
	owner := session.Owner()
	reason := d.Reason
	if reason == "" {
		reason = "(no reason given)"
	}
	reply, err := e.store().Record(ctx, owner, ref, a, e.now(), storedriver.RecordOptions{Decline: reason})
	if err != nil {
		e.storeDown(w, err)
		return
	}
	if reply.Result != storedriver.Recorded {
		e.answer(w, ctx, session, ref, a, reply)
		return
	}
	note(w, "declined", "")
	writeDecline(w, a, d)
}

// refOperationID is the operation_id of a ref the store found.
func refOperationID(ref string) string {
	id, _ := storekit.ParseRef(ref)
	return id
}

func (e *Endpoint) answer(w http.ResponseWriter, ctx context.Context, session webkit.Session, ref string, a store.Approval, reply storedriver.RecordReply) {
	switch reply.Result { // for the Observer: which check of §6 failed
	case storedriver.BeingPerformed, storedriver.AlreadyPerformed:
		note(w, "refused", "check2")
	case storedriver.RevisionMismatch, storedriver.OperationExpired:
		note(w, "refused", "check3")
	case storedriver.NotFound:
		note(w, "refused", "check1")
	}
	switch reply.Result {
	case storedriver.Replayed: // the Session JWT was used before: nothing recorded
		note(w, "unauthenticated", "replay")
		writeInvalidSession(w, e.replayWhy())
	case storedriver.Recorded, storedriver.AlreadyRecorded: // W90, W91; §7 the same answer again
		w.WriteHeader(http.StatusNoContent)
	case storedriver.SignInRequired: // W44 (check 1)
		writeChallenge(w, e.explaining())
	// Check 2 is about the ref's operation (§6 "at endpoint, the reference is
	// the operation's"): its answer names that operation, whatever the
	// approval names (W113).
	case storedriver.BeingPerformed: // W113, W143
		writeStatus(w, refOperationID(ref), storedriver.StatusPerforming)
	case storedriver.AlreadyPerformed: // W113, W136
		writeStatus(w, refOperationID(ref), storedriver.StatusPerformed)
	case storedriver.RevisionMismatch: // W100
		if reply.Operation.Revision == a.Revision { // W122: never answer with the revision it names
			e.log().Error("opsgate endpoint: store answered a check-3 failure with the approval's own revision", "operation_id", a.OperationID)
			writeInvalidRequest(w, "")
			return
		}
		writeApprovalRequired(w, reply.Operation, e.check3Why(a, reply.Operation))
	case storedriver.OperationExpired: // W101
		writeInvalidRequest(w, e.recordWhy(ctx, session, ref, a, reply))
	case storedriver.RateLimited: // a cap: the operation's approvals, the open operations (the owner's, the agent's, overall), the single-use markers (webkit/RULES.md "Bounded work")
		note(w, "rate_limited", "")
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many approvals or operations waiting; try again later")
	default: // storedriver.NotFound: check 1 (W112, W77); also any operation this website's store never issued, such as another interface's (W88)
		writeInvalidRequest(w, e.recordWhy(ctx, session, ref, a, reply))
	}
}

func (e *Endpoint) storeDown(w http.ResponseWriter, err error) {
	note(w, "unavailable", "store")
	e.log().Error("opsgate endpoint: store unavailable", "err", err)
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
	writeError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "try again shortly")
}

func (e *Endpoint) now() time.Time {
	switch {
	case e.Clock != nil:
		return e.Clock()
	case e.kit != nil && e.kit.Clock != nil:
		return e.kit.Clock()
	}
	return time.Now()
}

func (e *Endpoint) log() *slog.Logger {
	switch {
	case e.Logger != nil:
		return e.Logger
	case e.kit != nil && e.kit.Logger != nil:
		return e.kit.Logger
	}
	return slog.Default()
}

// checkVersion accepts Poppy-Version major 1 (webkit/RULES.md choice 4).
func checkVersion(values []string) error {
	if len(values) != 1 {
		return errors.New("Poppy-Version: exactly one value of major version 1 is required, such as 1.0")
	}
	v := strings.TrimSpace(values[0])
	major, _, _ := strings.Cut(v, ".")
	if major != "1" {
		return fmt.Errorf("Poppy-Version: %.20q is not supported; this endpoint speaks 1.x", v)
	}
	return nil
}

// readRef reads the body {"ref": "…"} strictly: a JSON object of at most
// MaxBodyBytes with exactly one "ref" member that is a valid ref (W59, W74).
// Other members are ignored; a duplicated "ref" is invalid.
func readRef(w http.ResponseWriter, r *http.Request) (string, error) {
	// "application/json", the value agents send, is what it would parse to.
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/json" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return "", errors.New("body: Content-Type must be application/json")
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return "", fmt.Errorf("body: larger than %d bytes or unreadable", MaxBodyBytes)
	}
	ref, err := parseRefBody(body)
	if err != nil {
		return "", err
	}
	if !storekit.ValidRef(ref) {
		return "", errors.New(`body: "ref" must be 1 to 2048 characters from A-Z, a-z, 0-9, "-", "_" and "."`)
	}
	return ref, nil
}

func parseRefBody(body []byte) (string, error) {
	// The body agents send, {"ref":"<ref>"} without white space: a ref has
	// no character JSON escapes, so the bytes between the quotes are the
	// ref, as decodeRefBody would read it. Any other body, or one whose
	// ref is not valid, is read by decodeRefBody.
	const open, end = `{"ref":"`, `"}`
	if len(body) > len(open)+len(end) && bytes.HasPrefix(body, []byte(open)) && bytes.HasSuffix(body, []byte(end)) {
		if ref := string(body[len(open) : len(body)-len(end)]); storekit.ValidRef(ref) {
			return ref, nil
		}
	}
	return decodeRefBody(body)
}

// decodeRefBody is parseRefBody for any body.
func decodeRefBody(body []byte) (string, error) {
	if !json.Valid(body) {
		return "", errors.New(`body: not JSON; send {"ref": "…"}`)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, _ := dec.Token(); t != json.Delim('{') {
		return "", errors.New(`body: must be a JSON object {"ref": "…"}`)
	}
	var ref string
	seen := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("body: %w", err)
		}
		name, _ := t.(string)
		if name != "ref" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", fmt.Errorf("body: %w", err)
			}
			continue
		}
		if seen {
			return "", errors.New(`body: member "ref" appears twice`)
		}
		seen = true
		if err := dec.Decode(&ref); err != nil {
			return "", errors.New(`body: member "ref" must be a string`)
		}
	}
	if !seen {
		return "", errors.New(`body: member "ref" is missing`)
	}
	return ref, nil
}

// writeApprovalRequired answers 403 approval_required with the operation.
func writeApprovalRequired(w http.ResponseWriter, op store.Operation, why string) {
	// W47, W48; W49: no WWW-Authenticate; W51: no other members but the
	// reason of a website that explains (Kit.ExplainRefusals).
	writeJSON(w, http.StatusForbidden, struct {
		Error     string          `json:"error"`
		Operation store.Operation `json:"operation"`
		Why       string          `json:"error_description,omitempty"`
	}{"approval_required", op, why})
}

func writeStatus(w http.ResponseWriter, operationID string, s storedriver.Status) {
	writeJSON(w, http.StatusOK, map[string]string{"operation_id": operationID, "status": string(s)})
}

func writeDecline(w http.ResponseWriter, a store.Approval, d *webkit.Decline) {
	// W127: the approval's operation_id and revision, whatever the hook set.
	d.OperationID, d.Revision = a.OperationID, a.Revision
	writeJSON(w, http.StatusForbidden, struct { // W133
		Error string `json:"error"`
		*webkit.Decline
	}{"approval_declined", d})
}

// writeInvalidSession answers a missing, invalid, ended or foreign Session.
// Every 401 carries a challenge (RFC 9110 §15.5.2), so the kit names the
// Poppy-Session scheme with the same error code.
func writeInvalidSession(w http.ResponseWriter, why string) {
	w.Header().Set("WWW-Authenticate", `Poppy-Session error="invalid_session"`)
	writeCode(w, http.StatusUnauthorized, "invalid_session", why)
}

// writeChallenge is the sign-in challenge (webkit/RULES.md choice 5).
func writeChallenge(w http.ResponseWriter, explaining bool) {
	note(w, "challenge", "")
	w.Header().Set("WWW-Authenticate", `Bearer error="sign_in_required"`)
	why := ""
	if explaining {
		why = "the operation belongs to an account, and this Session is signed out: send its request with the access token of that account (Authorization: Bearer, and ath in the Session JWT) (§3)"
	}
	writeCode(w, http.StatusUnauthorized, "sign_in_required", why)
}

// writeInvalidRequest answers 400 invalid_request, with why when the
// endpoint explains.
func writeInvalidRequest(w http.ResponseWriter, why string) {
	writeCode(w, http.StatusBadRequest, "invalid_request", why)
}

// writeCode answers {"error": code}, and its error_description when why
// is not "" (a website that explains its refusals).
func writeCode(w http.ResponseWriter, status int, code, why string) {
	if why == "" {
		writeJSON(w, status, map[string]string{"error": code})
		return
	}
	writeError(w, status, code, why)
}

func writeError(w http.ResponseWriter, status int, code, description string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

// writeJSON answers the agent: never cached, written as the kit's pages
// write JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	respond.WriteJSON(w, status, v)
}
