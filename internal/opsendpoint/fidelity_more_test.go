package opsendpoint_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/join"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// movable is the one clock of a test site: its Kit, its endpoint, and the
// harness's agents and verifiers read it.
type movable struct {
	mu  sync.Mutex
	now time.Time
}

func (c *movable) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *movable) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// outcomeSite is a website whose gated exchange answers with the status the
// test sets (200 until then), counting its runs.
type outcomeSite struct {
	site   *webkittest.Site
	clock  *movable
	status atomic.Int32
	runs   atomic.Int32
}

func newOutcomeSite(t *testing.T, st store.Store) *outcomeSite {
	t.Helper()
	s := &outcomeSite{clock: &movable{now: time.Now().UTC().Truncate(time.Second)}}
	s.status.Store(http.StatusOK)
	s.site = webkittest.New("https://shop.example")
	s.site.Clock = s.clock.Now
	kit := webkit.New(cookieKeys...)
	kit.Store = st
	kit.Clock = s.clock.Now
	kit.Logger = slog.New(slog.DiscardHandler)
	verifier := &siteverify.Verifier{Origin: s.site.Origin, Resolver: s.site.Resolver(), Replay: storedriver.Steps(st), Clock: s.site.Clock}
	mux := http.NewServeMux()
	mux.Handle("POST /poppy/operations", opsendpoint.New(kit, opsendpoint.IdentityAuthenticator{Verifier: verifier, AccessTokens: s.site.AccessTokens()}))
	mux.Handle("POST /poppy/join", join.New(kit, s.site.Origin+"/poppy/join", verifier, s.site.AccessTokens()))
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(describeExchange)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.runs.Add(1)
		code := int(s.status.Load())
		w.WriteHeader(code)
		fmt.Fprintf(w, "exchange of %s for size %s: %d", r.PathValue("order"), r.PostFormValue("size"), code)
	})))
	s.site.Handler = mux
	return s
}

// waiting returns the operation a lookup of ref asks to approve, failing
// unless the answer is 403 approval_required.
func waiting(t *testing.T, s *webkittest.Session, ref string) *store.Operation {
	t.Helper()
	a := s.Lookup(ref)
	if a.Err != nil || a.StatusCode != http.StatusForbidden || a.Error != "approval_required" || a.Operation == nil {
		t.Fatalf("lookup %s: %d %q %s (%v), want 403 approval_required with the operation", ref, a.StatusCode, a.Error, a.Body, a.Err)
	}
	return a.Operation
}

// approval is the user's approval of op, as the agent sends it.
func approval(op *store.Operation) store.Approval {
	return store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverUser}
}

// W98 W90 W99 W122: a handler's 4xx means the action was not performed,
// whatever the 4xx: the operation waits again, the approval is used up (the
// browser's repeat gets a new 403 and ref, the same approval sent again a
// new revision), and a new approval performs it. 409 is the status the
// other tests use; a 400 (the handler refusing the request it was given)
// is as much a 4xx.
func TestHandler4xxIsNotPerformed(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			for _, code := range []int{http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity} {
				t.Run(fmt.Sprint(code), func(t *testing.T) {
					st, _ := open(t)
					s := newOutcomeSite(t, st)
					ses := s.site.NewAgent().Session("usr_1")
					b, err := ses.Join()
					if err != nil {
						t.Fatal(err)
					}
					form := url.Values{"size": {"L"}}
					first := b.PostForm("/orders/ord_7Hk2/exchange", form)
					if first.StatusCode != http.StatusForbidden || first.Ref == "" {
						t.Fatalf("first request: %d ref %q, want 403 with a ref", first.StatusCode, first.Ref)
					}
					op := waiting(t, ses, first.Ref)
					if a := ses.Send(first.Ref, approval(op)); a.StatusCode != http.StatusNoContent {
						t.Fatalf("approval: %d %s", a.StatusCode, a.Body)
					}
					s.status.Store(int32(code))
					if res := b.Again(); res.StatusCode != code || s.runs.Load() != 1 {
						t.Fatalf("Continue: %d, runs %d; want the handler's %d, run once", res.StatusCode, s.runs.Load(), code)
					}

					// Not performed: waiting again, under a revision an approval
					// can still use (W90, W122), never "performing" or
					// "performed".
					again := waiting(t, ses, first.Ref)
					if again.ID != op.ID || again.Revision == op.Revision {
						t.Errorf("after %d: lookup asks for %s.%s, want a new revision of %s", code, again.ID, again.Revision, op.ID)
					}
					// The approval is used up (W98): sent again it is a check-3
					// failure answered with a revision other than its own.
					if a := ses.Send(first.Ref, approval(op)); a.StatusCode != http.StatusForbidden || a.Operation == nil || a.Operation.Revision == op.Revision {
						t.Errorf("the used-up approval sent again: %d %q %s, want 403 approval_required with another revision", a.StatusCode, a.Error, a.Body)
					}
					// … and the browser's repeat is a request without an
					// approval: a new 403 and ref, the handler not run (W99).
					s.status.Store(http.StatusOK)
					repeat := b.Again()
					if repeat.StatusCode != http.StatusForbidden || repeat.Ref == "" || s.runs.Load() != 1 {
						t.Fatalf("repeat after %d: %d ref %q runs %d, want 403 with a ref, not run", code, repeat.StatusCode, repeat.Ref, s.runs.Load())
					}
					// A new approval performs it, once.
					next := waiting(t, ses, repeat.Ref)
					if next.ID != op.ID || next.Revision == op.Revision {
						t.Errorf("repeat's operation %s.%s, want a new revision of %s", next.ID, next.Revision, op.ID)
					}
					if a := ses.Send(repeat.Ref, approval(next)); a.StatusCode != http.StatusNoContent {
						t.Fatalf("new approval: %d %s", a.StatusCode, a.Body)
					}
					if res := b.Again(); res.StatusCode != http.StatusOK || s.runs.Load() != 2 {
						t.Fatalf("Continue after the new approval: %d, runs %d", res.StatusCode, s.runs.Load())
					}
					if a := ses.Lookup(first.Ref); a.StatusCode != http.StatusOK || a.OperationStatus != "performed" {
						t.Errorf("lookup after: %d %s, want 200 performed", a.StatusCode, a.Body)
					}
				})
			}
		})
	}
}

