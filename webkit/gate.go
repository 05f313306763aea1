package webkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/opsgate/opsgate/internal/apigate"
	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/store"
)

// Action is what a gated request asks for, as the website describes it
// (RULES.md "The Gate").
type Action struct {
	// Key says which action this is: the same key is the same action and
	// keeps its operation_id (§3 W19, W35), such as "exchange:ord_7Hk2".
	Key string
	// Terms is everything that affects the action (§3 W30), marshalled to
	// a JSON object: a struct, a map, json.RawMessage or []byte of JSON.
	// Requests that mean the same must give equal terms (W118).
	Terms any
	// Summary is the terms in plain language for the User (§3 W28).
	Summary string
	// Lifetime is how long a new revision may be approved; 0 is
	// 10 minutes (W39).
	Lifetime time.Duration
	// Kind names the kind of action, such as "exchange", for the Observer's
	// metrics: a small fixed set the website chooses, never an ID. ""
	// is "other".
	Kind string
}

// kind is a's label for the Observer: never the key, which holds IDs.
func (a Action) kind() string {
	if a.Kind == "" {
		return "other"
	}
	return a.Kind
}

// Describe reads a request and returns the action it asks for. It returns
// ErrNotGated for a request that needs no approval (it then passes
// through), and any other error for a request it can't read: 400
// {"error":"invalid_request","detail":<the error's text>}, so word it for
// the client. It may
// read the body (r.ParseForm, r.FormValue): the Gate restores it for the
// handler. It must not have effects.
type Describe func(r *http.Request) (Action, error)

// ErrNotGated is what Describe returns for a request that is not gated,
// such as an action the website wants the User to confirm on its own pages
// instead (§8.1 W147).
var ErrNotGated = errors.New("webkit: request not gated")

// Gate returns middleware that asks for approval before the handler performs
// an action (§4 "Websites", §6 "Websites", §7):
//
//   - A request from a browser not joined to a Session goes straight to
//     the handler, whatever its method (W07).
//   - describe says which action the request asks for; ErrNotGated passes
//     it through.
//   - A browser whose join cookie this server can't accept (expired,
//     made with other keys) is not an ordinary one: its gated request gets
//     ErrJoinInvalid (403, join again), never the handler.
//   - A browser with a login of the website's own (Kit.OwnLogin) gets the
//     website's own approval flow (W56): ErrOwnLogin, unless
//     Kit.OwnFlowInHandler says the handler is that flow.
//   - A Session that did not declare operations v3 gets extension_required
//     (W11); a website with its own approval flow serves it from Kit.Refused
//     when FailureReason is ErrExtensionRequired (W12).
//   - Otherwise one store.Take: the first-recorded matching approval is
//     used up and the handler runs once, its status deciding the outcome
//     (W94–W97); or, with none, the operation is issued and the answer is
//     403 with Poppy-Operation (W52, W53, W99).
//
// decide makes each of these decisions; serveSession carries them out.
// Every refusal (approval required, extension required, store down, busy,
// outcome unknown, rate limited) is answered by Kit.Refused, whose default
// is Kit.Refuse.
//
// A gated route still needs CSRF protection of its own (such as
// net/http.CrossOriginProtection); the Gate does not provide it.
func (k *Kit) Gate(describe Describe) func(http.Handler) http.Handler {
	if describe == nil {
		panic("webkit: Gate: describe is nil")
	}
	k.mustCheck() // a Kit that can't work: stop the website while it is wired
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// The Gate's span, when the Observer traces: its outcome is the
			// Event the Gate observes; the store steps and the handler are
			// its children.
			r, sp := spans.Begin(r, k.Observer, "opsgate.gate", spans.Labels{Route: routeGate})
			defer sp.End(spans.Labels{}, nil)
			if apigate.IsCall(r) { // an API call: its own Session, never a cookie's (api.go)
				k.serveAPI(w, r, describe, next)
				return
			}
			s, unbound, st := k.bindingOf(r)
			switch {
			case st == bindNone: // an ordinary browser: no store, no body read (W07)
				k.observe(r.Context(), Event{Route: routeGate, Outcome: "passed", Reason: "not_joined"})
				next.ServeHTTP(w, r)
				return
			case st == bindUnusable:
				// Joined, but its join cookie can't be accepted here
				// (expired, made with other keys, another server's clock
				// far off): never an ordinary browser on a gated route.
				k.refuseGated(w, r, describe, next, ErrJoinInvalid, "join_invalid")
				return
			case k.OwnLogin != nil && k.OwnLogin(r, s): // §4 W56: the website's own approval flow
				if k.OwnFlowInHandler { // the handler is that flow, the website says
					k.observe(r.Context(), Event{Route: routeGate, Outcome: "passed", Reason: "own_login"})
					next.ServeHTTP(w, r)
					return
				}
				k.refuseGated(w, r, describe, next, ErrOwnLogin, "own_flow")
				return
			}
			k.serveSession(w, r, s, unbound, describe, next)
		})
	}
}

