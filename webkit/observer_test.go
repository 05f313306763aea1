package webkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/store"
)

// ---- logs never carry secrets ----

func TestGateLogsNoSecrets(t *testing.T) {
	var logs bytes.Buffer
	e := newGateEnv(t, storedriver.AsStore(failingStore{memstore.New(memstore.Config{}).Steps()}), newClock())
	e.kit.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := e.request(joinedIn, formM, "text/html")
	r.Header.Set(headers.Session, "eyJsecret-session")
	r.Header.Set("Authorization", "Bearer secret-token")
	e.do(r)
	e.kit.Store = memstore.New(memstore.Config{})
	bad := e.kit.Gate(func(*http.Request) (Action, error) { return Action{}, errors.New("nope") })(http.NotFoundHandler())
	bad.ServeHTTP(httptest.NewRecorder(), r)
	cookie, _ := r.Cookie(e.kit.Sessions.(*CookieSessions).name())
	out := logs.String()
	if out == "" {
		t.Fatal("nothing logged")
	}
	for _, secret := range []string{cookie.Value, "eyJsecret-session", "secret-token", "size=M"} {
		if strings.Contains(out, secret) {
			t.Errorf("log carries %q: %s", secret, out)
		}
	}
}

// ---- observer ----

type countingObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *countingObserver) add(k string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[k]++
}
func (o *countingObserver) get(k string) int { o.mu.Lock(); defer o.mu.Unlock(); return o.n[k] }
func (o *countingObserver) snapshot() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.n)
}

// Observe counts the Gate's issued operations and used-up approvals by
// what they became; other events are another test's.
func (o *countingObserver) Observe(_ context.Context, e Event) {
	if e.Route != routeGate {
		return
	}
	switch e.Outcome {
	case "waiting":
		o.add("issued")
	case "performed", "not_performed", "unknown":
		o.add("taken")
		o.add(e.Outcome)
	}
}
func (o *countingObserver) StoreStep(_ context.Context, _ string, _ time.Duration, err error) {
	if err != nil {
		o.add("store_error")
	}
}

func TestGateObserverAndRoundTrips(t *testing.T) {
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	obs := &countingObserver{}
	cs := &countingStore{Store: storedriver.Steps(e.kit.Store)}
	e.kit.Observer, e.kit.Store = obs, storedriver.AsStore(cs)
	rec := e.do(e.request(joinedIn, formM, "text/html"))
	if rec.Code != 403 || cs.calls.Load() != 1 {
		t.Errorf("403 path: %d, %d store round trips, want 1", rec.Code, cs.calls.Load())
	}
	_, ref := refOf(t, rec)
	rr := e.lookup(sesIn, ref)
	e.record(sesIn, storedriver.TakeResult{Operation: rr.Current, Ref: ref})
	cs.calls.Store(0)
	if rec := e.do(e.request(joinedIn, formM, "")); rec.Code != 200 || cs.calls.Load() != 2 {
		t.Errorf("performing path: %d, %d store round trips, want 2", rec.Code, cs.calls.Load())
	}
	cs.calls.Store(0)
	e.do(e.request(notJoined, formM, ""))
	if cs.calls.Load() != 0 {
		t.Errorf("ordinary browser: %d store round trips, want 0", cs.calls.Load())
	}
	if got := obs.snapshot(); got != "map[issued:1 performed:1 taken:1]" {
		t.Errorf("observed %s", got)
	}
}

// countingStore counts the store round trips of a request.
type countingStore struct {
	storedriver.Store
	calls atomic.Int64
	// marks counts the Unbind checks (storekit.OnceMarked), one round
	// trip each on Redis, apart from calls: the benchmarks report both.
	marks atomic.Int64
}

// Marked is the counted store's, as the Gate finds it on the store
// itself: without it, the check would fall back to a UseOnce that
// writes a key (storewrap.Marked).
func (c *countingStore) Marked(ctx context.Context, key string, now time.Time) (bool, error) {
	c.marks.Add(1)
	return storewrap.Marked(ctx, c.Store, key, now)
}

// MarkedInTake is the counted store's: its Take checks the Unbind marker
// in the same round trip (storekit.MarkedInTake).
func (c *countingStore) MarkedInTake() bool { return storewrap.MarksInTake(c.Store) }

// InProcess and BoundByContext are the counted store's: counting adds no
// waiting.
func (c *countingStore) InProcess() bool {
	p, ok := c.Store.(storekit.InProcess)
	return ok && p.InProcess()
}

func (c *countingStore) BoundByContext() bool {
	b, ok := c.Store.(storekit.ContextBound)
	return ok && b.BoundByContext()
}

func (c *countingStore) Take(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, o, a, now)
}
func (c *countingStore) Finish(ctx context.Context, cl store.Claim, out store.Outcome, now time.Time) error {
	c.calls.Add(1)
	return c.Store.Finish(ctx, cl, out, now)
}

// Issue is uncounted: the benchmarks and tests issue through it, untimed,
// to set up approvals (storetest.Issue finds it).
func (c *countingStore) Issue(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	return storetest.Issue(ctx, c.Store, o, a, now)
}

func (c *countingStore) Lookup(ctx context.Context, o store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	c.calls.Add(1)
	return c.Store.Lookup(ctx, o, ref, now)
}

// ---- fuzz: the form replay and the describe path never 500, never panic ----

