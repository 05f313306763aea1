package webkit

import (
	"net/url"
	"testing"
	"time"
)

// A recorded approval that hasn't been used up is kept until the approved
// revision's expires_at: the browser's repeat one second before it is
// performed (§6 W102), on every store.
func TestRecordedApprovalKeptUntilExpiresAt(t *testing.T) {
	for _, be := range backends() {
		t.Run("W102 "+be.name, func(t *testing.T) {
			c := newClock()
			e := newGateEnv(t, be.make(t), c)
			iss := e.approve(sesOut, "ord_102", "M")
			c.Set(iss.Operation.ExpiresAt.Add(-time.Second))
			rec := e.do(e.request(joinedOut, url.Values{"order": {"ord_102"}, "size": {"M"}}.Encode(), "text/html"))
			if rec.Code != 200 || e.runs.Load() != 1 {
				t.Fatalf("the repeat a second before expires_at: %d, handler runs %d; want 200 and 1", rec.Code, e.runs.Load())
			}
		})
	}
}
