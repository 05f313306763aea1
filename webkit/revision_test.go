package webkit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
)

// askStatus asks the kit's status route for target as s's joined browser:
// its HTTP status and its "status".
func askStatus(t *testing.T, k *Kit, target string, s Session) (int, string) {
	t.Helper()
	r := httptest.NewRequest("GET", target, nil)
	r.AddCookie(joinCookie(t, k, s))
	rec := httptest.NewRecorder()
	k.handler().ServeHTTP(rec, r)
	var body struct{ Status string }
	json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body.Status
}

// W98 W97 W99: whatever 4xx the handler answers, the action was not
// performed: its response goes to the browser as written, the outcome is
// counted as not performed, the operation waits again, the approval is used
// up (the same request again gets a new 403 and ref, the handler not run),
// and a new approval performs it. The other tests use 409 only.
func TestGateHandler4xxIsNotPerformed(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			for _, code := range []int{400, 401, 403, 404, 409, 410, 422, 429, 499} {
				t.Run(fmt.Sprint(code), func(t *testing.T) {
					e := newGateEnv(t, be.make(t), newClock())
					obs := &countingObserver{}
					e.kit.Observer = obs
					var answer atomic.Int32
					answer.Store(int32(code))
					var runs atomic.Int32
					h := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						runs.Add(1)
						w.Header().Set("X-Handler", "yes")
						w.WriteHeader(int(answer.Load()))
						fmt.Fprintf(w, "handler answered %d", answer.Load())
					}))
					do := func() *httptest.ResponseRecorder {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, e.request(joinedIn, formM, "text/html"))
						return rec
					}
					approved := e.approve(sesIn, "ord_7", "M")
					rec := do()
					if rec.Code != code || rec.Header().Get("X-Handler") != "yes" || runs.Load() != 1 {
						t.Fatalf("Continue: %d X-Handler %q runs %d, want the handler's own %d, run once", rec.Code, rec.Header().Get("X-Handler"), runs.Load(), code)
					}
					if rec.Header().Get(headers.Operation) != "" {
						t.Errorf("the handler's %d carries Poppy-Operation %q", code, rec.Header().Get(headers.Operation))
					}
					if obs.get("not_performed") != 1 || obs.get("performed") != 0 || obs.get("unknown") != 0 {
						t.Errorf("observer: %s, want one not_performed", obs.snapshot())
					}
					got := e.lookup(sesIn, approved.Ref)
					if got.Status != storedriver.StatusWaiting {
						t.Errorf("after the handler's %d: %s, want waiting", code, got.Status)
					}
					if len(got.Approvals) != 1 || got.Approvals[0].UsedAt.IsZero() {
						t.Errorf("approvals %+v, want the one approval used up", got.Approvals)
					}
					if got.Current.Revision == approved.Operation.Revision {
						t.Errorf("waits again under the used-up revision %s", got.Current.Revision)
					}
					// The same request again: not performed, a new ref.
					answer.Store(200)
					rec = do()
					sid, ref := refOf(t, rec)
					if rec.Code != http.StatusForbidden || sid != sesIn.ID || ref == "" || ref == approved.Ref || runs.Load() != 1 {
						t.Fatalf("repeat: %d ref %q runs %d, want 403 with a new ref, not run", rec.Code, ref, runs.Load())
					}
					// A new approval of that ref performs it, once.
					next := e.lookup(sesIn, ref)
					e.record(sesIn, storedriver.TakeResult{Operation: next.Current, Ref: ref})
					if rec := do(); rec.Code != http.StatusOK || runs.Load() != 2 {
						t.Fatalf("after a new approval: %d, runs %d", rec.Code, runs.Load())
					}
					if got := e.lookup(sesIn, approved.Ref).Status; got != storedriver.StatusPerformed {
						t.Errorf("after the new approval: %s, want performed", got)
					}
				})
			}
		})
	}
}