// W75 W101 W98: after a not-performed outcome the store still remembers the
// operation (its claim kept it), so once its revision has expired the
// endpoint, not the store's forgetting, must answer its ref 400
// invalid_request, with no operation, with or without an approval.
func TestNotPerformedThenExpiredIsInvalid(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := open(t)
			s := newOutcomeSite(t, st)
			ses := s.site.NewAgent().Session("usr_1")
			b, err := ses.Join()
			if err != nil {
				t.Fatal(err)
			}
			first := b.PostForm("/orders/ord_7Hk2/exchange", url.Values{"size": {"L"}})
			op := waiting(t, ses, first.Ref)
			if a := ses.Send(first.Ref, approval(op)); a.StatusCode != http.StatusNoContent {
				t.Fatalf("approval: %d %s", a.StatusCode, a.Body)
			}
			s.status.Store(http.StatusBadRequest)
			if res := b.Again(); res.StatusCode != http.StatusBadRequest || s.runs.Load() != 1 {
				t.Fatalf("Continue: %d runs %d", res.StatusCode, s.runs.Load())
			}
			again := waiting(t, ses, first.Ref)
			// The browser's repeat gets the ref of that latest revision.
			s.status.Store(http.StatusOK)
			repeat := b.Again()
			if repeat.StatusCode != http.StatusForbidden || repeat.Ref == "" || s.runs.Load() != 1 {
				t.Fatalf("repeat: %d ref %q runs %d, want 403 with a ref", repeat.StatusCode, repeat.Ref, s.runs.Load())
			}
			// One second past the expires_at of every revision it has.
			last := op.ExpiresAt
			if again.ExpiresAt.After(last) {
				last = again.ExpiresAt
			}
			s.clock.Add(last.Sub(s.clock.Now()) + time.Second)
			for _, ref := range []string{first.Ref, repeat.Ref} {
				for what, a := range map[string]*webkittest.Response{
					"lookup":                    ses.Lookup(ref),
					"the used-up approval":      ses.Send(ref, approval(op)),
					"an approval of the latest": ses.Send(ref, approval(again)),
				} {
					if a.StatusCode != http.StatusBadRequest || a.Error != "invalid_request" || a.Operation != nil {
						t.Errorf("W75 W101 %s of %s past expires_at: %d %q %s, want 400 invalid_request without an operation", what, ref, a.StatusCode, a.Error, a.Body)
					}
				}
			}
			if s.runs.Load() != 1 {
				t.Errorf("runs = %d, want 1", s.runs.Load())
			}
		})
	}
}

// nearRefs are refs one character or one part away from a real one: §4's
// "any other reference".
func nearRefs(ref string) []string {
	id, rev, _ := strings.Cut(ref, ".")
	return []string{
		ref + ".", ref + "..", "." + ref, " " + ref, ref + " ", ref + "\t", ref + "\n",
		id + ".." + rev, ref + "." + rev, ref + "." + ref, ref + ".x", ref + "..x",
		id + "." + rev[:len(rev)-1], id + "." + rev + "A",
	}
}

