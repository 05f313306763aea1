package webkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// ---- fixtures ----

var (
	testKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}
	t0       = time.Date(2026, 10, 8, 12, 0, 0, 0, time.UTC)

	sesOut = Session{ID: "ses_out", Agent: "https://agent.example/client", User: "usr_1", Extensions: map[string]string{"operations": "3"}}
	sesIn  = Session{ID: "ses_in", Agent: "https://agent.example/client", User: "usr_1", Account: "acct_1", Extensions: map[string]string{"operations": "3"}}
	// sesOther can't approve sesIn's operations: another account (§3).
	sesOther = Session{ID: "ses_oth", Agent: "https://agent.example/client", User: "usr_1", Account: "acct_2", Extensions: map[string]string{"operations": "3"}}
	sesNoExt = Session{ID: "ses_noext", Agent: "https://agent.example/client", User: "usr_1"}
	sesV2    = Session{ID: "ses_v2", Agent: "https://agent.example/client", User: "usr_1", Extensions: map[string]string{"operations": "2"}}
)

// clock is the tests' clock (internal/testclock); tests move it instead
// of sleeping.
type clock = testclock.Clock

func newClock() *clock { return testclock.At(t0) }

// backend is a store for a test: memory, or real Redis when available.
type backend struct {
	name string
	make func(t testing.TB) store.Store
	// more returns another store on the same data (another web server).
	more func(t testing.TB) func() store.Store
}

var prefixes atomic.Int64

func backends() []backend {
	return []backend{
		{
			name: "memory",
			make: func(testing.TB) store.Store { return memstore.New(memstore.Config{}) },
			more: func(testing.TB) func() store.Store {
				m := memstore.New(memstore.Config{})
				return func() store.Store { return m }
			},
		},
		{
			name: "redis",
			make: func(t testing.TB) store.Store {
				return redisstore.New(sharedRedis(t).Client(t), redisstore.Options{Prefix: fmt.Sprintf("gt%d:", prefixes.Add(1))})
			},
			more: func(t testing.TB) func() store.Store {
				inst, prefix := sharedRedis(t), fmt.Sprintf("gt%d:", prefixes.Add(1))
				return func() store.Store { return redisstore.New(inst.Client(t), redisstore.Options{Prefix: prefix}) }
			},
		},
	}
}

// sharedRedis starts one redis-server per test (skipped unless available).
func sharedRedis(t testing.TB) *redistest.Instance { return redistest.Start(t) }

// gateEnv is one website: a Kit, a gated exchange route and a counter.
type gateEnv struct {
	t     testing.TB
	kit   *Kit
	clock *clock
	runs  atomic.Int64
	h     http.Handler // the gated route
	claim chan store.Claim
}

// exchangeDescribe gates POST /exchange: order and size are the terms.
func exchangeDescribe(r *http.Request) (Action, error) {
	if r.Method != http.MethodPost {
		return Action{}, ErrNotGated
	}
	if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return Action{}, fmt.Errorf("form: %w", err)
	}
	order, size := r.PostFormValue("order"), r.PostFormValue("size")
	if order == "" {
		return Action{}, errors.New(`field "order" is required`)
	}
	return Action{
		Key:     "exchange:" + order,
		Terms:   map[string]string{"order_id": order, "size": size},
		Summary: "Exchange the jacket on order " + order + " for size " + size + ".",
	}, nil
}

func newGateEnv(t testing.TB, st store.Store, c *clock) *gateEnv {
	e := &gateEnv{t: t, clock: c, claim: make(chan store.Claim, 200)}
	k := New(testKeys...)
	k.Store = st
	k.Clock = c.Now
	k.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	k.OwnLogin = func(r *http.Request, s Session) bool {
		_, err := r.Cookie("site_login")
		return err == nil
	}
	e.kit = k
	e.h = k.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		if cl, ok := ClaimOf(r); ok {
			select {
			case e.claim <- cl:
			default: // benchmarks don't read them
			}
		}
		body, _ := io.ReadAll(r.Body) // restored for the handler
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "exchanged %s to %s (%d body bytes)", r.PostFormValue("order"), r.PostFormValue("size"), len(body))
	}))
	return e
}

// joinCookie returns the join cookie of s, as Bind writes it.
func joinCookie(t testing.TB, k *Kit, s Session) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := k.Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), s); err != nil {
		t.Fatal(err)
	}
	cs := rec.Result().Cookies()
	if len(cs) != 2 || cs[1].Name != cs[0].Name+"_bound" {
		t.Fatalf("Bind set %v, want the join cookie and its binding marker", cs)
	}
	return cs[0]
}

type browser int

const (
	notJoined   browser = iota
	joinedOut           // joined, signed out, no login of its own (W55)
	joinedIn            // joined signed in through a join with a token (W54)
	ownLogin            // joined signed out, plus a login of the site's own (W56)
	joinedNoExt         // joined without declaring operations v3 (W11)
	joinedV2            // joined declaring operations v2 (W13)
)

func (b browser) String() string {
	return [...]string{"not joined", "joined signed out", "joined signed in", "own login", "joined without extension", "joined with v2"}[b]
}

