package webkit

import (
	"context"
	"errors"
	"net/http"

	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/pages"
)

// failureKey is the context value that carries why the Gate refused.
type failureKey struct{}

// FailureReason returns why the Gate refused r, for Kit.Refused, or nil
// outside a refusal. It wraps one of ErrApprovalRequired,
// ErrExtensionRequired, ErrStoreUnavailable, ErrBusy, ErrOutcomeUnknown,
// ErrRateLimited, ErrJoinInvalid and ErrOwnLogin; compare with errors.Is.
func FailureReason(r *http.Request) error {
	err, _ := r.Context().Value(failureKey{}).(error)
	return err
}

// refuse answers a request the Gate does not hand to the handler, for
// reason (which wraps one of the Err… of FailureReason): it sets the
// headers the protocol needs whoever answers (no-store, W68; Retry-After
// of a 503 or 429, W143), then calls Kit.Refused, or Kit.Refuse when it is
// nil. v is the waiting page's view, for ErrApprovalRequired only.
func (k *Kit) refuse(w http.ResponseWriter, r *http.Request, reason error, v *view.Waiting) {
	h := w.Header()
	respond.NoStore(h)
	if status := refusedStatus(reason); status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		h.Set("Retry-After", respond.RetryAfter(k.retryAfter()))
	}
	if k.Refused == nil {
		// The kit's own answer reads no context value: spare the
		// allocations of one.
		var view view.Waiting
		if v != nil {
			view = *v
		}
		k.refuseFor(w, r, reason, view)
		return
	}
	ctx := context.WithValue(r.Context(), failureKey{}, reason)
	if v != nil {
		view := *v // a copy for the context: v itself stays on the stack
		ctx = respond.WithWaiting(ctx, &view)
	}
	k.Refused.ServeHTTP(w, r.WithContext(ctx))
}

// refusedStatus is the status the Gate answers reason with.
func refusedStatus(reason error) int {
	switch {
	case errors.Is(reason, ErrApprovalRequired), errors.Is(reason, ErrExtensionRequired),
		errors.Is(reason, ErrJoinInvalid), errors.Is(reason, ErrOwnLogin):
		return http.StatusForbidden
	case errors.Is(reason, ErrRateLimited):
		return http.StatusTooManyRequests
	default:
		return http.StatusServiceUnavailable
	}
}

// Refuse writes the kit's own answer to a request the Gate refused, for
// FailureReason(r) (see Kit.Refused for each reason's status), in the
// website's Chrome. It is what the Gate serves when Kit.Refused is nil; a
// replacement calls it for the reasons it does not answer itself. A
// request the Gate did not refuse gets 500.
func (k *Kit) Refuse(w http.ResponseWriter, r *http.Request) {
	reason := FailureReason(r)
	if reason == nil {
		http.Error(w, "webkit: Kit.Refuse outside a refusal", http.StatusInternalServerError)
		return
	}
	v, _ := respond.WaitingOf(r)
	k.refuseFor(w, r, reason, v)
}

func (k *Kit) refuseFor(w http.ResponseWriter, r *http.Request, reason error, v view.Waiting) {
	if errors.Is(reason, ErrApprovalRequired) {
		// A script gets {"error":"approval_required"} (W66).
		pages.Waiting(w, r, v, k.Chrome)
		return
	}
	code, n := noticeOf(reason)
	if k.ExplainRefusals {
		n.Why = refusalWhy(reason)
	}
	if errors.Is(reason, ErrExtensionRequired) && respond.Framework(r) == "" && respond.WantsJSON(r) {
		// A script gets the code and the extension (§2 W12; RULES.md
		// choice 5); a page load the page, never JSON shown as a page.
		respond.ExtensionRequired(w, n.Why)
		return
	}
	pages.Refuse(w, r, refusedStatus(reason), code, n, k.Chrome)
}

