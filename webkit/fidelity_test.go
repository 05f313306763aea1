package webkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
)

// §7 W142, W143: while the outcome is unknown, the browser is never told
// the action failed. The handler's 5xx or panic never reaches it: the Gate
// answers 503 with Retry-After and the kit's "not known yet" answer.
func TestOutcomeUnknownNeverReportedAsFailed(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			for _, tc := range []struct {
				name    string
				accept  string
				handler http.HandlerFunc
				kind    string
			}{
				{"W142 W143 500 page", "text/html", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("X-Handler", "failed")
					w.Header().Set("Content-Type", "text/plain")
					w.WriteHeader(500)
					io.WriteString(w, "exchange failed")
				}, "html"},
				{"W142 W143 502 to a script", "application/json", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("X-Handler", "failed")
					http.Error(w, "exchange failed", http.StatusBadGateway)
				}, "json"},
				{"W142 W143 http.Error 500", "text/html", func(w http.ResponseWriter, r *http.Request) {
					http.Error(w, "exchange failed", http.StatusInternalServerError)
				}, "html"},
				{"W142 W143 panic before anything is written", "text/html", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("X-Handler", "failed")
					panic("payment provider timed out")
				}, "html"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := newGateEnv(t, be.make(t), newClock())
					var logs bytes.Buffer
					e.kit.Logger = slog.New(slog.NewTextHandler(&logs, nil))
					h := e.kit.Gate(exchangeDescribe)(tc.handler)
					// A header the site set before the Gate stays; the
					// handler's own don't go out.
					site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.Header().Set("Content-Security-Policy", "script-src 'self'")
						h.ServeHTTP(w, r)
					})
					approved := e.approve(sesIn, "ord_7", "M")
					rec := httptest.NewRecorder()
					site.ServeHTTP(rec, e.request(joinedIn, formM, tc.accept))

					if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
						t.Fatalf("answer %d Retry-After %q; want 503 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
					}
					if strings.Contains(rec.Body.String(), "failed") || rec.Header().Get("X-Handler") != "" {
						t.Fatalf("the handler's failure reached the browser: %v %q", rec.Header(), rec.Body.String())
					}
					if rec.Header().Get("Content-Security-Policy") == "" {
						t.Errorf("the site's own header set before the Gate was dropped")
					}
					if got := bodyKind(rec); got != tc.kind {
						t.Errorf("body %s, want %s: %q", got, tc.kind, rec.Body.String())
					}
					if tc.kind == "json" && !strings.Contains(rec.Body.String(), `"outcome_unknown"`) {
						t.Errorf("JSON body %q", rec.Body.String())
					}
					if tc.kind == "html" && !strings.Contains(rec.Body.String(), "Not known yet") {
						t.Errorf("page %q", rec.Body.String())
					}
					if st := e.lookup(sesIn, approved.Ref).Status; st != storedriver.StatusPerforming {
						t.Errorf("status %s, want performing (W142)", st)
					}
					if strings.Contains(tc.name, "panic") && !strings.Contains(logs.String(), "payment provider timed out") {
						t.Errorf("the panic was not logged: %q", logs.String())
					}
					// A repeat never performs it again (§7): the approval is
					// used up, so the browser gets a new ref, and the agent
					// finds the earlier one performing.
					e.do(e.request(joinedIn, formM, "text/html"))
					if st := e.lookup(sesIn, approved.Ref).Status; st != storedriver.StatusPerforming {
						t.Errorf("after a repeat: %s, want performing", st)
					}
				})
			}
		})
	}
	t.Run("a panic after the response began goes on up", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		h := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "half")
			panic("boom")
		}))
		e.approve(sesIn, "ord_7", "M")
		var p any
		func() {
			defer func() { p = recover() }()
			h.ServeHTTP(httptest.NewRecorder(), e.request(joinedIn, formM, "text/html"))
		}()
		if p != "boom" {
			t.Fatalf("recovered %v, want the handler's panic", p)
		}
	})
	t.Run("SetOutcome before a 5xx lets the handler's answer through", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		h := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			SetOutcome(r, store.OutcomeNotPerformed)
			http.Error(w, "the warehouse refused", http.StatusBadGateway)
		}))
		e.approve(sesIn, "ord_7", "M")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, e.request(joinedIn, formM, "text/html"))
		if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "warehouse") {
			t.Fatalf("%d %q", rec.Code, rec.Body.String())
		}
	})
	t.Run("replaceable: Kit.Refused with FailureReason", func(t *testing.T) {
		e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
		var reason error
		e.kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reason = FailureReason(r)
			w.Header().Set("Retry-After", "9")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "our own page")
		})
		h := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
		}))
		e.approve(sesIn, "ord_7", "M")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, e.request(joinedIn, formM, "text/html"))
		if rec.Body.String() != "our own page" || !errors.Is(reason, ErrOutcomeUnknown) {
			t.Fatalf("%q reason %v", rec.Body.String(), reason)
		}
	})
}

