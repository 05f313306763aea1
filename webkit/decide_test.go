package webkit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// The Gate's decision, without a store: what each Session and each answer
// of store.Take become (§2 W11, W12; §4 W53; §6 W97; §7 W143–W145;
// RULES.md "Bounded work").
func TestDecide(t *testing.T) {
	t.Parallel()
	claim, issued := &store.Claim{}, &storedriver.TakeResult{Ref: "ref"}
	down := errors.New("redis: connection refused")
	tests := []struct {
		name   string
		s      Session
		t      *taken
		want   decision
		reason []error // errors.Is(d.reason, each)
	}{
		{name: "W11 no extension: refused", s: sesNoExt,
			want: decision{do: doRefuse, outcome: "extension_required"}, reason: []error{ErrExtensionRequired}},
		{name: "no extension after Take: still refused", s: sesNoExt, t: &taken{res: storedriver.TakeResult{Claim: claim}},
			want: decision{do: doRefuse, outcome: "extension_required"}, reason: []error{ErrExtensionRequired}},
		{name: "declared: take", s: sesIn,
			want: decision{do: doTake}},
		{name: "W97 claim: perform", s: sesIn, t: &taken{res: storedriver.TakeResult{Claim: claim}},
			want: decision{do: doPerform, claim: claim}},
		{name: "W53 issued: ask approval", s: sesIn, t: &taken{res: *issued},
			want: decision{do: doAskApproval, issued: issued}},
		{name: "W145 busy: 503", s: sesIn, t: &taken{res: storedriver.TakeResult{Busy: true}},
			want: decision{do: doRefuse, outcome: "busy"}, reason: []error{ErrBusy}},
		{name: "rate limited: 429, nothing to release", s: sesIn, t: &taken{err: fmt.Errorf("redisstore: %w", storedriver.ErrRateLimited)},
			want: decision{do: doRefuse, outcome: "rate_limited"}, reason: []error{ErrRateLimited, storedriver.ErrRateLimited}},
		{name: "W143 store down: 503, release, log", s: sesIn, t: &taken{err: down},
			want: decision{do: doRefuse, outcome: "unavailable", release: true, fault: down}, reason: []error{ErrStoreUnavailable, down}},
		{name: "W144 claimed but the browser left: release", s: sesIn, t: &taken{res: storedriver.TakeResult{Claim: claim}, gone: context.Canceled},
			want: decision{do: doRefuse, outcome: "unavailable", release: true}, reason: []error{ErrStoreUnavailable, context.Canceled}},
		{name: "gone without a claim: the issued ref still answers", s: sesIn, t: &taken{res: *issued, gone: context.Canceled},
			want: decision{do: doAskApproval, issued: issued}},
		{name: "Take answered nothing: 503, release", s: sesIn, t: &taken{},
			want: decision{do: doRefuse, outcome: "unavailable", release: true}, reason: []error{ErrStoreUnavailable}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.s, tt.t)
			for _, want := range tt.reason {
				if !errors.Is(got.reason, want) {
					t.Errorf("reason %v is not %v", got.reason, want)
				}
			}
			if (got.reason == nil) != (len(tt.reason) == 0) {
				t.Errorf("reason %v, want one only when refusing", got.reason)
			}
			if tt.name == "Take answered nothing: 503, release" && got.fault == nil {
				t.Error("no fault to log")
			}
			got.reason = nil
			if got.issued != nil && tt.want.issued != nil && got.issued.Ref == tt.want.issued.Ref {
				got.issued = tt.want.issued // the same answer of Take
			}
			if tt.want.fault == nil {
				got.fault = nil
			}
			if got != tt.want {
				t.Errorf("decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}