func (b browser) session() (Session, bool) {
	switch b {
	case joinedOut, ownLogin:
		return sesOut, true
	case joinedIn:
		return sesIn, true
	case joinedNoExt:
		return sesNoExt, true
	case joinedV2:
		return sesV2, true
	}
	return Session{}, false
}

func (e *gateEnv) request(b browser, form string, accept string) *http.Request {
	r := httptest.NewRequest("POST", "/exchange", strings.NewReader(form))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	if s, ok := b.session(); ok {
		r.AddCookie(joinCookie(e.t, e.kit, s))
	}
	if b == ownLogin {
		r.AddCookie(&http.Cookie{Name: "site_login", Value: "1"})
	}
	return r
}

func (e *gateEnv) do(r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, r)
	return rec
}

// approve issues the operation for s's exchange with these terms and
// records an approval of it, as the endpoint would (§6).
func (e *gateEnv) approve(s Session, order, size string) storedriver.TakeResult {
	e.t.Helper()
	iss := e.issue(s, order, size)
	e.record(s, iss)
	return iss
}

func (e *gateEnv) issue(s Session, order, size string) storedriver.TakeResult {
	e.t.Helper()
	r := httptest.NewRequest("POST", "/exchange", strings.NewReader(url.Values{"order": {order}, "size": {size}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	act, err := exchangeDescribe(r)
	if err != nil {
		e.t.Fatal(err)
	}
	sa, err := e.kit.storeAction(act)
	if err != nil {
		e.t.Fatal(err)
	}
	iss, err := storetest.Issue(context.Background(), storedriver.Steps(e.kit.Store), s.Owner(), sa, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return iss
}

func (e *gateEnv) record(s Session, iss storedriver.TakeResult) {
	e.t.Helper()
	rep, err := storedriver.Steps(e.kit.Store).Record(context.Background(), s.Owner(), iss.Ref, store.Approval{
		OperationID: iss.Operation.ID, Revision: iss.Operation.Revision, Approver: "user",
	}, e.clock.Now(), storedriver.RecordOptions{})
	if err != nil || rep.Result != storedriver.Recorded {
		e.t.Fatalf("Record: %v %v", rep.Result, err)
	}
}

func (e *gateEnv) lookup(s Session, ref string) storedriver.Found {
	e.t.Helper()
	rec, found, err := storedriver.Steps(e.kit.Store).Lookup(context.Background(), s.Owner(), ref, e.clock.Now())
	if err != nil || !found {
		e.t.Fatalf("Lookup %s: found=%v err=%v", ref, found, err)
	}
	return rec
}

func refOf(t testing.TB, rec *httptest.ResponseRecorder) (sid, ref string) {
	t.Helper()
	v := rec.Header().Values(headers.Operation)
	if len(v) == 0 {
		return "", ""
	}
	sid, ref, err := headers.ParseOperation(v)
	if err != nil {
		t.Fatalf("Poppy-Operation %q: %v", v, err)
	}
	return sid, ref
}

// bodyKind says what answered: the handler, the waiting page, or JSON.
func bodyKind(rec *httptest.ResponseRecorder) string {
	ct := rec.Header().Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/plain") && strings.HasPrefix(rec.Body.String(), "exchanged"):
		return "handler"
	case strings.HasPrefix(ct, "text/html"):
		return "html"
	case strings.HasPrefix(ct, "application/json"):
		return "json"
	}
	return "other:" + ct
}

const (
	formM = "order=ord_7&size=M"
	formL = "order=ord_7&size=L"
)

// ---- the scenario table (gorilla/csrf TestProtectScenarios style) ----

type setup int

const (
	noApproval setup = iota
	matching         // an approval of exactly these terms (W94)
	otherTerms       // an approval of size L; the request asks for M (W117, W99)
	otherOwner       // an approval by another account (W104)
	expired          // an approval whose revision has expired (W103)
	performed        // an approval already used and performed (W141)
)

func TestGateScenarios(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			if be.name == "redis" {
				sharedRedis(t) // skip early when redis-server is missing
			}
			testGateScenarios(t, be)
		})
	}
}