// refuseGated answers a request the Gate must not hand to the handler as
// it is, nor as the Session's (a join cookie it can't accept, or the
// website's own login, W56): when describe gates it, Kit.Refused answers
// with reason (the Observer sees outcome); a request describe does not
// gate goes to next, as any other.
func (k *Kit) refuseGated(w http.ResponseWriter, r *http.Request, describe Describe, next http.Handler, reason error, outcome string) {
	act, _, ok := k.described(w, r, describe, next)
	if !ok {
		return
	}
	k.observe(r.Context(), Event{Route: routeGate, Outcome: outcome, Kind: act.kind()})
	k.refuse(w, r, reason, nil)
}

// described reads r's body and asks describe which action r asks for. It
// answers r itself and reports false when describe does not gate it (next
// serves it) or it can't be read (400, 413); otherwise the body is
// restored for the handler, and returned for Continue.
func (k *Kit) described(w http.ResponseWriter, r *http.Request, describe Describe, next http.Handler) (Action, []byte, bool) {
	act, body, err, ok := k.describe(w, r, describe)
	if !ok {
		return Action{}, nil, false
	}
	if errors.Is(err, ErrNotGated) {
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "passed", Reason: "not_gated"})
		next.ServeHTTP(w, r)
		return Action{}, nil, false
	}
	if err != nil {
		k.describeRefused(w, r, err)
		return Action{}, nil, false
	}
	return act, body, true
}

// describeRefused answers a request describe refused with an error other
// than ErrNotGated.
func (k *Kit) describeRefused(w http.ResponseWriter, r *http.Request, err error) {
	k.logger().LogAttrs(r.Context(), slog.LevelInfo, "opsgate: describe refused the request",
		slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	k.observe(r.Context(), Event{Route: routeGate, Outcome: "invalid_request"})
	respond.BadRequest(w, err.Error())
}

// describe reads r's body (kept for the handler) and asks describe which
// action r is: its error as describe returned it. ok is false when the
// body could not be read, which is answered.
func (k *Kit) describe(w http.ResponseWriter, r *http.Request, describe Describe) (act Action, body []byte, err error, ok bool) {
	body, err = k.sentBody(r)
	if errors.Is(err, errBodySpent) {
		k.bodySpent(w, r)
		return Action{}, nil, nil, false
	}
	if err != nil {
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "invalid_request"})
		if errors.Is(err, errBodyTooLarge) {
			respond.TooLarge(w)
			return Action{}, nil, nil, false
		}
		respond.BadRequest(w, "the request body could not be read")
		return Action{}, nil, nil, false
	}
	restoreBody(r, body)
	act, err = describe(r)
	restoreBody(r, body) // describe may have read it: the handler reads it again
	return act, body, err, true
}

