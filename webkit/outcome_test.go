package webkit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// §7 W97 W98 W142: the handler's status decides the outcome, at each
// boundary: below 400 performed, 400 to 499 not performed, 500 and above
// not known.
func TestOutcomeOfStatus(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]store.Outcome{
		0: store.OutcomePerformed, 200: store.OutcomePerformed, 204: store.OutcomePerformed, 303: store.OutcomePerformed, 399: store.OutcomePerformed,
		400: store.OutcomeNotPerformed, 401: store.OutcomeNotPerformed, 404: store.OutcomeNotPerformed, 409: store.OutcomeNotPerformed, 499: store.OutcomeNotPerformed,
		500: store.OutcomeUnknown, 502: store.OutcomeUnknown, 503: store.OutcomeUnknown, 599: store.OutcomeUnknown,
	} {
		if got := outcomeOf(status); got != want {
			t.Errorf("W98 outcomeOf(%d) = %v, want %v", status, got, want)
		}
	}
}

// W93 W98: the waiting page's status route says "approved" only for an
// approval its request would take. One its request used up (the handler
// answered 4xx) no longer counts, even while another approval of the
// operation (other terms) waits: "approved" would make the page resubmit,
// get 403 again, and loop.
func TestStatusRouteSkipsUsedUpApprovals(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			e := newGateEnv(t, be.make(t), newClock())
			h := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "that size is not in stock", http.StatusBadRequest)
			}))
			page := httptest.NewRecorder()
			h.ServeHTTP(page, e.request(joinedIn, formM, "text/html"))
			_, ref := refOf(t, page)
			statusURL := statusURLOf(t, page)
			rr := e.lookup(sesIn, ref)
			e.record(sesIn, storedriver.TakeResult{Operation: rr.Current, Ref: ref})
			if code, st := askStatus(t, e.kit, statusURL, sesIn); code != 200 || st != "approved" {
				t.Fatalf("W106 approved: %d %q", code, st)
			}
			cont := httptest.NewRecorder()
			h.ServeHTTP(cont, e.request(joinedIn, formM, "text/html"))
			if cont.Code != http.StatusBadRequest {
				t.Fatalf("Continue: %d, want the handler's 400", cont.Code)
			}
			// Another approval of the operation, for other terms, waits.
			other := e.approve(sesIn, "ord_7", "L")
			if got := e.lookup(sesIn, other.Ref).Status; got != storedriver.StatusApproved {
				t.Fatalf("the operation with the other terms' approval: %s, want approved", got)
			}
			if code, st := askStatus(t, e.kit, statusURL, sesIn); code != 200 || st != "waiting" {
				t.Errorf("the page whose approval was used up: %d %q, want waiting", code, st)
			}
		})
	}
}