func testGateScenarios(t *testing.T, be backend) {
	type want struct {
		status int
		op     bool   // Poppy-Operation present
		kind   string // handler, html, json
		runs   int64
	}
	tests := []struct {
		name    string
		browser browser
		setup   setup
		accept  string
		ownFlow bool // Kit.Refused serves the site's own flow for ErrExtensionRequired
		want    want
	}{
		{"W07 not joined, no approval → handler", notJoined, noApproval, "", false, want{200, false, "handler", 1}},
		{"W07 not joined, someone's approval → handler, store untouched", notJoined, matching, "", false, want{200, false, "handler", 1}},
		{"W56 own login → the kit's page: confirm on the site", ownLogin, noApproval, "text/html", false, want{403, false, "html", 0}},
		{"W56 own login, a script → confirmation_required", ownLogin, noApproval, "application/json", false, want{403, false, "json", 0}},
		{"W56 own login with an approval → never performed", ownLogin, matching, "", false, want{403, false, "html", 0}},
		{"W56 own login → the site's own flow (Refused)", ownLogin, matching, "text/html", true, want{200, false, "other:text/plain", 1}},
		{"W11 W12 no extension → extension_required, a page for a page load", joinedNoExt, noApproval, "text/html", false, want{403, false, "html", 0}},
		{"W11 W12 no extension, a script → extension_required", joinedNoExt, noApproval, "application/json", false, want{403, false, "json", 0}},
		{"W13 v2 → extension_required", joinedV2, noApproval, "application/json", false, want{403, false, "json", 0}},
		{"W12 no extension, own flow → the site's flow from Refused", joinedNoExt, noApproval, "", true, want{200, false, "other:text/plain", 1}},
		{"W55 W65 signed out, no approval → 403 waiting page", joinedOut, noApproval, "text/html", false, want{403, true, "html", 0}},
		{"W55 W66 signed out, no approval, JSON → 403 approval_required", joinedOut, noApproval, "application/json", false, want{403, true, "json", 0}},
		{"W54 signed in, no approval → 403 waiting page", joinedIn, noApproval, "text/html,application/xhtml+xml,*/*;q=0.8", false, want{403, true, "html", 0}},
		{"W54 W66 signed in, JSON → 403 approval_required", joinedIn, noApproval, "application/json, text/plain, */*", false, want{403, true, "json", 0}},
		{"W94 W121 signed out, matching approval → performed", joinedOut, matching, "text/html", false, want{200, false, "handler", 1}},
		{"W94 W121 signed in, matching approval → performed", joinedIn, matching, "application/json", false, want{200, false, "handler", 1}},
		{"W117 W99 approval for other terms → 403 new ref", joinedIn, otherTerms, "text/html", false, want{403, true, "html", 0}},
		{"W104 approval of another owner → 403", joinedIn, otherOwner, "application/json", false, want{403, true, "json", 0}},
		{"W103 expired approval → 403", joinedOut, expired, "text/html", false, want{403, true, "html", 0}},
		{"W141 already performed → 403 new operation", joinedIn, performed, "text/html", false, want{403, true, "html", 0}},
		{"W11 no extension with an approval → never performed", joinedNoExt, matching, "", false, want{403, false, "html", 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			e := newGateEnv(t, be.make(t), c)
			if tt.ownFlow { // W12, W56: the site's own flow, from the one refusal handler
				e.kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !errors.Is(FailureReason(r), ErrExtensionRequired) && !errors.Is(FailureReason(r), ErrOwnLogin) {
						e.kit.Refuse(w, r)
						return
					}
					e.runs.Add(1)
					w.Header().Set("Content-Type", "text/plain")
					io.WriteString(w, "the site's own approval flow")
				})
			}
			owner, _ := tt.browser.session()
			if tt.browser == notJoined {
				owner = sesOut
			}
			var approved storedriver.TakeResult
			switch tt.setup {
			case matching:
				approved = e.approve(owner, "ord_7", "M")
			case otherTerms:
				approved = e.approve(owner, "ord_7", "L")
			case otherOwner:
				approved = e.approve(sesOther, "ord_7", "M")
			case expired:
				approved = e.approve(owner, "ord_7", "M")
				c.Add(e.kit.lifetime() + time.Second)
			case performed:
				approved = e.approve(owner, "ord_7", "M")
				res, err := storedriver.Steps(e.kit.Store).Take(context.Background(), owner.Owner(), mustAction(t, e.kit, formM), c.Now())
				if err != nil || res.Claim == nil {
					t.Fatalf("setup take: %+v %v", res, err)
				}
				if err := storedriver.Steps(e.kit.Store).Finish(context.Background(), *res.Claim, store.OutcomePerformed, c.Now()); err != nil {
					t.Fatal(err)
				}
			}

			rec := e.do(e.request(tt.browser, formM, tt.accept))

			if rec.Code != tt.want.status {
				t.Errorf("status = %d, want %d; body %s", rec.Code, tt.want.status, rec.Body)
			}
			sid, ref := refOf(t, rec)
			if (ref != "") != tt.want.op {
				t.Errorf("Poppy-Operation present = %v, want %v", ref != "", tt.want.op)
			}
			if got := bodyKind(rec); got != tt.want.kind {
				t.Errorf("body kind = %s, want %s", got, tt.want.kind)
			}
			if got := e.runs.Load(); got != tt.want.runs {
				t.Errorf("handler ran %d times, want %d", got, tt.want.runs)
			}
			if tt.want.status == 403 {
				if cc := rec.Header().Get("Cache-Control"); cc != "no-store" { // W68
					t.Errorf("Cache-Control = %q", cc)
				}
				if !strings.Contains(strings.Join(rec.Header().Values("Vary"), ","), "Accept") {
					t.Errorf("Vary = %q", rec.Header().Values("Vary"))
				}
				checkNoOperationInBody(t, rec, approved, ref)
			}
			if tt.want.op {
				s, _ := tt.browser.session()
				if sid != s.ID { // W58
					t.Errorf("sid = %q, want %q", sid, s.ID)
				}
				if !storekit.ValidRef(ref) { // W59
					t.Errorf("ref %q invalid", ref)
				}
				if approved.Ref != "" && ref == approved.Ref {
					t.Errorf("answered with the approved ref %q", ref)
				}
			}
			if tt.want.kind == "json" && tt.want.status == 403 && !tt.want.op {
				var body map[string]string
				json.Unmarshal(rec.Body.Bytes(), &body)
				if tt.browser == ownLogin {
					if body["error"] != "confirmation_required" || body["message"] == "" { // W56
						t.Errorf("body = %s", rec.Body)
					}
				} else if body["error"] != "extension_required" || body["extension"] != "operations" { // W12
					t.Errorf("body = %s", rec.Body)
				}
			}
			if tt.want.kind == "json" && tt.want.op && strings.TrimSpace(rec.Body.String()) != `{"error":"approval_required"}` { // W66
				t.Errorf("body = %s", rec.Body)
			}
			if tt.want.kind == "html" && tt.browser == ownLogin && !strings.Contains(rec.Body.String(), "Confirm the action on the site yourself") { // W56
				t.Errorf("own-flow page text missing")
			}
			noExtension := tt.browser == joinedNoExt || tt.browser == joinedV2
			if tt.want.kind == "html" && noExtension && !strings.Contains(rec.Body.String(), "join this browser to the site again") { // W11, W12: a page, never JSON as a page
				t.Errorf("extension-required page text missing")
			}
			if tt.want.kind == "html" && tt.browser != ownLogin && !noExtension && !strings.Contains(rec.Body.String(), "waiting for your approval in your personal agent") { // W65
				t.Errorf("waiting page text missing")
			}
			if tt.want.runs == 1 && tt.setup == matching && tt.browser != notJoined && tt.browser != ownLogin {
				rec := e.lookup(owner, approved.Ref)
				if rec.Status != storedriver.StatusPerformed { // W108
					t.Errorf("status after performing = %s", rec.Status)
				}
			}
		})
	}
}

