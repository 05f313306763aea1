package webkit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/opsgate/opsgate/internal/apigate"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// serveAPI answers a request that carries Poppy-Session on itself: an API
// call, which the Gate answers as §4 and §6 "APIs" and §7 say, with the
// same describe and handler as the website's (RULES.md choice 7). Its
// Session, account and declared extensions come from its own headers,
// verified by endpoint.Mount.Handler's verifier (internal/apigate); a
// joined browser's cookie plays no part in it.
//
//   - Its Session and access token are verified first: a request that
//     fails gets their error and never an operation (P63, P64). One that
//     reached the Gate without the Mount's Handler, which verifies them,
//     is refused: never handled as an ordinary request.
//   - describe says which action it asks for, with the verified Session
//     in SessionOf(r.Context()); ErrNotGated passes it through, whatever
//     it declares (P05, P06).
//   - Without "operations";v="3" in its own Poppy-Extensions it gets
//     extension_required, approval or not (P08, P09, P11).
//   - The approval it carries in Poppy-Approval is checked on the request
//     itself, checks 1–3 in order (P63, P65), through the store
//     (apigate.Decide): it performs at most once (P89), and a retry gets
//     the first answer (P90) or 503 with Retry-After while the first is
//     performing or its outcome is unknown (P95, P96). An Idempotency-Key
//     plays no part: the approval's operation_id identifies the retries
//     (P59, P60).
//   - Otherwise 403 approval_required with the operation, and no
//     WWW-Authenticate (P43–P47).
//
// Its answers are the kit's JSON, never Kit.Refused's pages.
func (k *Kit) serveAPI(w http.ResponseWriter, r *http.Request, describe Describe, next http.Handler) {
	v := apigate.VerifierOf(r.Context())
	if v == nil {
		// Fail closed: the Session it carries can't be verified here, and
		// a gated request is never an ordinary browser's.
		k.logger().LogAttrs(r.Context(), slog.LevelError,
			"opsgate: a request carrying Poppy-Session reached the Gate without endpoint.Mount.Handler, which verifies its Session: refused, nothing performed. Serve this route behind Mount.Handler",
			slog.String("path", r.URL.Path))
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "misconfigured", Reason: "api"})
		writeAPI(w, http.StatusInternalServerError, map[string]string{"error": "server_error",
			"error_description": "this website can't verify the Poppy-Session header on this route; nothing was done"})
		return
	}
	c, ok := v.Verify(w, r)
	if !ok {
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "unauthenticated", Reason: "api"})
		return
	}
	s := Session{ID: c.SID, Agent: c.Agent, User: c.User, Account: c.Account, Extensions: c.Extensions}
	via := storekit.ViaAPI
	if c.Via == storekit.ViaMCP { // a tool call (endpoint/mcpgate): the MCP server's revisions
		via = c.Via
	}
	approval, why := apigate.ApprovalOfHeader(r.Header.Values(headers.Approval))
	if why != nil {
		// P51, P52: not an approval; the request is handled without one.
		k.logger().LogAttrs(r.Context(), slog.LevelInfo, "opsgate: ignored a Poppy-Approval that is not an approval",
			slog.String("path", r.URL.Path), slog.String("reason", why.Error()))
	}
	explain := v.Explain()
	if approval != nil && headers.DeclaresOperations(c.Extensions) && storekit.RevisionVia(approval.Revision) == via {
		// Checks 1 and 2 come before check 3 (P65), and so before
		// describe, which may no longer describe the action once it is
		// performed (a site's describe often answers ErrNotGated for what
		// its handler refuses, such as an item already exchanged): a retry
		// with the approval of an operation performed, or being performed,
		// gets the first answer, or 503 (§7 P90, P96), never the handler's
		// refusal. So a request that carries such an approval gets that
		// answer on any route behind the Gate, one describe doesn't gate
		// included: nothing is performed either way.
		reply, err := k.store().Record(r.Context(), s.Owner(), storekit.MakeRef(approval.OperationID, approval.Revision), *approval, k.now(), storedriver.RecordOptions{CheckOnly: true})
		switch {
		case err != nil:
			k.storeFailed(r, "api", err)
			k.answerAPI(w, r, next, apigate.Result{Do: apigate.Unavailable, Err: err}, "", explain)
			return
		case reply.Result == storedriver.AlreadyPerformed:
			k.answerAPI(w, r, next, apigate.Result{Do: apigate.Performed, Answer: reply.Answer, OperationID: approval.OperationID, Check: "check2"}, "", explain)
			return
		case reply.Result == storedriver.BeingPerformed:
			k.answerAPI(w, r, next, apigate.Result{Do: apigate.Busy, OperationID: approval.OperationID, Check: "check2"}, "", explain)
			return
		}
	}
	// describe and the handler see the verified Session (SessionOf).
	r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, s))
	act, _, ok := k.described(w, r, describe, next)
	if !ok {
		return
	}
	if !headers.DeclaresOperations(c.Extensions) {
		// §2 P08, P09, P11: no operation, and the handler never runs.
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "extension_required", Reason: "api", Kind: act.kind()})
		why := ""
		if explain {
			why = `this request's Poppy-Extensions declares no "operations";v="3", so the API returns it no operations and did nothing: send the request with Poppy-Extensions: "operations";v="3"`
		}
		respond.ExtensionRequired(w, why)
		return
	}
	sa, err := k.storeAction(act)
	if err != nil {
		k.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: describe returned an unusable action",
			slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		k.observe(r.Context(), Event{Route: routeGate, Outcome: "invalid_request", Reason: "api", Kind: act.kind()})
		respond.BadRequest(w, err.Error())
		return
	}
	sa.Via, sa.ClaimToken = via, storekit.NewToken()
	owner := s.Owner()
	// The store's audit entries of this request's steps carry its
	// Session's sid and the action's kind (§8.1).
	r = r.WithContext(storedriver.WithEntry(r.Context(), store.Entry{Session: s.ID, Kind: act.kind()}))
	q := apigate.Request{Owner: owner, Action: sa, Approval: approval, Now: k.now(),
		Decline: func(ctx context.Context, op store.Operation, a store.Approval) *apigate.Decline {
			return v.Decline(ctx, op, a, c)
		}}
	res := apigate.Decide(r.Context(), k.store(), q)
	if res.Release {
		k.release(r, owner, sa.ClaimToken)
	}
	if res.Do == apigate.Perform && r.Context().Err() != nil {
		// The client left before the handler ran: perform nothing, so that
		// its approval applies to its retry (W144).
		k.release(r, owner, sa.ClaimToken)
		res = apigate.Result{Do: apigate.Unavailable, Err: r.Context().Err()}
	}
	if res.Err != nil && res.Do == apigate.Unavailable {
		k.storeFailed(r, "api", res.Err)
	}
	k.answerAPI(w, r, next, res, act.kind(), explain)
}