// statusURLOf returns the waiting page's status route URL.
func statusURLOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatal(err)
	}
	var statusURL string
	var find func(*html.Node)
	find = func(n *html.Node) {
		if v := attr(n, "data-opsgate-status"); v != "" {
			statusURL = v
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			find(c)
		}
	}
	find(doc)
	if statusURL == "" {
		t.Fatalf("no status URL in %q", rec.Body.String())
	}
	return statusURL
}

// W93: the waiting page repeats its request when the status route says
// "approved", so the route says it only when an approval applies to that
// page's own request; otherwise the page would loop.
func TestStatusRouteApprovedOnlyForThePagesTerms(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			e := newGateEnv(t, be.make(t), newClock())
			routes := e.kit.handler()
			ask := func(target string) string {
				r := httptest.NewRequest("GET", target, nil)
				r.AddCookie(joinCookie(t, e.kit, sesIn))
				rec := httptest.NewRecorder()
				routes.ServeHTTP(rec, r)
				var body struct{ Status string }
				json.Unmarshal(rec.Body.Bytes(), &body)
				return body.Status
			}
			pageL := e.do(e.request(joinedIn, formL, "text/html"))
			pageM := e.do(e.request(joinedIn, formM, "text/html"))
			urlL, urlM := statusURLOf(t, pageL), statusURLOf(t, pageM)
			_, refL := refOf(t, pageL)
			_, refM := refOf(t, pageM)
			if refL == refM {
				t.Fatalf("W26: L and M share the ref %s", refL)
			}
			// The agent approves L, the terms of the first page. (The ref
			// may go on after its revision with a seal: storekit.SplitRef
			// reads it as the store does.)
			id, rev, _ := storekit.SplitRef(refL)
			e.record(sesIn, storedriver.TakeResult{Operation: store.Operation{ID: id, Revision: rev}, Ref: refL})

			if got := ask(urlL); got != "approved" {
				t.Errorf("W106 L's page: %q, want approved", got)
			}
			if got := ask(urlM); got != "waiting" {
				t.Errorf("W93 M's page: %q, want waiting (L's approval doesn't apply to it)", got)
			}
			if got := ask(defaultBasePath + "status?ref=" + refM); got != "waiting" {
				t.Errorf("W93 M's ref: %q, want waiting", got)
			}
			// M's page repeating would not perform: the route was right.
			if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code != http.StatusForbidden {
				t.Fatalf("M's repeat: %d", rec.Code)
			}
			if rec := e.do(e.request(joinedIn, formL, "text/html")); rec.Code != http.StatusOK || e.runs.Load() != 1 {
				t.Fatalf("L's repeat: %d, runs %d", rec.Code, e.runs.Load())
			}
			if got := ask(urlL); got != "performed" {
				t.Errorf("W108 L's page after Continue: %q", got)
			}
		})
	}
}