func mustAction(t testing.TB, k *Kit, form string) storedriver.TakeRequest {
	t.Helper()
	r := httptest.NewRequest("POST", "/exchange", strings.NewReader(form))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	a, err := exchangeDescribe(r)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := k.storeAction(a)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// checkNoOperationInBody: W64, the body never carries the operation.
func checkNoOperationInBody(t *testing.T, rec *httptest.ResponseRecorder, approved storedriver.TakeResult, ref string) {
	t.Helper()
	body := rec.Body.String()
	if strings.Contains(body, `"operation"`) || strings.Contains(body, "order_id") {
		t.Errorf("W64: body carries the operation: %s", body)
	}
	for _, s := range []string{ref, approved.Ref} {
		if s == "" {
			continue
		}
		id, rev, _ := strings.Cut(s, ".")
		if strings.Contains(body, rev) || strings.Contains(body, id) {
			t.Errorf("W64: body carries operation %s or revision %s", id, rev)
		}
	}
}

// ---- at most once across web servers (§7 W135) ----

func TestGateConcurrentRepeatsOneApproval(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			c := newClock()
			more := be.more(t)
			var envs []*gateEnv
			var runs atomic.Int64
			for range 4 { // four web servers, each with its own client
				e := newGateEnv(t, more(), c)
				envs = append(envs, e)
			}
			approved := envs[0].approve(sesIn, "ord_7", "M")
			cookie := joinCookie(t, envs[0].kit, sesIn)

			const n = 100
			var wg sync.WaitGroup
			codes := make([]int, n)
			refs := make([]string, n)
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					e := envs[i%4]
					r := httptest.NewRequest("POST", "/exchange", strings.NewReader(formM))
					r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					r.Header.Set("Accept", "application/json")
					r.AddCookie(cookie)
					<-start
					rec := e.do(r)
					codes[i] = rec.Code
					_, refs[i] = refOf(t, rec)
				}()
			}
			close(start)
			wg.Wait()
			for _, e := range envs {
				runs.Add(e.runs.Load())
			}
			if runs.Load() != 1 {
				t.Fatalf("W135: handler ran %d times, want 1", runs.Load())
			}
			// Every other request is refused: with a new ref once the
			// action was performed (W141), or 503 while it was being
			// performed (W145: no new operation to approve meanwhile).
			var performed, refused, busy int
			for i := range n {
				switch {
				case codes[i] == 200:
					performed++
				case codes[i] == 403 && refs[i] != "" && refs[i] != approved.Ref:
					refused++
				case codes[i] == 503 && refs[i] == "":
					busy++
				default:
					t.Errorf("request %d: %d ref %q", i, codes[i], refs[i])
				}
			}
			if performed != 1 || refused+busy != n-1 {
				t.Errorf("performed %d, refused with a new ref %d, busy %d", performed, refused, busy)
			}
			if st := envs[1].lookup(sesIn, approved.Ref).Status; st != storedriver.StatusPerformed {
				t.Errorf("status = %s", st)
			}
		})
	}
}

// ---- two approvals (W95, W96, W37) ----

