package webkit

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/opsgate/opsgate/internal/storekit"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/store"
)

// limitedStore is a store whose owner has reached its cap of open
// operations.
type limitedStore struct{ store.Store }

func (limitedStore) Take(context.Context, store.Owner, store.Action, time.Time) (store.TakeResult, error) {
	return store.TakeResult{}, fmt.Errorf("redisstore: take: %w", store.ErrRateLimited)
}

// Over the cap of open operations (webkit/RULES.md "Bounded work"): 429
// with Retry-After, {"error":"rate_limited"} for a script, nothing run.
func TestGateRateLimited(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, limitedStore{store.NewMemory()}, newClock())
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

// A real store over the cap: the 101st open operation of one agent and
// User is refused, and the first hundred still work.
func TestGateOwnerCap(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, store.NewMemory(), newClock())
	for i := range storekit.DefaultMaxOpenPerOwner {
		if rec := e.do(e.request(joinedIn, fmt.Sprintf("order=ord_%d&size=M", i), "text/html")); rec.Code != 403 {
			t.Fatalf("operation %d: %d", i, rec.Code)
		}
	}
	if rec := e.do(e.request(joinedIn, "order=ord_over&size=M", "text/html")); rec.Code != 429 {
		t.Errorf("over the cap: %d, want 429", rec.Code)
	}
	if rec := e.do(e.request(joinedIn, "order=ord_0&size=M", "text/html")); rec.Code != 403 {
		t.Errorf("an open operation again: %d, want 403", rec.Code)
	}
}