// W75: after a not-performed outcome the operation is remembered (its claim
// kept it), so once its revision has expired the waiting page's status
// route, not the store's forgetting, must answer it as not found: the
// operation has expired and can no longer be approved.
func TestStatusRouteExpiredAfterNotPerformed(t *testing.T) {
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
			cont := httptest.NewRecorder()
			h.ServeHTTP(cont, e.request(joinedIn, formM, "text/html"))
			if cont.Code != http.StatusBadRequest {
				t.Fatalf("Continue: %d, want the handler's 400", cont.Code)
			}
			byRef := defaultBasePath + "status?ref=" + url.QueryEscape(ref)
			for _, target := range []string{statusURL, byRef} {
				if code, st := askStatus(t, e.kit, target, sesIn); code != 200 || st != "waiting" {
					t.Errorf("before expires_at, %s: %d %q, want 200 waiting", target, code, st)
				}
			}
			last := e.lookup(sesIn, ref).Current.ExpiresAt
			e.clock.Add(last.Sub(e.clock.Now()) + time.Second)
			if rec, found, err := storedriver.Steps(e.kit.Store).Lookup(t.Context(), sesIn.Owner(), ref, e.clock.Now()); err != nil || found && !rec.Expired {
				t.Fatalf("the store past expires_at: %+v found %v err %v, want expired (or not found)", rec, found, err)
			}
			for _, target := range []string{statusURL, byRef} {
				if code, st := askStatus(t, e.kit, target, sesIn); code != http.StatusNotFound || st != "" {
					t.Errorf("W75 past expires_at, %s: %d %q, want 404", target, code, st)
				}
			}
		})
	}
}

// W74 W76: the status route reads a ref as the endpoint does: one a
// character or a part away from a real one (a "." appended, spaces, a dot
// or a revision more) is not that ref, and gets 404, whatever the state of
// the real one.
func TestStatusRouteNearRefs(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			e := newGateEnv(t, be.make(t), newClock())
			page := e.do(e.request(joinedIn, formM, "text/html"))
			_, ref := refOf(t, page)
			id, rev, _ := strings.Cut(ref, ".")
			near := []string{
				ref + ".", ref + "..", "." + ref, " " + ref, ref + " ", ref + "\t",
				id + ".." + rev, ref + "." + rev, ref + "." + ref, ref + ".x", ref + "..x",
			}
			refused := func(state string) {
				t.Helper()
				if code, st := askStatus(t, e.kit, defaultBasePath+"status?ref="+url.QueryEscape(ref), sesIn); code != 200 || st != state {
					t.Fatalf("the real ref: %d %q, want 200 %s", code, st, state)
				}
				for _, n := range near {
					if code, st := askStatus(t, e.kit, defaultBasePath+"status?ref="+url.QueryEscape(n), sesIn); code != http.StatusNotFound || st != "" {
						t.Errorf("W74 %s, %q: %d %q, want 404", state, n, code, st)
					}
				}
			}
			refused("waiting")
			rr := e.lookup(sesIn, ref)
			e.record(sesIn, storedriver.TakeResult{Operation: rr.Current, Ref: ref})
			refused("approved")
			if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code != http.StatusOK {
				t.Fatalf("Continue: %d", rec.Code)
			}
			refused("performed")
		})
	}
}

// W106 W72: the Gate and the endpoint read a sealed ref's revision as the
// store does (storekit.SplitRef), not as everything after its first ".": with
// waiting operations computed (their refs sealed), the status route of an
// approved ref says approved.
func TestSealedRefsRevision(t *testing.T) {
	m := memstore.New(memstore.Config{})
	e := newGateEnv(t, m, newClock())
	page := e.do(e.request(joinedIn, formM, "text/html"))
	_, ref := refOf(t, page)
	if strings.Count(ref, ".") != 2 {
		t.Fatalf("ref %q is not sealed", ref)
	}
	rr := e.lookup(sesIn, ref)
	e.record(sesIn, storedriver.TakeResult{Operation: rr.Current, Ref: ref})
	if code, st := askStatus(t, e.kit, defaultBasePath+"status?ref="+url.QueryEscape(ref), sesIn); code != 200 || st != "approved" {
		t.Errorf("W106 the approved sealed ref: %d %q, want 200 approved", code, st)
	}
	if code, st := askStatus(t, e.kit, statusURLOf(t, page), sesIn); code != 200 || st != "approved" {
		t.Errorf("W106 the page's handle: %d %q, want 200 approved", code, st)
	}
}