// serveSession handles a request from a browser handled as Session s (§4
// W54, W55). unbound, when not "", is the key of the marker that says
// Unbind ended the browser's binding (CookieSessions).
func (k *Kit) serveSession(w http.ResponseWriter, r *http.Request, s Session, unbound string, describe Describe, next http.Handler) {
	act, body, ok := k.described(w, r, describe, next)
	if !ok {
		return
	}
	// A copy of a join cookie that Unbind ended is no binding: the website
	// ended the Session's binding (a sign-out), so the browser is an
	// ordinary one, and an ordinary browser's request goes to the handler
	// (§4 W07). (A cookie that merely expired, or that this server can't
	// read, is refused instead: ErrJoinInvalid.) Asked only now, so that
	// a request the Gate doesn't gate costs no store read; and, when the
	// store can, by Take in its own step (storekit.MarkedInTake), so that
	// it costs no round trip of its own. When the store can't say,
	// nothing is performed: 503 (§7 W143).
	st := k.store()
	d := decide(s, nil)
	inTake := unbound != "" && d.do == doTake && storewrap.MarksInTake(st)
	if !inTake && k.endedBinding(w, r, unbound, act, next) {
		return
	}
	// The store's audit entries of this request's steps (Take, Release,
	// Finish) carry its Session's sid and the action's kind (§8.1); and
	// the context names the marker the Take checks (in the same
	// allocation).
	if inTake {
		r = r.WithContext(storedriver.WithEntryMarker(r.Context(), s.ID, act.kind(), unbound))
	} else {
		r = r.WithContext(storedriver.WithEntry(r.Context(), store.Entry{Session: s.ID, Kind: act.kind()}))
	}
	if d.do == doTake {
		sa, err := k.storeAction(act)
		if err != nil && inTake && k.endedBinding(w, r, unbound, act, next) {
			return
		}
		if err != nil {
			k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: describe returned an unusable action",
				slog.String("path", r.URL.Path), slog.String("error", err.Error()))
			k.observe(r.Context(), Event{Route: routeGate, Outcome: "invalid_request", Kind: act.kind()})
			respond.BadRequest(w, err.Error())
			return
		}
		// One round trip: take the first-recorded matching approval, or
		// issue. The claim's token is chosen first, so that whatever Take
		// claims can be released when its reply is lost or late (W144).
		sa.ClaimToken = storekit.NewToken()
		res, err := st.Take(r.Context(), s.Owner(), sa, k.now())
		if errors.Is(err, storekit.ErrMarked) { // nothing taken: no binding
			k.observe(r.Context(), Event{Route: routeGate, Outcome: "passed", Reason: "not_joined", Kind: act.kind()})
			next.ServeHTTP(w, r)
			return
		}
		d = decide(s, &taken{res: res, err: err, gone: r.Context().Err()})
		if d.release {
			k.release(r, s.Owner(), sa.ClaimToken)
		}
		if d.fault != nil {
			k.storeFailed(r, "take", d.fault)
		}
	}
	switch d.do {
	case doRefuse:
		k.observe(r.Context(), Event{Route: routeGate, Outcome: d.outcome, Reason: capReason(d.reason), Kind: act.kind()})
		k.refuse(w, r, d.reason, nil)
	case doPerform:
		k.perform(w, r, next, d.claim, act.kind())
	case doAskApproval:
		k.askApproval(w, r, s, d.issued, body, act.kind())
	}
}

// bindingOf returns the Session r's browser is joined to, as
// Kit.Sessions.SessionOf does, but leaves to unbound the check that Unbind
// did not end a CookieSessions binding: unbound is its marker's key. st
// says whether the browser is joined (bindOK), ordinary (bindNone), or
// carries a join cookie this server can't accept (bindUnusable:
// CookieSessions only).
func (k *Kit) bindingOf(r *http.Request) (s Session, unbound string, st bindState) {
	if c, ok := k.Sessions.(*CookieSessions); ok {
		b, st := c.current(r)
		return b.session, b.unbound, st
	}
	if s, joined := k.Sessions.SessionOf(r); joined {
		return s, "", bindOK
	}
	return Session{}, "", bindNone
}

// endedBinding checks, by a store step of its own, that Unbind did not
// end the browser's binding (its marker's key is unbound): when it did,
// the request is an ordinary browser's and goes to next; when the store
// can't say, 503. It reports whether it answered r.
func (k *Kit) endedBinding(w http.ResponseWriter, r *http.Request, unbound string, act Action, next http.Handler) bool {
	ended, err := k.unbound(r.Context(), unbound)
	switch {
	case err != nil:
		k.storeFailed(r, "marked", err)
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "unavailable", Kind: act.kind()})
		k.refuse(w, r, ErrStoreUnavailable, nil)
		return true
	case ended:
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "passed", Reason: "not_joined", Kind: act.kind()})
		next.ServeHTTP(w, r)
		return true
	}
	return false
}

// unbound reports whether Unbind ended the binding whose marker's key is
// key (bindingOf): one store read; none for "".
func (k *Kit) unbound(ctx context.Context, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	return storewrap.Marked(ctx, k.store(), key, k.now())
}