func TestGateTwoApprovals(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			t.Run("W96 W37 the second's terms take the second, the first stays", func(t *testing.T) {
				e := newGateEnv(t, be.make(t), newClock())
				first := e.approve(sesIn, "ord_7", "M")
				second := e.approve(sesIn, "ord_7", "L")
				if first.Operation.ID != second.Operation.ID || first.Operation.Revision == second.Operation.Revision {
					t.Fatalf("W20 W24: %v %v", first.Operation, second.Operation)
				}
				rec := e.do(e.request(joinedIn, formL, "text/html"))
				if rec.Code != 200 || e.runs.Load() != 1 {
					t.Fatalf("status %d runs %d", rec.Code, e.runs.Load())
				}
				cl := <-e.claim
				if cl.Operation.Revision != second.Operation.Revision || cl.Approval.Revision != second.Operation.Revision {
					t.Errorf("took revision %s, want %s", cl.Approval.Revision, second.Operation.Revision)
				}
				for _, ap := range e.lookup(sesIn, first.Ref).Approvals {
					if ap.Revision == first.Operation.Revision && !ap.UsedAt.IsZero() {
						t.Errorf("W96: the first approval was used up too")
					}
				}
				// W37: one operation, performed once, whichever revision.
				rec = e.do(e.request(joinedIn, formM, "text/html"))
				if rec.Code != 403 || e.runs.Load() != 1 {
					t.Errorf("W37: first revision after performing: %d, runs %d", rec.Code, e.runs.Load())
				}
			})
			for _, order := range []string{"issue order", "reverse"} {
				t.Run("W95 first recorded first among equals, "+order, func(t *testing.T) {
					c := newClock()
					e := newGateEnv(t, be.make(t), c)
					a := e.issue(sesOut, "ord_7", "M")
					c.Add(e.kit.lifetime()/2 + time.Second) // W39: the revision is no longer reused
					b := e.issue(sesOut, "ord_7", "M")
					if a.Operation.Revision == b.Operation.Revision {
						t.Fatal("want two revisions of equal terms")
					}
					firstRec := a
					if order == "reverse" {
						e.record(sesOut, b)
						e.record(sesOut, a)
						firstRec = b
					} else {
						e.record(sesOut, a)
						e.record(sesOut, b)
					}
					if rec := e.do(e.request(joinedOut, formM, "")); rec.Code != 200 {
						t.Fatalf("status %d", rec.Code)
					}
					if cl := <-e.claim; cl.Approval.Revision != firstRec.Operation.Revision {
						t.Errorf("took %s, want first recorded %s", cl.Approval.Revision, firstRec.Operation.Revision)
					}
				})
			}
		})
	}
}

// ---- outcomes (§7) ----

func TestGateOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		want    storedriver.Status
		panics  bool
	}{
		{"200 → performed", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }, storedriver.StatusPerformed, false},
		{"nothing written → performed", func(w http.ResponseWriter, r *http.Request) {}, storedriver.StatusPerformed, false},
		{"303 → performed", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/done", http.StatusSeeOther) }, storedriver.StatusPerformed, false},
		{"103 then 200 → performed", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(103); w.WriteHeader(200) }, storedriver.StatusPerformed, false},
		{"W98 409 → not performed, waiting again", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(409) }, storedriver.StatusWaiting, false},
		{"W142 500 → unknown, stays performing", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, storedriver.StatusPerforming, false},
		{"W142 panic → unknown, answered 503 by the Gate", func(w http.ResponseWriter, r *http.Request) { panic("boom") }, storedriver.StatusPerforming, false},
		{"W142 panic after writing → unknown, re-panics", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("half")); panic("boom") }, storedriver.StatusPerforming, true},
		{"SetOutcome NotDone over 200", func(w http.ResponseWriter, r *http.Request) {
			SetOutcome(r, store.OutcomeNotPerformed)
			w.Write([]byte("sorry"))
		}, storedriver.StatusWaiting, false},
		{"SetOutcome Done over 502", func(w http.ResponseWriter, r *http.Request) {
			SetOutcome(r, store.OutcomePerformed)
			w.WriteHeader(502)
		}, storedriver.StatusPerformed, false},
		{"SetOutcome Unknown over 200", func(w http.ResponseWriter, r *http.Request) { SetOutcome(r, store.OutcomeUnknown) }, storedriver.StatusPerforming, false},
		{"Flush through ResponseController → performed", func(w http.ResponseWriter, r *http.Request) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
		}, storedriver.StatusPerformed, false},
	}
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					e := newGateEnv(t, be.make(t), newClock())
					obs := &countingObserver{}
					e.kit.Observer = obs
					h := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(tt.handler))
					approved := e.approve(sesIn, "ord_7", "M")
					var p any
					func() {
						defer func() { p = recover() }()
						h.ServeHTTP(httptest.NewRecorder(), e.request(joinedIn, formM, ""))
					}()
					if (p != nil) != tt.panics {
						t.Fatalf("panic = %v, want %v", p, tt.panics)
					}
					if got := e.lookup(sesIn, approved.Ref).Status; got != tt.want {
						t.Errorf("status = %s, want %s", got, tt.want)
					}
					if obs.get("taken") != 1 {
						t.Errorf("observer: %v", obs.snapshot())
					}
				})
			}
		})
	}
}

// ---- fail closed (RULES.md "Non-negotiables") ----

type failingStore struct{ storedriver.Store }