// noticeOf is the error code and the page of each reason but
// ErrApprovalRequired. None says an action
// failed (§7 W142).
func noticeOf(reason error) (code string, n view.Notice) {
	switch {
	case errors.Is(reason, ErrExtensionRequired):
		// §2 W11, W12: its agent joins it again declaring
		// "operations";v="3".
		return "extension_required", view.Notice{Title: "Not done", Heading: "Your agent's browser can't do this here", Text: []string{
			"This browser was joined to your personal agent without the approvals that this action needs, so the site did not do it. Nothing was done.",
			"Ask your personal agent to join this browser to the site again, then try again."}}
	case errors.Is(reason, ErrOutcomeUnknown):
		// The website could not tell whether the action took effect; a
		// retry never does it twice.
		return "outcome_unknown", view.Notice{Title: "Not known yet", Heading: "Not known yet", Text: []string{
			"This action was started, but the site can't tell yet whether it has taken effect.",
			"Nothing will be done twice. Check again in a moment."}}
	case errors.Is(reason, ErrRateLimited):
		// 429 (webkit/RULES.md "Bounded work"): approving or finishing
		// some lets this one through later.
		return "rate_limited", view.Notice{Title: "Too many waiting", Heading: "Too many actions are waiting", Text: []string{
			"Too many actions are waiting for approval. Nothing was done.",
			"Approve or finish some, then try again later."}}
	case errors.Is(reason, ErrJoinInvalid):
		// The join expired or the website's keys changed: the agent
		// joins the browser again.
		return "join_invalid", view.Notice{Title: "Join again", Heading: "Your agent needs to join again", Text: []string{
			"This browser was joined to your personal agent, but the site can't accept that join any more. Nothing was done.",
			"Ask your personal agent to join this browser to the site again, then try again."}}
	case errors.Is(reason, ErrOwnLogin):
		// §4 W56: the website's own approval flow, not the agent's.
		return "confirmation_required", view.Notice{Title: "Confirm on the site", Heading: "Confirm this on the site", Text: []string{
			"This browser is signed in to your own account on this site, so your personal agent can't approve this action. Nothing was done.",
			"Confirm the action on the site yourself, or sign out of the site and let your personal agent ask for your approval."}}
	}
	// ErrStoreUnavailable, ErrBusy: nothing was done (§7).
	return "temporarily_unavailable", view.Notice{Title: "Try again shortly", Heading: "Try again shortly", Text: []string{
		"This action can't be handled right now. Please try again in a moment."}}
}

// refusalWhy is the Gate's refusal reason in words, for a website that
// explains its refusals (Kit.ExplainRefusals).
func refusalWhy(reason error) string {
	switch {
	case errors.Is(reason, ErrExtensionRequired):
		return `this browser's join declared no "operations";v="3" (the extensions claim of its join assertion, §2 "step 2"), so the website returns it no operations and did nothing: join the browser again declaring it`
	case errors.Is(reason, ErrJoinInvalid):
		return "the browser's join cookie has expired, or was made with keys this server doesn't have: nothing was done; join the browser again"
	case errors.Is(reason, ErrOwnLogin):
		return "this browser also has the website's own login, which its join did not give it: the website's own approval flow applies, not an operation (§4 \"Websites\"); nothing was done"
	case errors.Is(reason, ErrBusy):
		return "the operation is being performed (a request took its approval): nothing more was done; look its ref up at the operations endpoint until it says performed, and approve nothing new meanwhile (§7)"
	case errors.Is(reason, ErrOutcomeUnknown):
		return "the website's handler failed while performing the action: it may or may not have taken effect, and the operation stays performing until the website knows (§7); nothing will be done twice"
	case errors.Is(reason, ErrRateLimited):
		return "too many operations of this agent and User (or of the website) wait for approval: nothing was done; approve some, or let them expire, then try again"
	case errors.Is(reason, ErrStoreUnavailable):
		return "the website's store did not answer: nothing was performed; try again after Retry-After"
	}
	return ""
}
