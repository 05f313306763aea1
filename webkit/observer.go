package webkit

import (
	"context"
	"time"
)

// Observer sees what the kit does, so that Prometheus or OpenTelemetry can
// be plugged in without the kit depending on either: the adapters are
// webkit/metrics/prometheus and webkit/metrics/otel, and for spans
// webkit/tracing/otel (it makes the spans of the Gate, the endpoint, the
// store steps and the identity fetches when it is the Kit's Observer
// itself, and passes every call on to the Observer behind it). Each
// method is called on the request's goroutine, with the request's context;
// implementations must be quick and safe for concurrent use.
//
// Every label an Observer gets comes from a small fixed set, or is an
// action's Kind, which the website names (Action.Kind): never a key, an
// operation_id, a ref, a sid, a client_id or a path, each of which would
// make a metric series per user (cardinality is a cost on every Prometheus
// server that scrapes the website).
type Observer interface {
	// Observe: one answer of the Gate, the endpoint, the join or the status
	// route (see Event).
	Observe(ctx context.Context, e Event)
	// StoreStep: one call of the store (step is its method in lower case:
	// "take", "finish", "lookup", "record", "use_once"; "marked" is the
	// check, on a joined browser's request, that Unbind did not end its
	// binding, made by "take" itself on this module's stores), how long it
	// took, and its error (nil when it worked). A "take" that failed
	// performed nothing (fail closed).
	StoreStep(ctx context.Context, step string, took time.Duration, err error)
}

// Routes an Event comes from (Event.Route).
const (
	routeGate   = "gate"   // the Gate, around a website's handler (§4)
	routeJoin   = "join"   // the browser join (browser_session_endpoint)
	routeStatus = "status" // the waiting page's status route (W93)
)

// Event is one answer of the kit. Outcome and Reason come from the fixed
// sets below; Kind is the action's kind at the Gate.
//
// Gate outcomes: "passed" (Reason "not_joined", "own_login" with
// Kit.OwnFlowInHandler, "not_gated": the handler ran without the kit),
// "join_invalid" (403: a join cookie this server can't accept, nothing
// run), "own_flow" (403, or the website's own flow in Kit.Refused: a
// browser with the website's own login, W56), "waiting" (403 with a
// ref: the operation was issued or reused), "performed", "not_performed",
// "unknown" (an approval was used up and the handler's outcome was that),
// "busy" and "unavailable" (503, nothing performed), "rate_limited" (429:
// the owner's or agent's cap of open operations, or with Reason "overall"
// the store's cap across agents), "extension_required",
// "invalid_request" (describe refused the request or its body).
//
// Endpoint outcomes: a lookup answers "operation" (approval_required with
// the operation), "status" or "not_found"; an approval answers "recorded",
// "declined", "challenge" (sign_in_required) or "refused" with Reason
// "check1", "check2" or "check3" (§6 "What the Company checks"), or
// "csrf" when the website's CSRF protection refused it first, or
// "rate_limited" (429: a cap of the operation's approvals or of open
// operations; with Reason "overall", the store's cap of single-use
// markers across agents); any
// request may get "invalid_request", "extension_required",
// "unauthenticated" (Reason "session" or "token") or "unavailable" (Reason
// "store" or "verification").
//
// Join outcomes: "joined" (Reason "signed_in" or "signed_out"), "refused"
// (Reason "request", "assertion", "access_token", "conflict": the browser
// is bound to another agent's or User's Session, "csrf": the website's
// CSRF protection refused it before the kit saw it), "unavailable" (the
// agent's keys can't be fetched now, or the join can't be stored).
//
// Status outcomes: the status answered ("waiting", "approved",
// "performing", "performed"), "not_found" or "unavailable".
type Event struct {
	// Route is where the answer came from: "gate" (the Gate, around a
	// website's handler, §4), "endpoint" (the operations endpoint, for
	// agents, §4, §6), "join" (the browser join,
	// browser_session_endpoint) or "status" (the waiting page's status
	// route, W93).
	Route   string
	Outcome string
	Reason  string
	// Kind is Action.Kind at the Gate once describe has run; "" elsewhere.
	Kind string
}

// observe reports e to the Kit's Observer, if it has one.
func (k *Kit) observe(ctx context.Context, e Event) {
	if k.Observer != nil {
		k.Observer.Observe(ctx, e)
	}
}