// capReason is an Event's Reason for a refusal: "overall" when the store's
// overall cap of open operations across agents refused it (its Observer
// then sees that cap reached), else "".
func capReason(reason error) string {
	if errors.Is(reason, storekit.ErrOverall) {
		return "overall"
	}
	return ""
}

// step is what the Gate does with a request from a Session.
type step int

const (
	doTake        step = iota + 1 // call store.Take, then decide again
	doRefuse                      // answer Kit.Refused with reason
	doPerform                     // run the handler for claim (§6 W97)
	doAskApproval                 // answer 403 with the issued ref (§4 W53)
)

// decision is the Gate's decision, which serveSession carries out.
type decision struct {
	do      step
	reason  error        // doRefuse: what FailureReason says
	outcome string       // the Observer's Event: Outcome
	release bool         // give back whatever Take may have claimed (W144)
	fault   error        // a store failure to log
	claim   *store.Claim // doPerform
	issued  *storedriver.TakeResult
}

// taken is what store.Take answered, and why the request's context
// ended, if it did, by the time Take returned.
type taken struct {
	res  storedriver.TakeResult
	err  error
	gone error
}

// decide is the Gate's decision for a request from Session s that
// describe gated: before Take (t nil), whether to take at all; after it,
// what Take's answer t means. It calls nothing, so it is tested as a
// table (TestDecide).
func decide(s Session, t *taken) decision {
	if !headers.DeclaresOperations(s.Extensions) { // §2 W11, W12: never an operation
		return decision{do: doRefuse, reason: ErrExtensionRequired, outcome: "extension_required"}
	}
	if t == nil {
		return decision{do: doTake}
	}
	res := t.res
	switch {
	case errors.Is(t.err, storedriver.ErrRateLimited): // RULES.md "Bounded work": nothing claimed
		return decision{do: doRefuse, reason: fmt.Errorf("%w: %w", ErrRateLimited, t.err), outcome: "rate_limited"}
	case t.err != nil: // Take may have claimed all the same
		return decision{do: doRefuse, reason: fmt.Errorf("%w: %w", ErrStoreUnavailable, t.err), outcome: "unavailable", release: true, fault: t.err}
	case res.Claim != nil && t.gone != nil:
		// The browser left before the handler ran: perform nothing, so
		// that its approval applies to the next repeat (W144).
		return decision{do: doRefuse, reason: fmt.Errorf("%w: %w", ErrStoreUnavailable, t.gone), outcome: "unavailable", release: true}
	case res.Claim != nil:
		return decision{do: doPerform, claim: res.Claim}
	case res.Busy: // §7 W143, W145: never as if it failed
		return decision{do: doRefuse, reason: ErrBusy, outcome: "busy"}
	case res.Ref != "":
		return decision{do: doAskApproval, issued: &t.res}
	}
	err := errors.New("store: Take returned neither claim, issued nor busy")
	return decision{do: doRefuse, reason: fmt.Errorf("%w: %w", ErrStoreUnavailable, err), outcome: "unavailable", release: true, fault: err}
}

// storeAction checks an Action and canonicalises its terms (§6 check 3
// compares meaning: W118).
func (k *Kit) storeAction(a Action) (storedriver.TakeRequest, error) {
	if a.Key == "" {
		return storedriver.TakeRequest{}, errors.New("describe: Action.Key is empty")
	}
	var raw []byte
	switch t := a.Terms.(type) {
	case nil:
		return storedriver.TakeRequest{}, errors.New("describe: Action.Terms is nil; terms must be a JSON object")
	case json.RawMessage:
		raw = t
	case []byte:
		raw = t
	default:
		b, err := termsJSON(t)
		if err != nil {
			return storedriver.TakeRequest{}, fmt.Errorf("describe: Action.Terms: %w", err)
		}
		raw = b
	}
	terms, err := storekit.CanonicalTerms(raw)
	if err != nil {
		return storedriver.TakeRequest{}, fmt.Errorf("describe: Action.Terms: %w", err)
	}
	lifetime := a.Lifetime
	if lifetime <= 0 {
		lifetime = k.lifetime()
	}
	return storedriver.TakeRequest{Key: a.Key, Terms: terms, Summary: a.Summary, Lifetime: lifetime}, nil
}

