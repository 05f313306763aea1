package opsendpoint

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// An operation takes at most storekit.MaxApprovalsPerOperation approvals
// (webkit/RULES.md "Bounded work"): one more gets 429
// {"error":"rate_limited"} with Retry-After, and nothing is recorded.
func TestApprovalsCapped(t *testing.T) {
	f := newFixture(t)
	var last storedriver.TakeResult
	for i := range storekit.MaxApprovalsPerOperation + 1 {
		last = f.issue("in", "exchange:ord_7Hk2", fmt.Sprintf(`{"n":%d}`, i))
		res := f.post("in", last.Ref, approvalOf(last.Operation.ID, last.Operation.Revision, ""))
		if i < storekit.MaxApprovalsPerOperation {
			res.expect(t, 204, "")
			continue
		}
		res.expect(t, 429, "rate_limited")
		if res.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	rec, _, err := storedriver.Steps(f.store).Lookup(t.Context(), sessions["in"].Owner(), last.Ref, f.clock())
	if err != nil || len(rec.Approvals) != storekit.MaxApprovalsPerOperation {
		t.Errorf("approvals = %d (%v), want %d", len(rec.Approvals), err, storekit.MaxApprovalsPerOperation)
	}
}

// stalledStore never answers Lookup or Record until released, as a
// SIGSTOPped Redis whose client has no deadline of its own.
type stalledStore struct {
	storedriver.Store
	release chan struct{}
}

func (s stalledStore) Lookup(ctx context.Context, o store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	<-s.release
	return s.Store.Lookup(ctx, o, ref, now)
}

func (s stalledStore) Record(ctx context.Context, o store.Owner, ref string, a store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	<-s.release
	return s.Store.Record(ctx, o, ref, a, now, opts)
}

// The endpoint New builds has the kit's StoreTimeout on every store call: a
// stalled store gets 503 with Retry-After within about StoreTimeout, for a
// lookup and for an approval.
func TestStoreStallBounded(t *testing.T) {
	t.Parallel()
	st := stalledStore{Store: memstore.New(memstore.Config{}).Steps(), release: make(chan struct{})}
	defer close(st.release)
	kit := webkit.New()
	kit.Store = storedriver.AsStore(st)
	kit.StoreTimeout = 100 * time.Millisecond
	kit.Logger = quiet
	f := newFixture(t)
	f.store = storedriver.AsStore(st.Store)
	f.ep = New(kit, sessions)
	f.ep.Clock, f.ep.Logger = f.clock, quiet
	is := f.issue("in", "exchange:ord_7Hk2", jacket)
	for _, approval := range []string{"", approvalOf(is.Operation.ID, is.Operation.Revision, "")} {
		start := time.Now()
		res := f.post("in", is.Ref, approval)
		took := time.Since(start)
		res.expect(t, 503, "temporarily_unavailable")
		if res.header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		if took > kit.StoreTimeout+time.Second { // ≤ +250 ms on a quiet machine; slack for CI
			t.Errorf("answered after %v with StoreTimeout %v", took, kit.StoreTimeout)
		}
	}
}