func FuzzGateForm(f *testing.F) {
	f.Add("POST", "application/x-www-form-urlencoded", "text/html", "order=ord_7&size=M")
	f.Add("POST", "application/x-www-form-urlencoded; charset=latin1", "*/*", "order=%FF&size=%0A")
	f.Add("POST", "multipart/form-data; boundary=x", "application/json", "--x\r\nContent-Disposition: form-data; name=\"order\"\r\n\r\n1\r\n--x--")
	f.Add("PUT", "application/json", "application/json;q=0.5, text/html;q=0.4", `{"order":"1"}`)
	f.Add("POST", "", "", "a=%zz&;b")
	e := newGateEnv(f, memstore.New(memstore.Config{}), newClock())
	cookie := joinCookie(f, e.kit, sesOut)
	f.Fuzz(func(t *testing.T, method, ctype, accept, body string) {
		if !validMethod(method) {
			return
		}
		r := httptest.NewRequest("POST", "/exchange?x=1", strings.NewReader(body))
		r.Method = method
		r.Header.Set("Content-Type", ctype)
		r.Header.Set("Accept", accept)
		r.Header.Set("Referer", body)
		r.AddCookie(cookie)
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, r)
		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

func FuzzGateDescribe(f *testing.F) {
	f.Add("exchange", []byte(`{"a":1}`), "summary", int64(0))
	f.Add("", []byte(`[1]`), "", int64(-1))
	f.Add("k", []byte(`{"a":1} x`), "\x00", int64(1<<62))
	f.Add("k", []byte(`{"a":1e999999}`), "", int64(5))
	e := newGateEnv(f, memstore.New(memstore.Config{}), newClock())
	cookie := joinCookie(f, e.kit, sesIn)
	f.Fuzz(func(t *testing.T, key string, terms []byte, summary string, lifetime int64) {
		h := e.kit.Gate(func(r *http.Request) (Action, error) {
			return Action{Key: key, Terms: json.RawMessage(terms), Summary: summary, Lifetime: time.Duration(lifetime)}, nil
		})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		r := httptest.NewRequest("POST", "/x", nil)
		r.AddCookie(cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code >= 500 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// ---- busy (W145) and replaceable pages ----

func TestGateBusy(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			c := newClock()
			e := newGateEnv(t, be.make(t), c)
			// Two revisions of equal terms, both approved; one is taken and
			// its operation is still being performed.
			a := e.issue(sesIn, "ord_7", "M")
			c.Add(e.kit.lifetime()/2 + time.Second)
			b := e.issue(sesIn, "ord_7", "M")
			e.record(sesIn, a)
			e.record(sesIn, b)
			res, err := storedriver.Steps(e.kit.Store).Take(context.Background(), sesIn.Owner(), mustAction(t, e.kit, formM), c.Now())
			if err != nil || res.Claim == nil {
				t.Fatalf("take: %+v %v", res, err)
			}
			rec := e.do(e.request(joinedIn, formM, "application/json"))
			if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || e.runs.Load() != 0 {
				t.Errorf("W145: %d Retry-After %q runs %d", rec.Code, rec.Header().Get("Retry-After"), e.runs.Load())
			}
			if _, ref := refOf(t, rec); ref != "" || strings.Contains(rec.Body.String(), "fail") {
				t.Errorf("W142: busy answered %q with ref %q", rec.Body, ref)
			}
		})
	}
}

// One replaceable handler answers every refusal, reading FailureReason;
// the Gate has set the protocol's headers before it, and Kit.Refuse is the
// kit's own answer for the reasons it hands back.
func TestGateReplaceablePages(t *testing.T) {
	reasons := make(chan error, 1)
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	e.kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reason := FailureReason(r)
		reasons <- reason
		if v, ok := pages.WaitingOf(r); ok != errors.Is(reason, ErrApprovalRequired) || ok && v.Continue.Method != "POST" {
			t.Errorf("WaitingOf: %+v %v", v, ok)
		}
		if w.Header().Get("Cache-Control") != "no-store" {
			t.Error("W68: no Cache-Control: no-store before the replacement")
		}
		if errors.Is(reason, ErrStoreUnavailable) { // the kit's own 503
			e.kit.Refuse(w, r)
			return
		}
		w.WriteHeader(refusedStatus(reason))
	})
	tests := []struct {
		name    string
		browser browser
		store   store.Store
		want    error
		status  int
	}{
		{"approval required", joinedIn, nil, ErrApprovalRequired, 403},
		{"extension required", joinedNoExt, nil, ErrExtensionRequired, 403},
		{"store unavailable (kit.Refuse)", joinedIn, storedriver.AsStore(failingStore{memstore.New(memstore.Config{}).Steps()}), ErrStoreUnavailable, 503},
		{"rate limited", joinedIn, storedriver.AsStore(limitedStore{memstore.New(memstore.Config{}).Steps()}), ErrRateLimited, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.store != nil {
				e.kit.Store = tt.store
			}
			rec := e.do(e.request(tt.browser, formM, "text/html"))
			if got := <-reasons; !errors.Is(got, tt.want) {
				t.Errorf("FailureReason = %v, want %v", got, tt.want)
			}
			if rec.Code != tt.status {
				t.Errorf("status %d, want %d", rec.Code, tt.status)
			}
			if tt.want == ErrApprovalRequired && rec.Header().Get(headers.Operation) == "" {
				t.Error("Poppy-Operation not set before the replacement page")
			}
			if retry := rec.Header().Get("Retry-After"); (tt.status == 503 || tt.status == 429) != (retry != "") {
				t.Errorf("W143: Retry-After %q on a %d", retry, tt.status)
			}
			if e.runs.Load() != 0 {
				t.Error("handler ran")
			}
		})
	}
	rec := httptest.NewRecorder()
	e.kit.Refuse(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 {
		t.Errorf("Kit.Refuse outside a refusal: %d", rec.Code)
	}
	if FailureReason(httptest.NewRequest("GET", "/", nil)) != nil {
		t.Error("FailureReason outside the Gate")
	}
}