// answerAPI carries out the Gate's decision for an API request.
func (k *Kit) answerAPI(w http.ResponseWriter, r *http.Request, next http.Handler, res apigate.Result, kind string, explain bool) {
	ev := Event{Route: routeGate, Reason: "api", Kind: kind}
	why := func(s string) string {
		if explain {
			return s
		}
		return ""
	}
	switch res.Do {
	case apigate.Perform:
		k.performAPI(w, r, next, res.Claim, kind)
		return
	case apigate.Ask: // §4 P43–P47: the operation, no WWW-Authenticate
		ev.Outcome = "waiting"
		k.observe(r.Context(), ev)
		writeAPI(w, http.StatusForbidden, apiApproval{Error: "approval_required", Operation: res.Operation, Why: why(askWhy(res.Check))})
		return
	case apigate.Performed: // §7 P90: the first answer again
		ev.Outcome = "performed_before"
		k.observe(r.Context(), ev)
		apigate.WriteAnswer(w, res.Answer, res.OperationID)
		return
	case apigate.Busy: // §7 P95, P96: never as if it failed
		ev.Outcome = "busy"
		k.observe(r.Context(), ev)
		w.Header().Set("Retry-After", respond.RetryAfter(k.retryAfter()))
		body := map[string]string{"error": "temporarily_unavailable", "status": "performing"}
		if res.OperationID != "" {
			body["operation_id"] = res.OperationID
		}
		if explain {
			body["error_description"] = refusalWhy(ErrBusy)
		}
		writeAPI(w, http.StatusServiceUnavailable, body)
		return
	case apigate.SignIn: // §3 P41: the challenge for the account
		ev.Outcome = "challenge"
		k.observe(r.Context(), ev)
		w.Header().Set("WWW-Authenticate", `Bearer error="sign_in_required"`)
		body := map[string]string{"error": "sign_in_required"}
		if explain {
			body["error_description"] = "the operation belongs to an account, and this Session is signed out: send the request with the access token of that account (Authorization: Bearer, and ath in the Session JWT) (§3)"
		}
		writeAPI(w, http.StatusUnauthorized, body)
		return
	case apigate.Declined: // §6 P79–P87: nothing performed, no operation
		ev.Outcome = "declined"
		k.observe(r.Context(), ev)
		d, _ := res.Decline.Body.(*Decline)
		if d == nil {
			d = &Decline{}
		}
		writeAPI(w, http.StatusForbidden, struct {
			Error string `json:"error"`
			*Decline
		}{"approval_declined", d})
		return
	case apigate.RateLimited:
		ev.Outcome = "rate_limited"
		if errors.Is(res.Err, storekit.ErrOverall) {
			ev.Reason = "overall"
		}
		k.observe(r.Context(), ev)
		w.Header().Set("Retry-After", respond.RetryAfter(k.retryAfter()))
		body := map[string]string{"error": "rate_limited"}
		if explain {
			body["error_description"] = refusalWhy(ErrRateLimited)
		}
		writeAPI(w, http.StatusTooManyRequests, body)
		return
	}
	ev.Outcome = "unavailable"
	k.observe(r.Context(), ev)
	writeUnavailable(w, k, explain, ErrStoreUnavailable)
}