// W74 W76: a real ref with a "." appended, spaces around it, a dot or a
// revision part more, is not that ref: 400 invalid_request with no
// operation, whether it is looked up or approved, and nothing is recorded
// through it, while the operation waits and once it is approved.
func TestNearRefsAreInvalid(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := open(t)
			s := newOutcomeSite(t, st)
			ses := s.site.NewAgent().Session("usr_1")
			b, err := ses.Join()
			if err != nil {
				t.Fatal(err)
			}
			first := b.PostForm("/orders/ord_7Hk2/exchange", url.Values{"size": {"L"}})
			if first.StatusCode != http.StatusForbidden || first.Ref == "" {
				t.Fatalf("first request: %d ref %q", first.StatusCode, first.Ref)
			}
			op := waiting(t, ses, first.Ref)
			refused := func(state string) {
				t.Helper()
				for _, near := range nearRefs(first.Ref) {
					for what, a := range map[string]*webkittest.Response{
						"lookup":   ses.Lookup(near),
						"approval": ses.Send(near, approval(op)),
					} {
						if a.Err != nil || a.StatusCode != http.StatusBadRequest || a.Error != "invalid_request" || a.Operation != nil || a.OperationStatus != "" {
							t.Errorf("W74 %s, %s of %q: %d %q %s (%v), want 400 invalid_request alone", state, what, near, a.StatusCode, a.Error, a.Body, a.Err)
						}
					}
				}
			}
			refused("waiting")
			// Nothing was recorded: the real ref still asks for approval, and
			// the browser's repeat performs nothing.
			if again := waiting(t, ses, first.Ref); again.Revision != op.Revision {
				t.Errorf("after the near refs: asks for %s, want %s still", again.Revision, op.Revision)
			}
			if res := b.Again(); res.StatusCode != http.StatusForbidden || s.runs.Load() != 0 {
				t.Fatalf("repeat after near-ref approvals: %d, runs %d", res.StatusCode, s.runs.Load())
			}
			if a := ses.Send(first.Ref, approval(op)); a.StatusCode != http.StatusNoContent {
				t.Fatalf("approval of the real ref: %d %s", a.StatusCode, a.Body)
			}
			refused("approved")
			if res := b.Again(); res.StatusCode != http.StatusOK || s.runs.Load() != 1 {
				t.Fatalf("Continue: %d, runs %d", res.StatusCode, s.runs.Load())
			}
			refused("performed")
			if a := ses.Lookup(first.Ref); a.StatusCode != http.StatusOK || a.OperationStatus != "performed" {
				t.Errorf("the real ref after: %d %s, want 200 performed", a.StatusCode, a.Body)
			}
		})
	}
}

// W34 W72 with waiting operations computed (sealed refs): the ref of newer
// terms asks for their approval while an older revision's approval waits,
// rather than answering that older approval's status.
func TestSealedRefOfNewerTerms(t *testing.T) {
	m := memstore.New(memstore.Config{})
	s := newOutcomeSite(t, m)
	ses := s.site.NewAgent().Session("usr_1")
	b, err := ses.Join()
	if err != nil {
		t.Fatal(err)
	}
	first := b.PostForm("/orders/ord_7Hk2/exchange", url.Values{"size": {"M"}})
	if strings.Count(first.Ref, ".") != 2 {
		t.Fatalf("ref %q is not sealed", first.Ref)
	}
	op := waiting(t, ses, first.Ref)
	if a := ses.Send(first.Ref, approval(op)); a.StatusCode != http.StatusNoContent {
		t.Fatalf("approval of M: %d %s", a.StatusCode, a.Body)
	}
	l := b.PostForm("/orders/ord_7Hk2/exchange", url.Values{"size": {"L"}})
	if l.StatusCode != http.StatusForbidden || l.Ref == "" || l.Ref == first.Ref {
		t.Fatalf("L: %d ref %q", l.StatusCode, l.Ref)
	}
	newer := waiting(t, ses, l.Ref)
	if newer.ID != op.ID || newer.Revision == op.Revision || !strings.Contains(string(newer.Terms), `"L"`) {
		t.Errorf("L's ref asks for %s.%s %s, want L's own revision of %s", newer.ID, newer.Revision, newer.Terms, op.ID)
	}
	if a := ses.Lookup(first.Ref); a.StatusCode != http.StatusOK || a.OperationStatus != "approved" {
		t.Errorf("M's ref: %d %s, want 200 approved", a.StatusCode, a.Body)
	}
}