// W93 for a script's request: the Gate's JSON 403 names the status route
// in X-Opsgate-Status, whose sealed handle carries the terms, so that
// opsgate.fetch hears "approved" for an approval of a newer revision of the
// same terms, which its repeated request takes (§6 check 3). Asked by ref,
// the route knows only the ref's revision and says "waiting".
func TestStatusRouteOfAScriptsRequest(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			c := newClock()
			e := newGateEnv(t, be.make(t), c)
			rec := e.do(e.request(joinedIn, formM, "application/json"))
			_, ref := refOf(t, rec)
			status := rec.Header().Get(statusHeader)
			if rec.Code != http.StatusForbidden || !strings.HasPrefix(status, defaultBasePath+"status?w=") {
				t.Fatalf("JSON 403: %d, %s %q", rec.Code, statusHeader, status)
			}
			if strings.Contains(status, ref) {
				t.Errorf("W64: %s shows the ref", statusHeader)
			}
			if page := e.do(e.request(joinedIn, formM, "text/html")); page.Header().Get(statusHeader) != "" {
				t.Errorf("the waiting page got %s: it names its route in the page", statusHeader)
			}
			// The same terms a few seconds later (the agent's own request)
			// get a newer revision, which the agent approves.
			c.Add(3 * time.Second)
			newer := e.issue(sesIn, "ord_7", "M")
			if _, rev, _ := storekit.SplitRef(ref); newer.Operation.Revision == rev {
				t.Fatalf("revision %s issued again: nothing newer to approve", rev)
			}
			e.record(sesIn, newer)
			if code, st := askStatus(t, e.kit, status, sesIn); code != 200 || st != "approved" {
				t.Errorf("W93 the script's route: %d %q, want approved", code, st)
			}
			if code, st := askStatus(t, e.kit, defaultBasePath+"status?ref="+url.QueryEscape(ref), sesIn); code != 200 || st != "waiting" {
				t.Errorf("by ref: %d %q, want waiting (it knows only its own revision)", code, st)
			}
			// And "approved" was right: the repeated request performs.
			if again := e.do(e.request(joinedIn, formM, "application/json")); again.Code != http.StatusOK || e.runs.Load() != 1 {
				t.Fatalf("the repeated request: %d, runs %d", again.Code, e.runs.Load())
			}
			if _, st := askStatus(t, e.kit, status, sesIn); st != "performed" {
				t.Errorf("W108 after the repeat: %q", st)
			}
			// Other terms' approval is not heard (the script would loop).
			rec = e.do(e.request(joinedIn, formL, "application/json"))
			statusL := rec.Header().Get(statusHeader)
			c.Add(3 * time.Second)
			e.approve(sesIn, "ord_7", "M")
			if _, st := askStatus(t, e.kit, statusL, sesIn); st != "waiting" {
				t.Errorf("W93 L's route after M's approval: %q, want waiting", st)
			}
		})
	}
}

// flakyStore fails Take while down is set, as a store that is briefly
// unreachable does.
type flakyStore struct {
	storedriver.Store
	down atomic.Bool
}

// Issue passes storetest.Issue on to the wrapped store.
func (f *flakyStore) Issue(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	return storetest.Issue(ctx, f.Store, o, a, now)
}

func (f *flakyStore) Take(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if f.down.Load() {
		return storedriver.TakeResult{}, errDown
	}
	return f.Store.Take(ctx, o, a, now)
}

// W144: an approval that a failed browser request didn't use up still
// applies: once the store is back, the next repeat performs it, once.
func TestApprovalAppliesAfterTheStoreRecovers(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			st := &flakyStore{Store: storedriver.Steps(be.make(t))}
			e := newGateEnv(t, storedriver.AsStore(st), newClock())
			approved := e.approve(sesIn, "ord_7", "M")
			st.down.Store(true)
			if rec := e.do(e.request(joinedIn, formM, "text/html")); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("store down: %d", rec.Code)
			}
			st.down.Store(false)
			if got := e.lookup(sesIn, approved.Ref).Status; got != storedriver.StatusApproved {
				t.Fatalf("after the failed repeat: %s, want approved", got)
			}
			rec := e.do(e.request(joinedIn, formM, "text/html"))
			if rec.Code != http.StatusOK || bodyKind(rec) != "handler" || e.runs.Load() != 1 {
				t.Fatalf("W144 repeat after recovery: %d %s, runs %d", rec.Code, bodyKind(rec), e.runs.Load())
			}
			if got := e.lookup(sesIn, approved.Ref).Status; got != storedriver.StatusPerformed {
				t.Fatalf("status %s, want performed", got)
			}
		})
	}
}