// writeUnavailable answers 503 with Retry-After: nothing was performed,
// or the outcome is not known yet (§7: never as if it failed).
func writeUnavailable(w http.ResponseWriter, k *Kit, explain bool, reason error) {
	w.Header().Set("Retry-After", respond.RetryAfter(k.retryAfter()))
	body := map[string]string{"error": "temporarily_unavailable"}
	if explain {
		body["error_description"] = refusalWhy(reason)
	}
	writeAPI(w, http.StatusServiceUnavailable, body)
}

// askWhy explains an approval_required answer to a request whose
// approval failed check (Kit.ExplainRefusals).
func askWhy(check string) string {
	switch check {
	case "check1":
		return "the approval names an operation this Session can't approve, or one this API never returned: handled as a request without an approval (§6 check 1); here is the operation to approve"
	case "check3":
		return "the approval's revision is not one this API returned for this request's terms, has expired or was used up, or is another interface's: handled as a request without an approval (§6 check 3); here is the operation to approve"
	}
	return ""
}

// apiApproval is the API's approval_required (§4 "APIs").
type apiApproval struct {
	Error     string          `json:"error"`
	Operation store.Operation `json:"operation"`
	Why       string          `json:"error_description,omitempty"`
}

// writeAPI answers an API request with the kit's JSON: never stored.
func writeAPI(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	respond.WriteJSON(w, status, v)
}

// performAPI runs the handler once for an API request's claim, as perform
// does for a browser's, keeping its answer with the performed operation
// for a retry with the same approval (§7 P90).
func (k *Kit) performAPI(w http.ResponseWriter, r *http.Request, next http.Handler, claim *store.Claim, kind string) {
	k.performFor(w, r, next, claim, kind, true)
}

// keepAnswer is the answer a performed API request keeps (§7 P90): its
// status, Content-Type and Location, and its body when it is short enough.
func keepAnswer(p *performing) []byte {
	if p.sw.status == 0 {
		p.sw.status = http.StatusOK
	}
	if p.keptOver {
		return nil
	}
	return apigate.EncodeAnswer(p.sw.status, p.sw.ResponseWriter.Header(), p.kept)
}

// sessionKey is the context value that carries the Session of an API
// call or an MCP tool call, once verified.
type sessionKey struct{}

// SessionOf returns the Session of the API call or MCP tool call that the
// Gate is handling (RULES.md choices 7 and 8), from describe on: the one
// the request carries on itself, verified, with its account when signed
// in. describe and the handler use it to know whose action it is. false
// outside one, such as for a browser's request (see Kit.Sessions).
func SessionOf(ctx context.Context) (Session, bool) {
	s, ok := ctx.Value(sessionKey{}).(Session)
	return s, ok
}