// termsJSON encodes describe's terms: the usual maps without reflection
// (storekit.AppendTerms), anything else, or a map it declines, as
// json.Marshal writes it. CanonicalTerms reads both alike.
func termsJSON(t any) ([]byte, error) {
	switch t.(type) {
	case map[string]any, map[string]string:
		if b, ok := storekit.AppendTerms(make([]byte, 0, 256), t); ok {
			return b, nil
		}
	}
	return json.Marshal(t)
}

// storeFailed logs a store failure; the Observer has seen it as a
// StoreStep with its error.
func (k *Kit) storeFailed(r *http.Request, op string, err error) {
	k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: store failed",
		slog.String("op", op), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
}

// askApproval answers 403 with the operation's ref (§4 W53): the waiting
// page or {"error":"approval_required"}, never the operation (W64).
func (k *Kit) askApproval(w http.ResponseWriter, r *http.Request, s Session, iss *storedriver.TakeResult, body []byte, kind string) {
	hdr, err := headers.FormatOperation(s.ID, iss.Ref)
	if err != nil {
		k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: can't write Poppy-Operation",
			slog.String("error", err.Error()))
		http.Error(w, "server error", http.StatusInternalServerError)
		return
	}
	k.observe(r.Context(), Event{Route: routeGate, Outcome: "waiting", Kind: kind})
	w.Header().Set(headers.Operation, hdr)
	if k.ExplainRefusals {
		// Whose ref it is, so that the endpoint can say why another
		// Session can't use it (internal/explain).
		explain.Issued(iss.Ref, s.Agent, s.User, s.Account, iss.Operation.ExpiresAt)
	}
	base := k.basePath()
	page := waitHandle{Ref: iss.Ref, Terms: termsDigest(iss.Operation.Terms)}
	prefix := defaultBasePath + "status?w=" // a constant: no allocation
	if base != defaultBasePath {
		prefix = base + "status?w="
	}
	status := k.seal.sealAfter(prefix, page, k.now())
	framework := respond.Framework(r)
	wantsJSON := framework == "" && respond.WantsJSON(r)
	if (wantsJSON || framework != "") && status != "" {
		// A script's request (opsgate.fetch), or a framework's whose
		// card the kit's card.js finds by it, gets the status route the
		// waiting page names (W93), in a header: its sealed handle
		// carries the terms, so the route also says "approved" for an
		// approval of a newer revision of these terms, which the
		// repeated request takes (§6 check 3). status?ref= knows only
		// the ref's revision: it would say "waiting" until the operation
		// expired.
		w.Header().Set(statusHeader, status)
	}
	if wantsJSON && k.Refused == nil {
		// {"error":"approval_required"} (W66): no Continue form to build.
		k.refuse(w, r, ErrApprovalRequired, nil)
		return
	}
	v := view.Waiting{
		Continue:  continueOf(r, body, framework),
		StatusURL: status,
		Framework: framework,
	}
	if framework == respond.Turbo {
		v.Frame = respond.TurboFrame(r)
	}
	if h := v.Continue.TokenHeader; h != "" && framework == "" && !wantsJSON {
		// W62: the page can't repeat it; say how the website can.
		k.logger().LogAttrs(r.Context(), slog.LevelWarn, "opsgate: a gated request carried its CSRF token in a header, which the waiting page's Continue form can't send, so the page says the request can't be repeated from it; "+
			"have the page's script repeat it: opsgate.fetch (/_opsgate/fetch.js, Accept: application/json), or htmx or Turbo with /_opsgate/card.js in the layout; or put the token in the form's fields",
			slog.String("path", r.URL.Path), slog.String("header", h))
	}
	k.refuse(w, r, ErrApprovalRequired, &v)
}

// performing is what the handler of a taken approval can reach.
type performing struct {
	// The request's context: performing is the handler's, so that it
	// carries itself (Value) without an allocation of its own.
	context.Context
	claim   store.Claim
	outcome atomic.Int32 // store.Outcome set by SetOutcome; 0 for none
	sw      statusWriter // the handler's writer, in the same allocation
	// api: an API request's claim (api.go), whose answer is kept for a
	// retry with the same approval (§7 P90): kept is its body while it
	// fits (storekit.MaxAnswer), keptOver once it doesn't.
	api      bool
	kept     []byte
	keptOver bool
}

