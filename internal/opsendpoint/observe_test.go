package opsendpoint

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/webkit"
)

// events keeps what the endpoint reports.
type events struct {
	mu  sync.Mutex
	got []webkit.Event
}

func (*events) StoreStep(context.Context, string, time.Duration, error) {}

func (o *events) Observe(_ context.Context, e webkit.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, e)
}

func (o *events) last(t *testing.T) webkit.Event {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		t.Fatal("no event")
	}
	return o.got[len(o.got)-1]
}

// Each answer of the endpoint is one event whose outcome says what the
// agent got, and for a refused approval which check of §6 failed (W111),
// without an ID among its labels.
func TestEndpointEvents(t *testing.T) {
	f := newFixture(t)
	obs := &events{}
	f.ep.Observer = obs
	iss := f.issue("out", "exchange:ord_7Hk2", jacket)
	account := f.issue("in", "cancel:sub_1", `{"subscription":"sub_1"}`)
	approve := approvalOf(iss.Operation.ID, iss.Operation.Revision, "")
	for _, tc := range []struct {
		name string
		send func() response
		want webkit.Event
		code int
	}{
		{"W72 lookup", func() response { return f.post("out", iss.Ref, "") }, webkit.Event{Outcome: "operation"}, 403},
		{"W74 unknown ref", func() response { return f.post("out", "op_nope.rev_nope", "") }, webkit.Event{Outcome: "not_found"}, 400},
		{"W44 challenge", func() response { return f.post("out", account.Ref, "") }, webkit.Event{Outcome: "challenge"}, 401},
		{"W70 no Session", func() response { return f.post("", iss.Ref, "") }, webkit.Event{Outcome: "unauthenticated", Reason: "session"}, 401},
		{"W70 bad token", func() response { return f.post("bad-token", iss.Ref, "") }, webkit.Event{Outcome: "unauthenticated", Reason: "token"}, 401},
		{"keys unavailable", func() response { return f.post("keys-down", iss.Ref, "") }, webkit.Event{Outcome: "unavailable", Reason: "verification"}, 503},
		{"W14 undeclared", func() response {
			return f.do("out", `{"ref":"`+iss.Ref+`"}`, "", func(r *http.Request) { r.Header.Del(headers.Extensions) })
		}, webkit.Event{Outcome: "extension_required"}, 403},
		{"W78 malformed approval", func() response { return f.post("out", iss.Ref, "operation_id=") }, webkit.Event{Outcome: "invalid_request"}, 400},
		{"W77 check 1", func() response { return f.post("otheruser", iss.Ref, approve) }, webkit.Event{Outcome: "refused", Reason: "check1"}, 400},
		{"W100 check 3", func() response {
			return f.post("out", iss.Ref, approvalOf(iss.Operation.ID, "rev_never", ""))
		}, webkit.Event{Outcome: "refused", Reason: "check3"}, 403},
		{"W90 recorded", func() response { return f.post("out", iss.Ref, approve) }, webkit.Event{Outcome: "recorded"}, 204},
		{"W105 status", func() response { return f.post("out", iss.Ref, "") }, webkit.Event{Outcome: "status"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.send()
			if res.status != tc.code {
				t.Fatalf("status %d, want %d: %s", res.status, tc.code, res.raw)
			}
			tc.want.Route = "endpoint"
			if got := obs.last(t); got != tc.want {
				t.Fatalf("observed %+v, want %+v", got, tc.want)
			}
		})
	}

	// The decline hook's refusal (W123) and a store that is down.
	f.ep.Decline = func(context.Context, DeclineRequest) *webkit.Decline { return &webkit.Decline{Reason: "Not online."} }
	other := f.issue("out", "exchange:ord_9", jacket)
	if res := f.post("out", other.Ref, approvalOf(other.Operation.ID, other.Operation.Revision, "")); res.status != 403 {
		t.Fatalf("decline: %d %s", res.status, res.raw)
	}
	if got := obs.last(t); got != (webkit.Event{Route: "endpoint", Outcome: "declined"}) {
		t.Fatalf("decline observed %+v", got)
	}
	f.ep.Store = downStore{}
	if res := f.post("out", other.Ref, ""); res.status != 503 {
		t.Fatalf("store down: %d", res.status)
	}
	if got := obs.last(t); got != (webkit.Event{Route: "endpoint", Outcome: "unavailable", Reason: "store"}) {
		t.Fatalf("store down observed %+v", got)
	}
}
