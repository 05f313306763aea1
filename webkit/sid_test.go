package webkit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// TestSIDOfAnyVerifiedSession: every sid webkit/identity accepts (visible
// ASCII) can be named in Poppy-Operation, so a gated request from such a
// Session gets its 403 with the header (W53, W58), never a 500.
func TestSIDOfAnyVerifiedSession(t *testing.T) {
	t.Parallel()
	k := New()
	k.Sessions.(*CookieSessions).Insecure = true
	h := k.Gate(func(r *http.Request) (Action, error) {
		return Action{Key: "k", Terms: map[string]int{"n": 1}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler ran") }))
	for _, sid := range []string{"ses_1", "ses:1.x/y", `s"q\`, strings.Repeat("s", 255)} {
		rec := httptest.NewRecorder()
		if err := k.Sessions.Bind(rec, httptest.NewRequest("GET", "/", nil), Session{ID: sid, Agent: "https://a.example/c", User: "u", Extensions: map[string]string{"operations": "3"}}); err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("POST", "/x", nil)
		r.AddCookie(rec.Result().Cookies()[0])
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got, _, err := headers.ParseOperation(w.Result().Header.Values(headers.Operation))
		if w.Code != http.StatusForbidden || err != nil || got != sid {
			t.Errorf("sid %q: status %d, Poppy-Operation sid %q, err %v", sid, w.Code, got, err)
		}
	}
}

// TestApprovalNeverThroughTheBrowser: a page's request that carries a
// Poppy-Approval header (any script in the Session can send one) is handled
// as a request without an approval: 403 with a ref, the handler not run,
// nothing recorded (§6 "Websites", §8.2; W86).
func TestApprovalNeverThroughTheBrowser(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	iss := e.issue(sesOut, "ord_1", "M")
	r := e.request(joinedOut, "order=ord_1&size=M", "application/json")
	hdr, err := headers.FormatApproval(store.Approval{OperationID: iss.Operation.ID, Revision: iss.Operation.Revision, Approver: headers.ApproverUser})
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(headers.Approval, hdr)
	rec := e.do(r)
	if rec.Code != http.StatusForbidden || rec.Header().Get(headers.Operation) == "" || e.runs.Load() != 0 {
		t.Fatalf("W86: status %d, Poppy-Operation %q, handler runs %d", rec.Code, rec.Header().Get(headers.Operation), e.runs.Load())
	}
	if got := e.lookup(sesOut, iss.Ref); got.Status != storedriver.StatusWaiting || len(got.Approvals) != 0 {
		t.Fatalf("W86: the browser's Poppy-Approval was recorded: %+v", got)
	}
}