var errDown = errors.New("connection refused")

func (failingStore) Take(context.Context, store.Owner, storedriver.TakeRequest, time.Time) (storedriver.TakeResult, error) {
	return storedriver.TakeResult{}, errDown
}

func TestGateStoreDown(t *testing.T) {
	check := func(t *testing.T, e *gateEnv, ungated http.Handler) {
		t.Helper()
		rec := e.do(e.request(joinedIn, formM, "text/html"))
		if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || e.runs.Load() != 0 {
			t.Errorf("gated: %d Retry-After %q runs %d", rec.Code, rec.Header().Get("Retry-After"), e.runs.Load())
		}
		if _, ref := refOf(t, rec); ref != "" {
			t.Errorf("store down but a ref: %s", ref)
		}
		rec = e.do(e.request(joinedIn, formM, "application/json"))
		if rec.Code != 503 || bodyKind(rec) != "json" {
			t.Errorf("gated JSON: %d %s", rec.Code, rec.Body)
		}
		// Ungated traffic is untouched: an ordinary browser, and a joined
		// browser's request describe does not gate.
		if rec := e.do(e.request(notJoined, formM, "")); rec.Code != 200 {
			t.Errorf("ordinary browser: %d", rec.Code)
		}
		r := httptest.NewRequest("GET", "/exchange", nil)
		r.AddCookie(joinCookie(t, e.kit, sesIn))
		rec = httptest.NewRecorder()
		ungated.ServeHTTP(rec, r)
		if rec.Code != 200 {
			t.Errorf("ungated GET: %d", rec.Code)
		}
	}
	t.Run("failing store", func(t *testing.T) {
		e := newGateEnv(t, storedriver.AsStore(failingStore{memstore.New(memstore.Config{}).Steps()}), newClock())
		obs := &countingObserver{}
		e.kit.Observer = obs
		check(t, e, e.h)
		if obs.get("store_error") == 0 {
			t.Error("store error not observed")
		}
	})
	t.Run("redis stopped", func(t *testing.T) {
		inst := sharedRedis(t)
		st := redisstore.New(inst.Client(t), redisstore.Options{})
		e := newGateEnv(t, st, newClock())
		approved := e.approve(sesIn, "ord_7", "M")
		inst.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := e.request(joinedIn, formM, "text/html").WithContext(ctx)
		if rec := e.do(r); rec.Code != 503 || e.runs.Load() != 0 {
			t.Fatalf("status %d runs %d", rec.Code, e.runs.Load())
		}
		_ = approved
		check(t, e, e.h)
	})
}

// ---- Continue fidelity (§4 W62) ----

// browserResubmit parses the waiting page as a browser does and returns the
// Continue form's method, action and the body the browser would send
// (HTML "constructing the entry list", application/x-www-form-urlencoded).
func browserResubmit(t *testing.T, page string) (method, action string, fields [][2]string, ok bool) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var form *html.Node
	var scripts int
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			if n.Data == "form" && attr(n, "id") == "opsgate-continue" {
				form = n
			}
			if n.Data == "script" {
				scripts++
				if attr(n, "src") == "" {
					t.Errorf("inline script in the page")
				}
			}
			if n.Parent != nil && form != nil && isIn(n, form) && n.Data != "input" && n.Data != "button" {
				t.Errorf("unexpected element <%s> inside the form: a value broke out", n.Data)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if scripts != 1 {
		t.Errorf("%d script elements, want 1 (waiting.js)", scripts)
	}
	if form == nil {
		return "", "", nil, false
	}
	for c := form.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode || c.Data != "input" {
			continue
		}
		name, value := attr(c, "name"), attr(c, "value")
		// Submission turns every line break into CR LF.
		fields = append(fields, [2]string{crlf(name), crlf(value)})
	}
	return attr(form, "method"), attr(form, "action"), fields, true
}

func isIn(n, ancestor *html.Node) bool {
	for p := n.Parent; p != nil; p = p.Parent {
		if p == ancestor {
			return true
		}
	}
	return false
}

