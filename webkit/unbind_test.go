package webkit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/store"
)

// A join cookie that Unbind ended stops working when a copy of it is
// replayed, on every web server that shares the store, until the cookie
// would have expired: the browser that sends it is an ordinary one (W07),
// whose request the Gate hands to the handler without a Poppy-Operation
// and without a claim, and the status route knows no ref for it (W93).
// Before, the copy read as the binding for its whole 12 h lifetime.
//
// Both stores of this module check the marker inside the Gate's Take
// (storekit.MarkedInTake); "/other store" is one that can't, whose check
// is a UseOnce of its own (storewrap.Marked).
func TestUnbindEndsAReplayedCookie(t *testing.T) {
	type variant struct {
		name string
		wrap func(store.Store) store.Store
	}
	var variants []variant
	for _, be := range backends() {
		variants = append(variants,
			variant{be.name, func(s store.Store) store.Store { return s }},
			variant{be.name + "/other store", func(s store.Store) store.Store { return storedriver.AsStore(plainStore{storedriver.Steps(s)}) }})
	}
	for i, v := range variants {
		be := backends()[i/2]
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			if be.name == "redis" {
				sharedRedis(t)
			}
			moreOf := be.more(t)
			more := func() store.Store { return v.wrap(moreOf()) }
			if got := storewrap.MarksInTake(storedriver.Steps(more())); got != (v.name == be.name) {
				t.Fatalf("MarksInTake = %v", got)
			}
			c := newClock()
			a, b := newGateEnv(t, more(), c), newGateEnv(t, more(), c) // two web servers
			form := url.Values{"order": {"A1"}, "size": {"M"}}.Encode()
			ck := joinCookie(t, a.kit, sesOut)
			replay := func(e *gateEnv) *httptest.ResponseRecorder {
				r := httptest.NewRequest("POST", "/exchange", strings.NewReader(form))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.AddCookie(ck)
				return e.do(r)
			}
			// Joined: the gated action waits for approval.
			rec := replay(b)
			if rec.Code != http.StatusForbidden || rec.Header().Get("Poppy-Operation") == "" {
				t.Fatalf("joined: %d %q, want 403 with Poppy-Operation", rec.Code, rec.Header().Get("Poppy-Operation"))
			}
			_, ref := refOf(t, rec)
			status := func(e *gateEnv, ref string) int {
				r := httptest.NewRequest("GET", "/_opsgate/status?ref="+url.QueryEscape(ref), nil)
				r.AddCookie(ck)
				w := httptest.NewRecorder()
				e.kit.serveStatus(w, r)
				return w.Code
			}
			if got := status(b, ref); got != http.StatusOK {
				t.Fatalf("status before Unbind: %d, want 200", got)
			}

			// The browser leaves, on server a.
			out := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/leave", nil)
			r.AddCookie(ck)
			if err := a.kit.Sessions.Unbind(out, r); err != nil {
				t.Fatalf("Unbind: %v", err)
			}
			for _, gone := range out.Result().Cookies() {
				if gone.MaxAge >= 0 {
					t.Errorf("Unbind left cookie %s with MaxAge %d", gone.Name, gone.MaxAge)
				}
			}

			// The copy, replayed on server b an hour later.
			c.Add(time.Hour)
			// An approval waits: were the copy still the binding, it would
			// perform the operation.
			iss := a.issue(sesOut, "A1", "M")
			a.record(sesOut, iss)
			for _, e := range []*gateEnv{b, a} {
				before := e.runs.Load()
				rec := replay(e)
				if rec.Code != http.StatusOK || rec.Header().Get("Poppy-Operation") != "" || e.runs.Load() != before+1 {
					t.Fatalf("W07 replayed copy: %d, Poppy-Operation %q, ran %d, want the handler's 200 as for an ordinary browser",
						rec.Code, rec.Header().Get("Poppy-Operation"), e.runs.Load()-before)
				}
				select {
				case cl := <-e.claim:
					t.Fatalf("the replayed copy performed operation %s", cl.Operation.ID)
				default:
				}
				if got := status(e, iss.Ref); got != http.StatusNotFound {
					t.Errorf("W93 status with the replayed copy: %d, want 404", got)
				}
				r := httptest.NewRequest("GET", "/", nil)
				r.AddCookie(ck)
				if s, ok := e.kit.Sessions.SessionOf(r); ok {
					t.Errorf("SessionOf the replayed copy = %s, want no binding", s.ID)
				}
			}
			// Only that binding ended: the Session's other browser, or
			// this one joined again, is joined.
			if rec := b.do(b.request(joinedOut, form, "")); rec.Code != http.StatusOK || len(b.claim) != 1 {
				t.Errorf("a new binding: %d with %d claims, want the approval performed", rec.Code, len(b.claim))
			}
		})
	}
}