func (p *performing) Value(key any) any {
	if key == (performingKey{}) {
		return p
	}
	return p.Context.Value(key)
}

type performingKey struct{}

// ClaimOf returns the approved operation the handler is performing: the
// approved revision (Operation: ID, Revision, Terms, Summary, ExpiresAt),
// the approval the browser's request used up (§6 W96), and whom the
// operation belongs to (Agent, User, Account). The handler performs exactly
// what Operation.Terms say (§3). false outside a performance.
func ClaimOf(r *http.Request) (store.Claim, bool) {
	p, ok := r.Context().Value(performingKey{}).(*performing)
	if !ok {
		return store.Claim{}, false
	}
	c := p.claim
	c.Operation.Terms = bytes.Clone(c.Operation.Terms) // the handler may keep or change its copy
	return c, true
}

// SetOutcome states how the action ended, instead of the handler's status
// (§7): store.OutcomePerformed, store.OutcomeNotPerformed or store.OutcomeUnknown. Outside a performance it
// does nothing.
func SetOutcome(r *http.Request, o store.Outcome) {
	if p, ok := r.Context().Value(performingKey{}).(*performing); ok && o >= store.OutcomePerformed && o <= store.OutcomeUnknown {
		p.outcome.Store(int32(o))
	}
}

// finishTimeout bounds Finish, which runs even when the client has gone.
const finishTimeout = 10 * time.Second

// perform runs the handler once for a taken approval and finishes the claim
// (§6 W97, §7): status < 400 performed, 4xx not performed (W98), 5xx or a
// panic unknown (W142); SetOutcome overrides the status.
//
// When the outcome is unknown the browser never sees the handler's failure:
// a 5xx the handler writes is held back, and the Gate answers 503 with
// Retry-After and the kit's "not known yet" answer instead (Kit.Refused;
// §7 W142, W143). A panic before anything was written is answered the same
// way and logged; a panic after the response began goes on up, so that the
// server aborts the half-written response.
func (k *Kit) perform(w http.ResponseWriter, r *http.Request, next http.Handler, claim *store.Claim, kind string) {
	k.performFor(w, r, next, claim, kind, false)
}

// performFor is perform, for an API request's claim when api (api.go): its
// answer is kept with the performed operation, and the answer to an
// unknown outcome is the API's JSON.
func (k *Kit) performFor(w http.ResponseWriter, r *http.Request, next http.Handler, claim *store.Claim, kind string, api bool) {
	p := &performing{Context: r.Context(), claim: *claim, api: api}
	r = r.WithContext(p)
	sw := &p.sw
	sw.ResponseWriter, sw.p = w, p
	if h := w.Header(); len(h) > 0 { // none to keep: restoreHeader clears them
		sw.header = h.Clone()
	}
	hctx, hsp := spans.Start(r.Context(), "opsgate.handler", spans.Labels{Route: routeGate, Kind: kind})
	hr := r // the handler's request, with its span when traced
	if hctx != r.Context() {
		hr = r.WithContext(hctx)
	}
	panicked := true
	defer func() {
		outcome := store.OutcomeUnknown
		if !panicked {
			outcome = outcomeOf(sw.status)
		}
		if o := store.Outcome(p.outcome.Load()); o != 0 && !panicked {
			outcome = o
		}
		var rec any
		if panicked {
			rec = recover()
			hsp.End(spans.Labels{Outcome: outcomeName(outcome)}, errHandlerPanicked)
		} else {
			hsp.End(spans.Labels{Outcome: outcomeName(outcome)}, nil)
		}
		fr := r
		if api && outcome == store.OutcomePerformed {
			// §7 P90: the answer a retry with the same approval gets.
			fr = r.WithContext(storedriver.WithAnswer(r.Context(), keepAnswer(p)))
		}
		k.finish(fr, p.claim, outcome, kind)
		switch {
		case panicked && (sw.wrote || rec == http.ErrAbortHandler):
			panic(rec) // the response began: let the server abort it
		case panicked:
			k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: the handler panicked while performing; its outcome is unknown",
				slog.String("path", r.URL.Path), slog.String("panic", fmt.Sprint(rec)), slog.String("stack", string(debug.Stack())))
			sw.restoreHeader()
			k.refuseUnknown(w, r, api)
		case sw.held:
			sw.restoreHeader()
			k.refuseUnknown(w, r, api)
		}
	}()
	next.ServeHTTP(sw, hr)
	panicked = false
}

