package webkit

import (
	"context"
	"errors"
	"net/http"

	"github.com/opsgate/opsgate/internal/pages"
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
func (k *Kit) refuse(w http.ResponseWriter, r *http.Request, reason error, v *pages.Waiting) {
	h := w.Header()
	pages.NoStore(h)
	if status := refusedStatus(reason); status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		h.Set("Retry-After", pages.RetryAfter(k.retryAfter()))
	}
	if k.Refused == nil {
		// The kit's own answer reads no context value: spare the
		// allocations of one.
		var view pages.Waiting
		if v != nil {
			view = *v
		}
		k.refuseFor(w, r, reason, view)
		return
	}
	ctx := context.WithValue(r.Context(), failureKey{}, reason)
	if v != nil {
		view := *v // a copy for the context: v itself stays on the stack
		ctx = pages.WithWaiting(ctx, &view)
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
	v, _ := pages.WaitingOf(r)
	k.refuseFor(w, r, reason, v)
}

func (k *Kit) refuseFor(w http.ResponseWriter, r *http.Request, reason error, v pages.Waiting) {
	page := pages.Unavailable{StyleURL: k.basePath() + "opsgate.css", Chrome: k.Chrome}
	if k.ExplainRefusals {
		page.Why = refusalWhy(reason)
	}
	switch {
	case errors.Is(reason, ErrApprovalRequired):
		// A script gets {"error":"approval_required"} (W66).
		pages.WriteWaiting(w, r, v)
	case errors.Is(reason, ErrExtensionRequired):
		pages.WriteExtensionRequired(w, r, page)
	case errors.Is(reason, ErrOutcomeUnknown):
		pages.WriteOutcomeUnknown(w, r, k.retryAfter(), page)
	case errors.Is(reason, ErrRateLimited):
		pages.WriteRateLimited(w, r, k.retryAfter(), page)
	case errors.Is(reason, ErrJoinInvalid):
		pages.WriteJoinInvalid(w, r, page)
	case errors.Is(reason, ErrOwnLogin):
		pages.WriteOwnLogin(w, r, page)
	default: // ErrStoreUnavailable, ErrBusy
		pages.WriteUnavailable(w, r, k.retryAfter(), page)
	}
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