// Unbind's marker lasts as long as the cookie would have: Unbind asks the
// store to keep it until the join time plus MaxAge, and a cookie that
// reads as no binding (none, expired) leaves none.
func TestUnbindMarksUntilTheCookieExpires(t *testing.T) {
	t.Parallel()
	c := newClock()
	st := &onceSpy{Store: memstore.New(memstore.Config{}).Steps()}
	e := newGateEnv(t, storedriver.AsStore(st), c)
	ck := joinCookie(t, e.kit, sesOut)
	c.Add(time.Hour)
	unbind := func(cookies ...*http.Cookie) error {
		r := httptest.NewRequest("POST", "/leave", nil)
		for _, ck := range cookies {
			r.AddCookie(ck)
		}
		return e.kit.Sessions.Unbind(httptest.NewRecorder(), r)
	}
	if err := unbind(ck); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(defaultJoinMaxAge + joinSkew); len(st.until) != 1 || !st.until[0].Equal(want) {
		t.Fatalf("Unbind marked until %v, want once until %v", st.until, want)
	}
	if err := unbind(); err != nil || len(st.until) != 1 {
		t.Fatalf("Unbind without a cookie: %v, %d markers", err, len(st.until))
	}
	c.Add(defaultJoinMaxAge)
	if err := unbind(ck); err != nil || len(st.until) != 1 {
		t.Fatalf("Unbind with an expired cookie: %v, %d markers", err, len(st.until))
	}
	// The store failing: Unbind says so (the cookies are expired anyway).
	ck = joinCookie(t, e.kit, sesOut)
	st.fail = errors.New("store down")
	if err := unbind(ck); !errors.Is(err, st.fail) {
		t.Fatalf("Unbind with the store down: %v", err)
	}
	// And a joined browser's gated request performs nothing: 503.
	rec := e.do(e.request(joinedOut, url.Values{"order": {"A1"}, "size": {"M"}}.Encode(), ""))
	if rec.Code != http.StatusServiceUnavailable || e.runs.Load() != 0 {
		t.Fatalf("W143 store down at the check: %d, ran %d, want 503 and nothing run", rec.Code, e.runs.Load())
	}
}

// onceSpy records the expiry of every UseOnce, and fails UseOnce and
// Marked while fail is set.
type onceSpy struct {
	storedriver.Store
	until []time.Time
	fail  error
}

func (s *onceSpy) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	if s.fail != nil {
		return false, s.fail
	}
	s.until = append(s.until, until)
	return s.Store.UseOnce(ctx, key, until, now)
}

func (s *onceSpy) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	if s.fail != nil {
		return false, s.fail
	}
	return storewrap.Marked(ctx, s.Store, key, now)
}

// plainStore is a store that offers only store.Store's methods (and the
// Issue the tests set up approvals with): a store of another module, as
// far as the kit can tell.
type plainStore struct{ storedriver.Store }

func (p plainStore) Issue(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	return storetest.Issue(ctx, p.Store, o, a, now)
}
