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
// the timer stopped.
func Bench(b *testing.B, newHarness func(b testing.TB) Harness) {
	now := base
	owner := signedIn

	// The Gate's 403 path for a waiting action: the revision is reused.
	b.Run("Issue", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		actions := benchActions(b, 64)
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
		issued := benchIssue(b, ctx, h, b.N, now)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			rep, err := h.Store.Record(ctx, owner, issued[i].Ref, approvalOf(issued[i].Operation), now, store.RecordOptions{})
			if err != nil || rep.Result != store.Recorded {
				b.Fatalf("Record: %v, %v", rep.Result, err)
			}
		}
	})

	// The Gate's performing path: take the recorded approval, then finish.
	b.Run("TakeFinish", func(b *testing.B) {
		h := newHarness(b)
		ctx := b.Context()
		issued := benchIssue(b, ctx, h, b.N, now)
		actions := benchActions(b, b.N)
		for _, is := range issued {
			if _, err := h.Store.Record(ctx, owner, is.Ref, approvalOf(is.Operation), now, store.RecordOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			res, err := h.Store.Take(ctx, owner, actions[i], now)
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
		is := benchIssue(b, ctx, h, 1, now)[0]
		if _, err := h.Store.Record(ctx, owner, is.Ref, approvalOf(is.Operation), now, store.RecordOptions{}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, found, err := h.Store.Lookup(ctx, owner, is.Ref, now); err != nil || !found {
				b.Fatalf("Lookup: %v, %v", found, err)
			}
		}
	})
}

// benchActions returns n actions with distinct keys.
func benchActions(b *testing.B, n int) []store.Action {
	b.Helper()
	out := make([]store.Action, n)
	for i := range out {
		out[i] = action(b, fmt.Sprint("order:", i), fmt.Sprintf(`{"order":%d,"size":"M"}`, i))
		out[i].Lifetime = time.Hour
	}
	return out
}

// benchIssue issues n operations, one per action of benchActions.
func benchIssue(b *testing.B, ctx context.Context, h Harness, n int, now time.Time) []store.Issued {
	b.Helper()
	out := make([]store.Issued, n)
	for i, a := range benchActions(b, n) {
		is, err := h.Store.Issue(ctx, signedIn, a, now)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = is
	}
	return out
}
