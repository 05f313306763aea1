package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// Bench runs the benchmarks (Issue, Record, Take+Finish, Lookup) against one
// backend; newHarness is called once per benchmark and once more for each
// b.N the testing package tries. Work a benchmark needs but does not
// measure (issuing the operations Record and Take then use) is done with
// the timer stopped, a batch at a time.
func Bench(b *testing.B, newHarness func(b testing.TB) Harness) {
	now := base
	owner := signedIn

	// The Gate's 403 path for a waiting action: the revision is reused.
	b.Run("Issue", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		actions := benchActions(b, 0, 64)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := Issue(ctx, h.Store, owner, actions[i%len(actions)], now); err != nil {
				b.Fatal(err)
			}
		}
	})

	// The Gate's 403 path for a new action: Take opens an operation,
	// counted against its owner's and its agent's caps.
	b.Run("TakeOpens", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		var actions []storedriver.TakeRequest
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%benchBatch == 0 {
				b.StopTimer()
				actions = benchActions(b, i, benchBatch)
				b.StartTimer()
			}
			res, err := h.Store.Take(ctx, benchOwner(i), actions[i%benchBatch], now)
			if err != nil || res.Ref == "" {
				b.Fatalf("Take: %+v, %v", res, err)
			}
		}
	})

	// The endpoint recording an approval (§6), one operation each.
	b.Run("Record", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		var issued []storedriver.TakeResult
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%benchBatch == 0 {
				b.StopTimer()
				issued, _ = benchIssue(b, ctx, h, i, now, false)
				b.StartTimer()
			}
			is := issued[i%benchBatch]
			rep, err := h.Store.Record(ctx, benchOwner(i), is.Ref, approvalOf(is.Operation), now, storedriver.RecordOptions{})
			if err != nil || rep.Result != storedriver.Recorded {
				b.Fatalf("Record: %v, %v", rep.Result, err)
			}
		}
	})

	// The Gate's performing path: take the recorded approval, then finish.
	b.Run("TakeFinish", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		var actions []storedriver.TakeRequest
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%benchBatch == 0 {
				b.StopTimer()
				_, actions = benchIssue(b, ctx, h, i, now, true)
				b.StartTimer()
			}
			res, err := h.Store.Take(ctx, benchOwner(i), actions[i%benchBatch], now)
			if err != nil || res.Claim == nil {
				b.Fatalf("Take: %+v, %v", res, err)
			}
			if err := h.Store.Finish(ctx, *res.Claim, store.OutcomePerformed, now); err != nil {
				b.Fatal(err)
			}
		}
	})

	// The endpoint's lookup of an approved operation.
	b.Run("Lookup", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		issued, _ := benchIssue(b, ctx, h, 0, now, true)
		is := issued[0]
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, found, err := h.Store.Lookup(ctx, benchOwner(0), is.Ref, now); err != nil || !found {
				b.Fatalf("Lookup: %v, %v", found, err)
			}
		}
	})

	// The Gate's 403 path while the owner has 1 or 1,000 approvals of other
	// terms (webkit/RULES.md "Bounded work"): approvals are filed by action
	// and terms, so the second costs about what the first does (target:
	// ≤ 2×). Fifteen of the 1,000 are on the same action (the operation's
	// cap of approvals allows no more), the rest on other actions.
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("TakeAmong%d", n), func(b *testing.B) {
			h := newHarness(b)
			ctx := b.Context()
			benchOthers(b, ctx, h, n, now)
			a := action(b, "order:target", `{"size":"S"}`)
			a.Lifetime = time.Hour
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				res, err := h.Store.Take(ctx, owner, a, now)
				if err != nil || res.Ref == "" {
					b.Fatalf("Take: %+v, %v", res, err)
				}
			}
		})
	}
}

// benchOthers records n approvals of terms other than the target's for
// owner (signedIn): up to MaxApprovalsPerOperation-1 on the target's action
// "order:target", the rest MaxApprovalsPerOperation per other action.
func benchOthers(b *testing.B, ctx context.Context, h Harness, n int, now time.Time) {
	b.Helper()
	per := storekit.MaxApprovalsPerOperation
	for i := range n {
		key := "order:target"
		if i >= per-1 {
			key = fmt.Sprint("order:other-", (i-(per-1))/per)
		}
		a := action(b, key, fmt.Sprintf(`{"size":"XL","n":%d}`, i))
		a.Lifetime = time.Hour
		is, err := Issue(ctx, h.Store, signedIn, a, now)
		if err != nil {
			b.Fatal(err)
		}
		if rep, err := h.Store.Record(ctx, signedIn, is.Ref, approvalOf(is.Operation), now, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			b.Fatalf("Record %d: %v, %v", i, rep.Result, err)
		}
	}
}

// benchOwner is the owner of the benchmarks' i-th operation: 64 operations
// per User and 8,192 per agent, under the caps of open operations.
func benchOwner(i int) store.Owner {
	return store.Owner{Agent: fmt.Sprint("agent-", i/8192), User: fmt.Sprint("user-", i/64), Account: "acct-1"}
}

// benchBatch is how many operations are set up at a time with the timer
// stopped.
const benchBatch = 1024

// benchActions returns n actions with distinct keys, numbered from.
func benchActions(b *testing.B, from, n int) []storedriver.TakeRequest {
	b.Helper()
	out := make([]storedriver.TakeRequest, n)
	for i := range out {
		out[i] = action(b, fmt.Sprint("order:", from+i), fmt.Sprintf(`{"order":%d,"size":"M"}`, from+i))
		out[i].Lifetime = time.Hour
	}
	return out
}

// benchIssue issues benchBatch operations, one per action numbered from
// (the i-th for benchOwner(i)), and records their approvals when approve is
// set.
func benchIssue(b *testing.B, ctx context.Context, h Harness, from int, now time.Time, approve bool) ([]storedriver.TakeResult, []storedriver.TakeRequest) {
	b.Helper()
	actions := benchActions(b, from, benchBatch)
	out := make([]storedriver.TakeResult, len(actions))
	for i, a := range actions {
		o := benchOwner(from + i)
		is, err := Issue(ctx, h.Store, o, a, now)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = is
		if approve {
			if _, err := h.Store.Record(ctx, o, is.Ref, approvalOf(is.Operation), now, storedriver.RecordOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return out, actions
}
