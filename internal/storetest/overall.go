package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// OverallCaps checks the overall caps, which bound what every agent
// together can make a store hold (webkit/RULES.md "Bounded work"):
// newHarness returns a fresh store whose cap of open operations across
// agents is 3 and whose cap of single-use markers is 3. client_ids cost
// nothing, so made-up agents, each under its own caps, must still meet
// these: past one, a call that would store one more gets
// storedriver.ErrRateLimited (or RateLimited) and stores nothing; a performed
// operation, or one or a marker past its expiry, makes room again.
func OverallCaps(t *testing.T, newHarness func(t *testing.T) Harness) {
	madeUp := func(i int) store.Owner {
		return store.Owner{Agent: fmt.Sprint("https://made-up-", i, ".example/"), User: "u"}
	}
	t.Run("open operations", func(t *testing.T) {
		e := &env{t: t, h: newHarness(t)}
		// A computed operation is stored by its first approval: three
		// agents' are.
		var first storedriver.TakeResult
		var firstAction storedriver.TakeRequest
		for i := range 3 {
			a := action(t, "k", `{"n":1}`)
			is := e.issue(madeUp(i), a, at(0))
			e.approve(madeUp(i), is, at(time.Second))
			if i == 0 {
				first, firstAction = is, a
			}
		}
		// A fourth agent's approval is refused, and stores nothing: its
		// ref stays unknown... and a stored one (terms too long for a ref)
		// is refused when it would open.
		is := e.issue(madeUp(3), action(t, "k", `{"n":1}`), at(2*time.Second))
		e.wantRecord(madeUp(3), is.Ref, approvalOf(is.Operation), at(2*time.Second), storedriver.RateLimited)
		if _, err := e.client(1).Take(e.ctx(), madeUp(4), storedAction(t, "k", `{}`), at(2*time.Second)); !errors.Is(err, storedriver.ErrRateLimited) {
			t.Fatalf("a stored operation past the overall cap: %v, want ErrRateLimited", err)
		}
		if _, err := Issue(e.ctx(), e.h.Store, madeUp(4), storedAction(t, "k", `{}`), at(2*time.Second)); !errors.Is(err, storedriver.ErrRateLimited) {
			t.Fatalf("Issue past the overall cap: %v, want ErrRateLimited", err)
		}
		// One performed makes room.
		c := e.claim(madeUp(0), firstAction, at(3*time.Second))
		if c.Operation.ID != first.Operation.ID {
			t.Fatalf("claimed %s, want %s", c.Operation.ID, first.Operation.ID)
		}
		e.finish(c, store.OutcomePerformed, at(3*time.Second))
		is = e.issue(madeUp(3), action(t, "k", `{"n":1}`), at(4*time.Second))
		e.approve(madeUp(3), is, at(4*time.Second))
		// Full again; once every first revision has expired (the
		// lifetime, and the count's minute), there is room for more.
		is = e.issue(madeUp(5), action(t, "k", `{"n":1}`), at(5*time.Second))
		e.wantRecord(madeUp(5), is.Ref, approvalOf(is.Operation), at(5*time.Second), storedriver.RateLimited)
		later := at(lifetime + 2*time.Minute)
		if e.h.Advance != nil {
			e.h.Advance(lifetime + 2*time.Minute)
		}
		is = e.issue(madeUp(5), action(t, "k", `{"n":1}`), later)
		e.approve(madeUp(5), is, later)
	})
	t.Run("single-use markers", func(t *testing.T) {
		e := &env{t: t, h: newHarness(t)}
		until := at(time.Minute)
		for i := range 3 {
			if first, err := e.client(i).UseOnce(e.ctx(), fmt.Sprint("jti-", i), until, at(0)); err != nil || !first {
				t.Fatalf("UseOnce %d: %v %v", i, first, err)
			}
		}
		first, err := e.client(3).UseOnce(e.ctx(), "jti-3", until, at(time.Second))
		if !errors.Is(err, storedriver.ErrRateLimited) || !errors.Is(err, storekit.ErrOverall) || first {
			t.Fatalf("a fourth marker: %v %v, want ErrRateLimited", first, err)
		}
		// An approval with its request's single-use key: refused too,
		// before anything is recorded.
		o := madeUp(0)
		is := e.issue(o, action(t, "k", `{}`), at(time.Second))
		rep, err := e.client(1).Record(e.ctx(), o, is.Ref, approvalOf(is.Operation), at(time.Second),
			storedriver.RecordOptions{Once: storekit.OnceKey(o.Agent, o.User, "jti-4"), OnceUntil: until})
		if err != nil || rep.Result != storedriver.RateLimited {
			t.Fatalf("Record with a fourth marker: %v %v, want rate limited", rep.Result, err)
		}
		// Past their until (and the count's minute), room again.
		later := until.Add(2 * time.Minute)
		if e.h.Advance != nil {
			e.h.Advance(3 * time.Minute)
		}
		if first, err := e.client(2).UseOnce(e.ctx(), "jti-5", later.Add(time.Minute), later); err != nil || !first {
			t.Fatalf("UseOnce once the others expired: %v %v", first, err)
		}
		rep, err = e.client(1).Record(e.ctx(), o, is.Ref, approvalOf(is.Operation), later,
			storedriver.RecordOptions{Once: storekit.OnceKey(o.Agent, o.User, "jti-6"), OnceUntil: later.Add(time.Minute)})
		if err != nil || rep.Result == storedriver.RateLimited || rep.Result == storedriver.Replayed {
			t.Fatalf("Record once the others expired: %v %v", rep.Result, err)
		}
	})
}
