package spans

import (
	"context"
	"net/http/httptest"
	"testing"
)

type otherKey struct{}

// Untraced, the core's hooks cost a context lookup and no allocation.
func TestUntracedAllocatesNothing(t *testing.T) {
	ctx := context.WithValue(t.Context(), otherKey{}, 1)
	var members []context.Context
	if n := testing.AllocsPerRun(100, func() {
		c, sp := Start(ctx, "opsgate.store.take", Labels{Step: "take"})
		sp.End(Labels{Outcome: "x"}, nil)
		c2, sp2 := Shared(c, "opsgate.redis.round_trip", members, Labels{Batch: 2})
		sp2.End(Labels{}, nil)
		if c != ctx || c2 != ctx {
			t.Fatal("an untraced hook changed the context")
		}
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
	r := httptest.NewRequest("GET", "/", nil)
	if r2, sp := Begin(r, nil, "opsgate.gate", Labels{}); r2 != r || sp != None {
		t.Error("Begin with no Tracer changed the request")
	}
}

// recorder is a Tracer that records what it was asked.
type recorder struct{ started []string }

func (r *recorder) StartSpan(ctx context.Context, name string, l Labels) (context.Context, Span) {
	r.started = append(r.started, name)
	return context.WithValue(ctx, r, name), None
}

func (r *recorder) StartShared(ctx context.Context, name string, members []context.Context, l Labels) (context.Context, Span) {
	r.started = append(r.started, name)
	return ctx, None
}

// Begin puts the Kit's Observer, when it traces, in the request's
// context, where Start and Shared find it.
func TestBeginCarriesTheTracer(t *testing.T) {
	tr := &recorder{}
	r, _ := Begin(httptest.NewRequest("GET", "/", nil), tr, "opsgate.gate", Labels{Route: "gate"})
	ctx, _ := Start(r.Context(), "opsgate.store.take", Labels{Step: "take"})
	Shared(context.Background(), "opsgate.redis.round_trip", []context.Context{context.Background(), ctx}, Labels{Batch: 2})
	if got := len(tr.started); got != 3 || From(ctx) != tr {
		t.Errorf("started %v", tr.started)
	}
}
