package endpoint

import (
	"fmt"
	"testing"

	"github.com/opsgate/opsgate/store"
)

// An operation takes at most store.MaxApprovalsPerOperation approvals
// (webkit/RULES.md "Bounded work"): one more gets 429
// {"error":"rate_limited"} with Retry-After, and nothing is recorded.
func TestApprovalsCapped(t *testing.T) {
	f := newFixture(t)
	var last store.Issued
	for i := range store.MaxApprovalsPerOperation + 1 {
		last = f.issue("in", "exchange:ord_7Hk2", fmt.Sprintf(`{"n":%d}`, i))
		res := f.post("in", last.Ref, approvalOf(last.Operation.ID, last.Operation.Revision, ""))
		if i < store.MaxApprovalsPerOperation {
			res.expect(t, 204, "")
			continue
		}
		res.expect(t, 429, "rate_limited")
		if res.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	rec, _, err := f.store.Lookup(t.Context(), sessions["in"].Owner(), last.Ref, f.clock())
	if err != nil || len(rec.Approvals) != store.MaxApprovalsPerOperation {
		t.Errorf("approvals = %d (%v), want %d", len(rec.Approvals), err, store.MaxApprovalsPerOperation)
	}
}
