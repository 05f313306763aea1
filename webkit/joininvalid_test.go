package webkit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
)

// outcomes is an Observer that keeps the Gate's events.
type outcomes struct {
	mu  sync.Mutex
	got []Event
}

func (o *outcomes) Observe(_ context.Context, e Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, e)
}
func (o *outcomes) StoreStep(context.Context, string, time.Duration, error) {}

func (o *outcomes) last() Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		return Event{}
	}
	return o.got[len(o.got)-1]
}

// A join cookie that is there but that this server can't accept makes no
// ordinary browser: a gated request is refused with the page that says to
// join again (ErrJoinInvalid), and never reaches the handler; a request
// describe doesn't gate still does.
func TestGateRefusesAJoinItCantAccept(t *testing.T) {
	t.Parallel()
	c := newClock()
	e := newGateEnv(t, memstore.New(memstore.Config{}), c)
	obs := &outcomes{}
	e.kit.Observer = obs
	good := joinCookie(t, e.kit, sesOut)
	otherKit := New([]byte("another hash key of 32 bytes...."), []byte("another enc key of 32 bytes....."))
	otherKeys := joinCookie(t, otherKit, sesOut)
	name := e.kit.Sessions.(*CookieSessions).name()
	tampered := *good
	tampered.Value = good.Value[:len(good.Value)-2] + "AA"
	tests := []struct {
		name   string
		cookie *http.Cookie
		move   time.Duration
	}{
		{"expired past the skew", good, defaultJoinMaxAge + joinSkew + time.Second},
		{"made with other keys", otherKeys, 0},
		{"tampered", &tampered, 0},
		{"garbage", &http.Cookie{Name: name, Value: "not-a-cookie"}, 0},
		{"empty", &http.Cookie{Name: name, Value: ""}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Add(tt.move)
			defer c.Add(-tt.move)
			for _, accept := range []string{"text/html", "application/json"} {
				r := e.request(notJoined, formM, accept)
				r.AddCookie(tt.cookie)
				rec := e.do(r)
				if rec.Code != http.StatusForbidden || rec.Header().Get("Poppy-Operation") != "" || e.runs.Load() != 0 {
					t.Fatalf("%s: %d, Poppy-Operation %q, ran %d; want 403, none, nothing run", accept, rec.Code, rec.Header().Get("Poppy-Operation"), e.runs.Load())
				}
				if ev := obs.last(); ev.Outcome != "join_invalid" || ev.Kind != "other" {
					t.Errorf("Observer saw %+v, want join_invalid", ev)
				}
				if accept == "text/html" && !strings.Contains(rec.Body.String(), "join this browser to the site again") {
					t.Errorf("page: %s", rec.Body)
				}
				var body map[string]string
				if accept == "application/json" && (json.Unmarshal(rec.Body.Bytes(), &body) != nil || body["error"] != "join_invalid") {
					t.Errorf("body: %s", rec.Body)
				}
			}
			// Not gated: the handler's, as for anyone.
			r := e.request(notJoined, "", "")
			r.Method = http.MethodGet
			r.AddCookie(tt.cookie)
			if rec := e.do(r); rec.Code != http.StatusOK || e.runs.Load() != 1 {
				t.Fatalf("not gated: %d, ran %d", rec.Code, e.runs.Load())
			}
			e.runs.Store(0)
		})
	}
	// The website's own answer, from the one refusal handler.
	e.kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !errors.Is(FailureReason(r), ErrJoinInvalid) {
			e.kit.Refuse(w, r)
			return
		}
		http.Error(w, "join again, please", http.StatusForbidden)
	})
	r := e.request(notJoined, formM, "")
	r.AddCookie(otherKeys)
	if rec := e.do(r); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "join again, please") || e.runs.Load() != 0 {
		t.Fatalf("Refused: %d %s, ran %d", rec.Code, rec.Body, e.runs.Load())
	}
}

// W56: a website whose gated handlers are its own approval flow says so
// (Kit.OwnFlowInHandler), and only then does the Gate hand a browser with
// its own login to the handler.
func TestOwnFlowInHandler(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	obs := &outcomes{}
	e.kit.Observer = obs
	rec := e.do(e.request(ownLogin, formM, "text/html"))
	if rec.Code != http.StatusForbidden || e.runs.Load() != 0 || obs.last().Outcome != "own_flow" {
		t.Fatalf("default: %d, ran %d, %+v; want 403, nothing run, own_flow", rec.Code, e.runs.Load(), obs.last())
	}
	e.kit.OwnFlowInHandler = true
	rec = e.do(e.request(ownLogin, formM, "text/html"))
	if rec.Code != http.StatusOK || e.runs.Load() != 1 || obs.last() != (Event{Route: routeGate, Outcome: "passed", Reason: "own_login"}) {
		t.Fatalf("OwnFlowInHandler: %d, ran %d, %+v; want the handler", rec.Code, e.runs.Load(), obs.last())
	}
	select {
	case cl := <-e.claim:
		t.Fatalf("the own flow performed operation %s", cl.Operation.ID)
	default:
	}
}
