package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

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
			if _, err := h.Store.Issue(ctx, owner, actions[i%len(actions)], now); err != nil {
				b.Fatal(err)
			}
		}
	})

	// The endpoint recording an approval (§6), one operation each.
	b.Run("Record", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		var issued []store.Issued
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%benchBatch == 0 {
				b.StopTimer()
				issued, _ = benchIssue(b, ctx, h, i, now, false)
				b.StartTimer()
			}
			is := issued[i%benchBatch]
			rep, err := h.Store.Record(ctx, owner, is.Ref, approvalOf(is.Operation), now, store.RecordOptions{})
			if err != nil || rep.Result != store.Recorded {
				b.Fatalf("Record: %v, %v", rep.Result, err)
			}
		}
	})

	// The Gate's performing path: take the recorded approval, then finish.
	b.Run("TakeFinish", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		var actions []store.Action
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%benchBatch == 0 {
				b.StopTimer()
				_, actions = benchIssue(b, ctx, h, i, now, true)
				b.StartTimer()
			}
			res, err := h.Store.Take(ctx, owner, actions[i%benchBatch], now)
			if err != nil || res.Claim == nil {
				b.Fatalf("Take: %+v, %v", res, err)
			}
			if err := h.Store.Finish(ctx, *res.Claim, store.Done, now); err != nil {
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
			if _, found, err := h.Store.Lookup(ctx, owner, is.Ref, now); err != nil || !found {
				b.Fatalf("Lookup: %v, %v", found, err)
			}
		}
	})
}

// benchBatch is how many operations are set up at a time with the timer
// stopped.
const benchBatch = 1024

// benchActions returns n actions with distinct keys, numbered from.
func benchActions(b *testing.B, from, n int) []store.Action {
	b.Helper()
	out := make([]store.Action, n)
	for i := range out {
		out[i] = action(b, fmt.Sprint("order:", from+i), fmt.Sprintf(`{"order":%d,"size":"M"}`, from+i))
		out[i].Lifetime = time.Hour
	}
	return out
}

// benchIssue issues benchBatch operations, one per action numbered from,
// and records their approvals when approve is set.
func benchIssue(b *testing.B, ctx context.Context, h Harness, from int, now time.Time, approve bool) ([]store.Issued, []store.Action) {
	b.Helper()
	actions := benchActions(b, from, benchBatch)
	out := make([]store.Issued, len(actions))
	for i, a := range actions {
		is, err := h.Store.Issue(ctx, signedIn, a, now)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = is
		if approve {
			if _, err := h.Store.Record(ctx, signedIn, is.Ref, approvalOf(is.Operation), now, store.RecordOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return out, actions
}