func crlf(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func TestContinueFidelity(t *testing.T) {
	tests := []struct {
		name string
		form [][2]string
	}{
		{"plain", [][2]string{{"order", "ord_7"}, {"size", "M"}}},
		{"unicode", [][2]string{{"order", "ord_7"}, {"size", "M"}, {"note", "Größe 😀 日本語 \u202ertl"}, {"名前", "値"}}},
		{"repeated keys keep their order", [][2]string{{"order", "ord_7"}, {"tag", "b"}, {"size", "M"}, {"tag", "a"}, {"tag", "b"}}},
		{"hostile values stay inert", [][2]string{{"order", "ord_7"}, {"size", `"><script>alert(1)</script>`}, {`"><img src=x onerror=alert(1)>`, `'&amp;<!--`}, {"x", "</form><form action=//evil>"}}},
		{"reserved characters", [][2]string{{"order", "ord_7"}, {"a&b=c", "1+1=2 & 50% ?#/"}, {"empty", ""}, {"sp ace", "  lead and trail  "}}},
		{"CR LF line breaks", [][2]string{{"order", "ord_7"}, {"note", "line 1\r\nline 2\r\n"}}},
		{"control characters", [][2]string{{"order", "ord_7"}, {"ctl", "a\tb\x01c\x7f"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
			var sent strings.Builder
			for i, f := range tt.form {
				if i > 0 {
					sent.WriteByte('&')
				}
				sent.WriteString(url.QueryEscape(f[0]) + "=" + url.QueryEscape(f[1]))
			}
			r := e.request(joinedOut, sent.String(), "text/html")
			r.URL.RawQuery = "from=list&x=%2F"
			r.RequestURI = "/exchange?from=list&x=%2F"
			rec := e.do(r)
			if rec.Code != 403 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			method, action, fields, ok := browserResubmit(t, rec.Body.String())
			if !ok {
				t.Fatalf("no Continue form:\n%s", rec.Body)
			}
			if method != "post" || action != "/exchange?from=list&x=%2F" {
				t.Errorf("form %s %s", method, action)
			}
			if fmt.Sprint(fields) != fmt.Sprint(tt.form) {
				t.Errorf("fields\n got %q\nwant %q", fields, tt.form)
			}
			// The resubmitted body means exactly what the first did.
			var again strings.Builder
			for i, f := range fields {
				if i > 0 {
					again.WriteByte('&')
				}
				again.WriteString(url.QueryEscape(f[0]) + "=" + url.QueryEscape(f[1]))
			}
			v1, _ := url.ParseQuery(sent.String())
			v2, _ := url.ParseQuery(again.String())
			if fmt.Sprint(v1) != fmt.Sprint(v2) {
				t.Errorf("parsed back %v, want %v", v2, v1)
			}
			// And the store agrees: approve, then press Continue.
			cookie, _ := r.Cookie(e.kit.Sessions.(*CookieSessions).name())
			e.record(sesOut, e.issueForm(sesOut, sent.String()))
			r2 := httptest.NewRequest("POST", action, strings.NewReader(again.String()))
			r2.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r2.AddCookie(cookie)
			if rec := e.do(r2); rec.Code != 200 || e.runs.Load() != 1 {
				t.Errorf("Continue after approval: %d runs %d", rec.Code, e.runs.Load())
			}
		})
	}
}

func (e *gateEnv) issueForm(s Session, form string) storedriver.TakeResult {
	iss, err := storetest.Issue(context.Background(), storedriver.Steps(e.kit.Store), s.Owner(), mustAction(e.t, e.kit, form), e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return iss
}

func TestContinueNotRepeatable(t *testing.T) {
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("order", "ord_7")
	fw, _ := mw.CreateFormFile("photo", "jacket.jpg")
	fw.Write([]byte("\xff\xd8 not really a jpeg"))
	mw.Close()

	tests := []struct {
		name, ctype, body, why string
	}{
		{"W63 multipart with a file", mw.FormDataContentType(), mp.String(), "it sent files"},
		{"bare LF would come back as CR LF", "application/x-www-form-urlencoded", "order=ord_7&note=a%0Ab", "unchanged"},
		{"invalid UTF-8", "application/x-www-form-urlencoded", "order=ord_7&note=%FF", "unchanged"},
		{"_charset_ is rewritten by browsers", "application/x-www-form-urlencoded", "order=ord_7&_charset_=x", "_charset_"},
		{"field without a name", "application/x-www-form-urlencoded", "order=ord_7&=x", "without a name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
			r := e.request(joinedOut, tt.body, "text/html")
			r.Header.Set("Content-Type", tt.ctype)
			r.Header.Set("Referer", "http://example.com/orders/7?tab=1")
			rec := e.do(r)
			if rec.Code != 403 {
				t.Fatalf("status %d %s", rec.Code, rec.Body)
			}
			page := rec.Body.String()
			if _, _, _, ok := browserResubmit(t, page); ok {
				t.Errorf("offers a Continue form")
			}
			if !strings.Contains(page, "can&#39;t be repeated") && !strings.Contains(page, "can't be repeated") {
				t.Errorf("doesn't say it can't be repeated")
			}
			if !strings.Contains(html.UnescapeString(page), tt.why) {
				t.Errorf("reason %q missing", tt.why)
			}
			if !strings.Contains(page, `href="/orders/7?tab=1"`) {
				t.Errorf("no link back to the referring page")
			}
		})
	}
	t.Run("W62 GET gets a link", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		h := e.kit.Gate(func(r *http.Request) (Action, error) {
			return Action{Key: "k", Terms: map[string]any{"q": r.URL.Query().Get("q")}}, nil
		})(http.NotFoundHandler())
		r := httptest.NewRequest("GET", "//evil.example/x?q=%22%3E", nil)
		r.AddCookie(joinCookie(t, e.kit, sesOut))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), `id="opsgate-continue" href="/.//evil.example/x?q=%22%3E"`) {
			t.Errorf("%d %s", rec.Code, rec.Body)
		}
	})
	t.Run("foreign Referer links home", func(t *testing.T) {
		r := httptest.NewRequest("PUT", "/x", nil)
		r.Header.Set("Referer", "https://evil.example/phish")
		if c := continueOf(r, nil); c.Back != "/" || c.Method != "" {
			t.Errorf("%+v", c)
		}
	})
}

