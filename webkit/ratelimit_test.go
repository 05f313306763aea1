package webkit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// limitedStore is a store whose owner has reached its cap of open
// operations.
type limitedStore struct{ storedriver.Store }

func (limitedStore) Take(context.Context, store.Owner, storedriver.TakeRequest, time.Time) (storedriver.TakeResult, error) {
	return storedriver.TakeResult{}, fmt.Errorf("redisstore: take: %w", storedriver.ErrRateLimited)
}

// Over the cap of open operations (webkit/RULES.md "Bounded work"): 429
// with Retry-After, {"error":"rate_limited"} for a script, nothing run.
func TestGateRateLimited(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, storedriver.AsStore(limitedStore{memstore.New(memstore.Config{}).Steps()}), newClock())
	e.kit.Chrome.SiteName = "Acme Hardware"
	rec := e.do(e.request(joinedIn, formM, "text/html"))
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || e.runs.Load() != 0 {
		t.Errorf("page: %d Retry-After %q runs %d", rec.Code, rec.Header().Get("Retry-After"), e.runs.Load())
	}
	if body := rec.Body.String(); !strings.Contains(body, "Acme Hardware") || !strings.Contains(body, "Too many actions are waiting") {
		t.Errorf("the 429 page does not wear the kit's Chrome: %s", body)
	}
	if _, ref := refOf(t, rec); ref != "" {
		t.Errorf("rate limited but a ref: %s", ref)
	}
	rec = e.do(e.request(joinedIn, formM, "application/json"))
	var body map[string]string
	if rec.Code != 429 || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body["error"] != "rate_limited" {
		t.Errorf("script: %d %s", rec.Code, rec.Body)
	}
}

// A real store over the cap of open operations (webkit/RULES.md "Bounded
// work"), which counts an operation when it stores it. A waiting one is
// computed into its ref and stored by its first approval: past the cap
// the Gate still answers 403 with a ref (nothing is stored), and that
// approval is refused (RateLimited: the endpoint's 429). One stored when
// its ref is returned (terms too long for a ref) gets the Gate's 429. The
// first hundred still work.
func TestGateOwnerCap(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	gated := func(form string) storedriver.TakeResult {
		t.Helper()
		rec := e.do(e.request(joinedIn, form, "text/html"))
		if rec.Code != 403 {
			t.Fatalf("%.40s: %d, want 403", form, rec.Code)
		}
		_, ref := refOf(t, rec)
		return storedriver.TakeResult{Operation: e.lookup(sesIn, ref).Current, Ref: ref}
	}
	for i := range storekit.DefaultMaxOpenPerOwner {
		e.record(sesIn, gated(fmt.Sprintf("order=ord_%d&size=M", i)))
	}
	over := gated("order=ord_over&size=M")
	rep, err := storedriver.Steps(e.kit.Store).Record(context.Background(), sesIn.Owner(), over.Ref, store.Approval{
		OperationID: over.Operation.ID, Revision: over.Operation.Revision, Approver: "user",
	}, e.clock.Now(), storedriver.RecordOptions{})
	if err != nil || rep.Result != storedriver.RateLimited {
		t.Errorf("the approval over the cap: %v %v, want rate limited", rep.Result, err)
	}
	long := "order=ord_" + strings.Repeat("x", storekit.MaxRefLength) + "&size=M"
	if rec := e.do(e.request(joinedIn, long, "text/html")); rec.Code != 429 || e.runs.Load() != 0 {
		t.Errorf("over the cap, stored when its ref is returned: %d (runs %d), want 429", rec.Code, e.runs.Load())
	}
	if rec := e.do(e.request(joinedIn, "order=ord_0&size=M", "text/html")); rec.Code != 200 || e.runs.Load() != 1 {
		t.Errorf("an approved operation again: %d (runs %d), want 200, performed", rec.Code, e.runs.Load())
	}
}

// overallObserver keeps the Gate's events.
type overallObserver struct {
	mu     sync.Mutex
	events []Event
}

func (o *overallObserver) Observe(_ context.Context, e Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *overallObserver) StoreStep(context.Context, string, time.Duration, error) {}

// The store's overall cap of open operations, across agents (made-up
// client_ids cost nothing): past it, a request that would store one more
// gets 429 with Retry-After, runs nothing, and the Observer sees
// rate_limited with Reason "overall" (the cap reached).
func TestGateOverallCap(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Config{MaxOpen: 1})
	e := newGateEnv(t, st, newClock())
	obs := &overallObserver{}
	e.kit.Observer = obs
	long := "order=ord_" + strings.Repeat("x", storekit.MaxRefLength) + "&size=M" // stored when its ref is returned
	ask := func(s Session) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/exchange", strings.NewReader(long))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(joinCookie(t, e.kit, s))
		return e.do(r)
	}
	if rec := ask(sesIn); rec.Code != 403 {
		t.Fatalf("the first agent's: %d, want 403", rec.Code)
	}
	other := sesIn
	other.ID, other.Agent = "ses_made_up", "https://made-up.example/"
	rec := ask(other)
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || e.runs.Load() != 0 {
		t.Fatalf("another agent's past the overall cap: %d Retry-After %q runs %d, want 429", rec.Code, rec.Header().Get("Retry-After"), e.runs.Load())
	}
	last := obs.events[len(obs.events)-1]
	if last.Outcome != "rate_limited" || last.Reason != "overall" {
		t.Errorf("the Observer saw %+v, want rate_limited, overall", last)
	}
}