// refuseUnknown answers a performance whose outcome is unknown: 503 with
// Retry-After, never as if it failed (§7 W142, W143; P95, P96 for an API
// request).
func (k *Kit) refuseUnknown(w http.ResponseWriter, r *http.Request, api bool) {
	if api {
		respond.NoStore(w.Header())
		writeUnavailable(w, k, k.ExplainRefusals, ErrOutcomeUnknown)
		return
	}
	k.refuse(w, r, ErrOutcomeUnknown, nil)
}

// errHandlerPanicked ends the handler's span when it panicked.
var errHandlerPanicked = errors.New("webkit: the handler panicked while performing")

// outcomeName is the Observer's name of an outcome.
func outcomeName(o store.Outcome) string {
	switch o {
	case store.OutcomePerformed:
		return "performed"
	case store.OutcomeNotPerformed:
		return "not_performed"
	}
	return "unknown"
}

func outcomeOf(status int) store.Outcome {
	switch {
	case status == 0 || status < 400: // nothing written is 200
		return store.OutcomePerformed
	case status < 500:
		return store.OutcomeNotPerformed
	default:
		return store.OutcomeUnknown
	}
}

func (k *Kit) finish(r *http.Request, claim store.Claim, outcome store.Outcome, kind string) {
	ctx := context.WithoutCancel(r.Context())
	// A store that never waits on I/O refuses only a context already done
	// (storekit.InProcess): a deadline would cost it four allocations and
	// bound nothing.
	if p, ok := k.Store.(storekit.InProcess); !ok || !p.InProcess() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, finishTimeout)
		defer cancel()
	}
	if err := k.store().Finish(ctx, claim, outcome, k.now()); err != nil {
		// The response is gone already: log and count. A lost finish
		// leaves the operation performing, never performed twice; it is
		// tried again until it lands (retry.go), so that the operation
		// reads performed soon after the store is back.
		k.storeFailed(r, "finish", err)
		if !errors.Is(err, storedriver.ErrClaimLost) {
			st := k.newRetryStep(r.URL.Path)
			st.claim, st.owner, st.outcome, st.until = slimClaim(claim), claim.Owner, outcome, time.Now().Add(finishRetryFor)
			if !k.retryLater(st) {
				k.dropped(st)
			}
		}
	}
	// An approval was used up (§6 W96); the outcome says what it became.
	k.observe(r.Context(), Event{Route: routeGate, Outcome: outcomeName(outcome), Kind: kind})
}

// statusWriter records the handler's final status. It keeps Flush and
// Unwrap, so http.ResponseController reaches the server's writer.
//
// A 5xx status, unless the handler stated its outcome with SetOutcome, is
// held back with everything written after it: the outcome is unknown, and
// the Gate answers for it (W142).
type statusWriter struct {
	http.ResponseWriter
	p      *performing
	header http.Header // the headers before the handler ran
	status int
	wrote  bool // something reached the client's response
	held   bool // a 5xx the client will not see
}

func (w *statusWriter) WriteHeader(code int) {
	if w.held {
		return
	}
	// 1xx other than 101 are informational: the final status comes later.
	final := code >= 200 || code == http.StatusSwitchingProtocols || code < 100
	if w.status == 0 && final {
		w.status = code
		if code >= 500 && w.p.outcome.Load() == 0 {
			w.held = true
			return
		}
	}
	if final {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.held {
		return len(b), nil
	}
	if p := w.p; p.api && !p.keptOver {
		if len(p.kept)+len(b) > storekit.MaxAnswer {
			p.kept, p.keptOver = nil, true
		} else {
			p.kept = append(p.kept, b...)
		}
	}
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.held {
		return
	}
	w.wrote = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// restoreHeader puts back the headers as they were before the handler ran,
// so the handler's failure headers don't go out with the Gate's answer.
func (w *statusWriter) restoreHeader() {
	h := w.ResponseWriter.Header()
	clear(h)
	for k, v := range w.header {
		h[k] = v
	}
}