// ---- describe, body, and the status route ----

func TestGateDescribe(t *testing.T) {
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	cookie := joinCookie(t, e.kit, sesIn)
	var runs atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	tests := []struct {
		name     string
		describe Describe
		body     string
		status   int
	}{
		{"ErrNotGated passes through with the body", func(r *http.Request) (Action, error) { io.ReadAll(r.Body); return Action{}, ErrNotGated }, "hello", 200},
		{"wrapped ErrNotGated passes through", func(r *http.Request) (Action, error) { return Action{}, fmt.Errorf("GET: %w", ErrNotGated) }, "", 200},
		{"other error → 400", func(r *http.Request) (Action, error) { return Action{}, errors.New(`field "size" is required`) }, "", 400},
		{"empty key → 400", func(r *http.Request) (Action, error) { return Action{Terms: map[string]int{}}, nil }, "", 400},
		{"W16 terms not an object → 400", func(r *http.Request) (Action, error) { return Action{Key: "k", Terms: []int{1}}, nil }, "", 400},
		{"nil terms → 400", func(r *http.Request) (Action, error) { return Action{Key: "k"}, nil }, "", 400},
		{"raw JSON terms → 403", func(r *http.Request) (Action, error) {
			return Action{Key: "k", Terms: json.RawMessage(`{"b":1,"a":2}`)}, nil
		}, "", 403},
		{"too large body → 413", func(r *http.Request) (Action, error) { return Action{Key: "k", Terms: map[string]int{}}, nil }, strings.Repeat("x", defaultMaxBody+1), 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs.Store(0)
			r := httptest.NewRequest("POST", "/x", strings.NewReader(tt.body))
			r.AddCookie(cookie)
			rec := httptest.NewRecorder()
			e.kit.Gate(tt.describe)(next).ServeHTTP(rec, r)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.status == 200 && rec.Body.String() != tt.body {
				t.Errorf("handler read %q, want the body restored", rec.Body)
			}
			if tt.status == 400 && !strings.Contains(rec.Body.String(), "invalid_request") {
				t.Errorf("body %s", rec.Body)
			}
			if tt.status != 200 && runs.Load() != 0 {
				t.Errorf("handler ran")
			}
		})
	}
}

func TestStatusRoute(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			e := newGateEnv(t, be.make(t), newClock())
			status := e.kit.handler()
			rec := e.do(e.request(joinedIn, formM, "text/html"))
			_, ref := refOf(t, rec)
			statusURL := statusURLOf(t, rec)
			if !strings.HasPrefix(statusURL, defaultBasePath+"status?w=") {
				t.Fatalf("status URL %q", statusURL)
			}
			ask := func(target string, s *Session) (int, string) {
				r := httptest.NewRequest("GET", target, nil)
				if s != nil {
					r.AddCookie(joinCookie(t, e.kit, *s))
				}
				rec := httptest.NewRecorder()
				status.ServeHTTP(rec, r)
				var body struct{ Status string }
				json.Unmarshal(rec.Body.Bytes(), &body)
				if rec.Header().Get("Cache-Control") != "no-store" {
					t.Errorf("status route Cache-Control %q", rec.Header().Get("Cache-Control"))
				}
				return rec.Code, body.Status
			}
			byRef := defaultBasePath + "status?ref=" + ref
			for _, c := range []struct {
				name   string
				target string
				s      *Session
				code   int
				status string
			}{
				{"page handle → waiting", statusURL, &sesIn, 200, "waiting"},
				{"ref → waiting", byRef, &sesIn, 200, "waiting"},
				{"not joined → 404", statusURL, nil, 404, ""},
				{"W77 another account → 404", byRef, &sesOther, 404, ""},
				{"W44 signed out → 404", byRef, &sesOut, 404, ""},
				{"forged handle → 404", defaultBasePath + "status?w=abc", &sesIn, 404, ""},
				{"bad ref → 404", defaultBasePath + "status?ref=%3Cx%3E", &sesIn, 404, ""},
			} {
				if code, st := ask(c.target, c.s); code != c.code || st != c.status {
					t.Errorf("%s: %d %q, want %d %q", c.name, code, st, c.code, c.status)
				}
			}
			rr := e.lookup(sesIn, ref)
			e.record(sesIn, storedriver.TakeResult{Operation: rr.Current, Ref: ref})
			if code, st := ask(statusURL, &sesIn); code != 200 || st != "approved" { // W106
				t.Errorf("after approval: %d %s", code, st)
			}
			e.do(e.request(joinedIn, formM, "text/html"))
			if code, st := ask(statusURL, &sesIn); code != 200 || st != "performed" { // W108
				t.Errorf("after Continue: %d %s", code, st)
			}
			for _, f := range []string{"waiting.js", "fetch.js", "opsgate.css"} {
				r := httptest.NewRequest("GET", defaultBasePath+f, nil)
				rec := httptest.NewRecorder()
				status.ServeHTTP(rec, r)
				if rec.Code != 200 || rec.Body.Len() == 0 || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s: %d", f, rec.Code)
				}
			}
		})
	}
}

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
