package opsendpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// t0 is the fixed time every test starts at; the clock is injected.
var t0 = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)

var quiet = slog.New(slog.DiscardHandler)

// fakeAuth maps a Poppy-Session value to the Session it proves. It stands
// in for webkit/identity, whose own tests cover the JWT checks.
type fakeAuth map[string]webkit.Session

func (f fakeAuth) Authenticate(_ context.Context, r *http.Request) (webkit.Session, error) {
	tok := r.Header.Get(headers.Session)
	switch tok {
	case "":
		return webkit.Session{}, fmt.Errorf("%w: no Poppy-Session", ErrUnauthenticated)
	case "keys-down":
		return webkit.Session{}, fmt.Errorf("%w: agent keys cannot be fetched", ErrUnavailable)
	case "bad-token":
		return webkit.Session{}, fmt.Errorf("%w: issued to another agent", ErrInvalidToken)
	}
	s, ok := f[tok]
	if !ok {
		return webkit.Session{}, fmt.Errorf("%w: unknown", ErrUnauthenticated)
	}
	return s, nil
}

const (
	agentA = "https://agent-a.example/client"
	agentB = "https://agent-b.example/client"
)

var sessions = fakeAuth{
	"out":        {ID: "ses_out", Agent: agentA, User: "usr_1"},
	"out2":       {ID: "ses_out2", Agent: agentA, User: "usr_1"}, // W40: another Session of the same agent and User
	"in":         {ID: "ses_in", Agent: agentA, User: "usr_1", Account: "acct_1"},
	"in-other":   {ID: "ses_in3", Agent: agentA, User: "usr_1", Account: "acct_2"},
	"otheruser":  {ID: "ses_u2", Agent: agentA, User: "usr_2"},
	"otheragent": {ID: "ses_b", Agent: agentB, User: "usr_1"},
}

// fixture is one endpoint on a memory store with a movable clock.
type fixture struct {
	t     *testing.T
	store store.Store
	ep    *Endpoint
	mu    sync.Mutex
	now   time.Time
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, store: memstore.New(memstore.Config{}), now: t0}
	f.ep = &Endpoint{Store: storedriver.Steps(f.store), Auth: sessions, Clock: f.clock, Logger: quiet}
	return f
}

func (f *fixture) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// issue returns an operation the website returned to session tok's browser.
func (f *fixture) issue(tok, key, terms string) storedriver.TakeResult {
	f.t.Helper()
	iss, err := storetest.Issue(context.Background(), storedriver.Steps(f.store), sessions[tok].Owner(), storedriver.TakeRequest{
		Key: key, Terms: []byte(terms), Summary: "Exchange the jacket for $70.00 more.", Lifetime: 10 * time.Minute,
	}, f.clock())
	if err != nil {
		f.t.Fatal(err)
	}
	return iss
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// post sends POST {"ref"} as session tok, with an optional Poppy-Approval.
func (f *fixture) post(tok, ref, approval string) response {
	f.t.Helper()
	body := `{"ref":` + mustJSON(ref) + `}`
	return f.do(tok, body, approval, nil)
}

func (f *fixture) do(tok, body, approval string, edit func(*http.Request)) response {
	f.t.Helper()
	r := httptest.NewRequest(http.MethodPost, "https://shop.example/poppy/operations", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(headers.Version, "1.0")
	r.Header.Set(headers.Extensions, `"operations";v="3"`)
	if tok != "" {
		r.Header.Set(headers.Session, tok)
	}
	if approval != "" {
		r.Header.Set(headers.Approval, approval)
	}
	if edit != nil {
		edit(r)
	}
	w := httptest.NewRecorder()
	f.ep.ServeHTTP(w, r)
	res := response{status: w.Code, header: w.Header(), raw: w.Body.String()}
	if w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), &res.body); err != nil {
			f.t.Fatalf("body is not a JSON object: %q", w.Body.String())
		}
	}
	return res
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func approvalOf(id, rev string, extra string) string {
	return fmt.Sprintf(`operation_id=%q, revision=%q, approver="user", approved_at=%d, input_type="tap"%s`, id, rev, t0.Unix(), extra)
}

func (res response) expect(t *testing.T, status int, errCode string) {
	t.Helper()
	if res.status != status {
		t.Fatalf("status = %d, want %d; body %s", res.status, status, res.raw)
	}
	if errCode != "" && res.body["error"] != errCode {
		t.Fatalf("error = %v, want %q; body %s", res.body["error"], errCode, res.raw)
	}
}

func (res response) operation(t *testing.T) map[string]any {
	t.Helper()
	op, ok := res.body["operation"].(map[string]any)
	if !ok {
		t.Fatalf("no operation in %s", res.raw)
	}
	return op
}

const jacket = `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`

// longJacket is jacket with a note too long for a 2048-character ref: the
// store can't compute its operation into the ref, and stores it at the 403
// (the stored fallback).
var longJacket = `{"note":"` + strings.Repeat("x", 2100) + `",` + jacket[1:]

func TestRequestChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		tok    string
		body   string
		edit   func(*http.Request)
		status int
		code   string
	}{
		{"W69 GET is not allowed", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Method = http.MethodGet }, 405, "invalid_request"},
		{"Poppy-Version missing", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Del(headers.Version) }, 400, "invalid_request"},
		{"Poppy-Version 2.0", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Set(headers.Version, "2.0") }, 400, "invalid_request"},
		{"W14 no Poppy-Extensions", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Del(headers.Extensions) }, 403, "extension_required"},
		{"W14 W13 operations v2", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Set(headers.Extensions, `"operations";v="2"`) }, 403, "extension_required"},
		{"W14 malformed Poppy-Extensions", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Set(headers.Extensions, `"operations;v=`) }, 403, "extension_required"},
		{"W74 body not JSON", "out", `ref=a.b`, nil, 400, "invalid_request"},
		{"W74 body an array", "out", `["a.b"]`, nil, 400, "invalid_request"},
		{"W74 ref missing", "out", `{"reference":"a.b"}`, nil, 400, "invalid_request"},
		{"W74 ref twice", "out", `{"ref":"a.b","ref":"c.d"}`, nil, 400, "invalid_request"},
		{"W74 ref a number", "out", `{"ref":7}`, nil, 400, "invalid_request"},
		{"W74 ref with a bad character", "out", `{"ref":"a/b"}`, nil, 400, "invalid_request"},
		{"W74 ref empty", "out", `{"ref":""}`, nil, 400, "invalid_request"},
		{"W59 W74 ref of 2049 characters", "out", `{"ref":"` + strings.Repeat("a", 2049) + `"}`, nil, 400, "invalid_request"},
		{"body over 4 KiB", "out", `{"ref":"a.b","pad":"` + strings.Repeat("x", 5000) + `"}`, nil, 400, "invalid_request"},
		{"trailing data after the object", "out", `{"ref":"a.b"} {}`, nil, 400, "invalid_request"},
		{"Content-Type text/plain", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, 400, "invalid_request"},
		{"W70 no Poppy-Session", "", `{"ref":"a.b"}`, nil, 401, "invalid_session"},
		{"W70 unknown Session", "forged", `{"ref":"a.b"}`, nil, 401, "invalid_session"},
		{"agent keys unavailable is 503, never 401", "keys-down", `{"ref":"a.b"}`, nil, 503, "temporarily_unavailable"},
		{"access token of another agent", "bad-token", `{"ref":"a.b"}`, nil, 401, "invalid_token"},
		{"W74 unknown ref", "out", `{"ref":"op_nope.123-abc"}`, nil, 400, "invalid_request"},
		{"W74 ref not of this kit's form", "out", `{"ref":"nodot"}`, nil, 400, "invalid_request"},
		{"malformed Poppy-Approval", "out", `{"ref":"a.b"}`, func(r *http.Request) { r.Header.Set(headers.Approval, `operation_id=`) }, 400, "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			res := f.do(tc.tok, tc.body, "", tc.edit)
			res.expect(t, tc.status, tc.code)
			if _, ok := res.body["operation"]; ok {
				t.Errorf("W11 W14: a refused request got an operation: %s", res.raw)
			}
			if tc.status == 503 && res.header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	t.Run("W72 W47 W48 W15 W49 waiting operation", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "exchange:ord_7Hk2:itm_4Qa", jacket)
		res := f.post("out", iss.Ref, "")
		res.expect(t, 403, "approval_required")
		if res.header.Get("WWW-Authenticate") != "" {
			t.Error("W49: approval_required carries WWW-Authenticate")
		}
		if ct := res.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type = %q", ct)
		}
		op := res.operation(t)
		if op["operation_id"] != iss.Operation.ID || op["revision"] != iss.Operation.Revision {
			t.Errorf("operation = %v, want %s/%s", op, iss.Operation.ID, iss.Operation.Revision)
		}
		if _, ok := op["terms"].(map[string]any); !ok { // W16
			t.Errorf("W16 terms is not an object: %v", op["terms"])
		}
		if op["summary"] != "Exchange the jacket for $70.00 more." {
			t.Errorf("summary = %v", op["summary"])
		}
		exp, err := time.Parse(time.RFC3339, fmt.Sprint(op["expires_at"])) // W17
		if err != nil || !exp.Equal(iss.Operation.ExpiresAt) {
			t.Errorf("W17 expires_at = %v (%v), want %v", op["expires_at"], err, iss.Operation.ExpiresAt)
		}
	})
	t.Run("W50 same answer signed in", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("in", "k", `{"a":1}`)
		f.post("in", iss.Ref, "").expect(t, 403, "approval_required")
	})
	t.Run("W40 W61 another Session of the same agent and User", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", `{"a":1}`)
		f.post("out2", iss.Ref, "").expect(t, 403, "approval_required")
	})
	for _, tc := range []struct {
		name, issuer, asker string
		status              int
		code                string
	}{
		{"W76 W77 W45 another agent", "out", "otheragent", 400, "invalid_request"},
		{"W77 W45 another User", "out", "otheruser", 400, "invalid_request"},
		{"W42 W77 signed in meets a signed-out operation", "out", "in", 400, "invalid_request"},
		{"W43 W77 another account", "in", "in-other", 400, "invalid_request"},
		{"W44 W73 signed out meets an account's operation", "in", "out", 401, "sign_in_required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			iss := f.issue(tc.issuer, "k", `{"a":1}`)
			res := f.post(tc.asker, iss.Ref, "")
			res.expect(t, tc.status, tc.code)
			if _, ok := res.body["operation"]; ok {
				t.Errorf("W76: a Session that can't approve got the operation: %s", res.raw)
			}
			if tc.code == "sign_in_required" && res.header.Get("WWW-Authenticate") != `Bearer error="sign_in_required"` {
				t.Errorf("challenge WWW-Authenticate = %q", res.header.Get("WWW-Authenticate"))
			}
		})
	}
	t.Run("W75 expired operation", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", `{"a":1}`)
		f.advance(10*time.Minute + time.Second)
		f.post("out", iss.Ref, "").expect(t, 400, "invalid_request")
	})
}

func TestApproval(t *testing.T) {
	t.Parallel()
	t.Run("W89 W90 W91 W92 W105 W106 recorded, then approved", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		res := f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, ""))
		res.expect(t, 204, "")
		if res.raw != "" {
			t.Errorf("W91: 204 with a body %q", res.raw)
		}
		res = f.post("out", iss.Ref, "")
		res.expect(t, 200, "")
		if res.body["status"] != "approved" || res.body["operation_id"] != iss.Operation.ID {
			t.Errorf("lookup = %s", res.raw)
		}
	})
	t.Run("W34 W72 the ref of newer terms asks for their approval while an older revision's waits", func(t *testing.T) {
		f := newFixture(t)
		m := f.issue("out", "k", `{"size":"M"}`)
		f.post("out", m.Ref, approvalOf(m.Operation.ID, m.Operation.Revision, "")).expect(t, 204, "")
		l := f.issue("out", "k", `{"size":"L"}`)
		if l.Operation.ID != m.Operation.ID || l.Operation.Revision == m.Operation.Revision {
			t.Fatalf("new terms: %s/%s after %s/%s", l.Operation.ID, l.Operation.Revision, m.Operation.ID, m.Operation.Revision)
		}
		res := f.post("out", l.Ref, "")
		res.expect(t, 403, "approval_required")
		if got := res.operation(t); got["revision"] != l.Operation.Revision || !strings.Contains(fmt.Sprint(got["terms"]), "L") {
			t.Fatalf("operation = %v, want the L revision", got)
		}
		// The M ref still reports its approval waiting (W106).
		if res := f.post("out", m.Ref, ""); res.status != 200 || res.body["status"] != "approved" {
			t.Fatalf("M ref: %d %s", res.status, res.raw)
		}
		// Once the L revision is approved too, its ref reports approved.
		f.post("out", l.Ref, approvalOf(l.Operation.ID, l.Operation.Revision, "")).expect(t, 204, "")
		if res := f.post("out", l.Ref, ""); res.status != 200 || res.body["status"] != "approved" {
			t.Fatalf("L ref after its approval: %d %s", res.status, res.raw)
		}
	})
	t.Run("repeated approval: 204 again, nothing new recorded", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		a := approvalOf(iss.Operation.ID, iss.Operation.Revision, "")
		f.post("out", iss.Ref, a).expect(t, 204, "")
		f.post("out", iss.Ref, a).expect(t, 204, "")
		rec, _, _ := storedriver.Steps(f.store).Lookup(context.Background(), sessions["out"].Owner(), iss.Ref, f.clock())
		if len(rec.Approvals) != 1 {
			t.Errorf("approvals recorded = %d, want 1", len(rec.Approvals))
		}
	})
	t.Run("W40 W41 W46 approved in another Session of the same agent and User", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("out2", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
	})
	for _, tc := range []struct{ name, header string }{
		{"W82 only the required members", `operation_id=%q, revision=%q, approver="agent"`},
		{"W83 unknown input_type", `operation_id=%q, revision=%q, approver="user", input_type="blink"`},
		{"W85 unknown member", `operation_id=%q, revision=%q, approver="user", sig=:AAAA:`},
		{"W79 approved_at an hour old", `operation_id=%q, revision=%q, approver="user", approved_at=` + fmt.Sprint(t0.Add(-time.Hour).Unix())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			iss := f.issue("out", "k", jacket)
			f.post("out", iss.Ref, fmt.Sprintf(tc.header, iss.Operation.ID, iss.Operation.Revision)).expect(t, 204, "")
		})
	}
	t.Run("W80 W81 input_type ignored with agent, the rest kept", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		h := fmt.Sprintf(`operation_id=%q, revision=%q, approver="agent", approved_at=%d, input_type="tap", reference="apr_01JD8ZK3R4"`, iss.Operation.ID, iss.Operation.Revision, t0.Unix())
		f.post("out", iss.Ref, h).expect(t, 204, "")
		rec, _, _ := storedriver.Steps(f.store).Lookup(context.Background(), sessions["out"].Owner(), iss.Ref, f.clock())
		if len(rec.Approvals) != 1 {
			t.Fatalf("approvals = %+v", rec.Approvals)
		}
		a := rec.Approvals[0]
		if a.InputType != "" || a.Approver != "agent" || a.Reference != "apr_01JD8ZK3R4" || !a.ApprovedAt.Equal(t0) {
			t.Errorf("recorded approval = %+v", a)
		}
	})
	t.Run("W78 missing approver records nothing", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("out", iss.Ref, fmt.Sprintf(`operation_id=%q, revision=%q`, iss.Operation.ID, iss.Operation.Revision)).expect(t, 400, "invalid_request")
		f.post("out", iss.Ref, "").expect(t, 403, "approval_required")
	})
	t.Run("W78 approver other than user or agent records nothing", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("out", iss.Ref, fmt.Sprintf(`operation_id=%q, revision=%q, approver="robot"`, iss.Operation.ID, iss.Operation.Revision)).expect(t, 400, "invalid_request")
		f.post("out", iss.Ref, "").expect(t, 403, "approval_required")
	})
	t.Run("W100 W114 W122 a revision never returned", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		res := f.post("out", iss.Ref, approvalOf(iss.Operation.ID, "1791487200-madeup", ""))
		res.expect(t, 403, "approval_required")
		if rev := res.operation(t)["revision"]; rev != iss.Operation.Revision || rev == "1791487200-madeup" {
			t.Errorf("revision = %v, want the current %s", rev, iss.Operation.Revision)
		}
	})
	// Stored (terms too long for a ref, so the store keeps the operation's
	// revisions from the 403 on): the operation has not expired, its newer
	// revision is live, so the expired one fails check 3 with the §4
	// answer for its ref (W100), never naming itself (W122).
	t.Run("W115 W100 W122 an expired stored revision replaced by a newer one", func(t *testing.T) {
		f := newFixture(t)
		old := f.issue("out", "k", longJacket)
		if strings.Count(old.Ref, ".") != 1 {
			t.Fatalf("ref %.60s… is sealed: want a stored operation", old.Ref)
		}
		f.advance(6 * time.Minute) // under half its lifetime left: a new revision
		cur := f.issue("out", "k", longJacket)
		f.advance(5 * time.Minute) // the old one has expired, the new one not
		if cur.Operation.ID != old.Operation.ID || cur.Operation.Revision == old.Operation.Revision {
			t.Fatalf("reissue: %+v then %+v", old.Operation, cur.Operation)
		}
		res := f.post("out", old.Ref, approvalOf(old.Operation.ID, old.Operation.Revision, ""))
		res.expect(t, 403, "approval_required")
		if rev := res.operation(t)["revision"]; rev != cur.Operation.Revision {
			t.Errorf("revision = %v, want %s", rev, cur.Operation.Revision)
		}
	})
	// Computed (the default, W38: an operation not performed need not be
	// stored): nothing was stored at either 403, and a sealed ref is the
	// operation as the store knows it, with its own revision (W72, the
	// ref's own revision). That revision has expired, so the operation has
	// as far as the ref can tell: 400 invalid_request (W101), and the agent
	// asks the page again. Once an approval stored the operation, the
	// stored case above applies.
	t.Run("W115 W101 W38 an expired computed revision replaced by a newer one", func(t *testing.T) {
		f := newFixture(t)
		old := f.issue("out", "k", jacket)
		if strings.Count(old.Ref, ".") != 2 {
			t.Fatalf("ref %q is not sealed: want a computed operation", old.Ref)
		}
		f.advance(6 * time.Minute)
		cur := f.issue("out", "k", jacket)
		f.advance(5 * time.Minute)
		if cur.Operation.ID != old.Operation.ID || cur.Operation.Revision == old.Operation.Revision {
			t.Fatalf("reissue: %+v then %+v", old.Operation, cur.Operation)
		}
		f.post("out", old.Ref, approvalOf(old.Operation.ID, old.Operation.Revision, "")).expect(t, 400, "invalid_request")
		// The newer revision's ref still takes its approval.
		f.post("out", cur.Ref, approvalOf(cur.Operation.ID, cur.Operation.Revision, "")).expect(t, 204, "")
	})
	t.Run("W116 operation_id of another operation", func(t *testing.T) {
		f := newFixture(t)
		x := f.issue("out", "x", jacket)
		y := f.issue("out", "y", `{"b":2}`)
		res := f.post("out", y.Ref, approvalOf(x.Operation.ID, x.Operation.Revision, ""))
		res.expect(t, 403, "approval_required")
		if id := res.operation(t)["operation_id"]; id != y.Operation.ID {
			t.Errorf("operation_id = %v, want the ref's %s", id, y.Operation.ID)
		}
	})
	t.Run("W18 approval at exactly expires_at is accepted", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.advance(iss.Operation.ExpiresAt.Sub(f.clock()))
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
	})
	t.Run("W18 W101 one second after expires_at", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.advance(iss.Operation.ExpiresAt.Sub(f.clock()) + time.Second)
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 400, "invalid_request")
	})
	t.Run("W111 W112 check 1 beats check 3", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("otheragent", iss.Ref, approvalOf(iss.Operation.ID, "1-bad", "")).expect(t, 400, "invalid_request")
		acct := f.issue("in", "k", jacket)
		f.post("out", acct.Ref, approvalOf(acct.Operation.ID, "1-bad", "")).expect(t, 401, "sign_in_required")
	})
}

// perform takes the recorded approval as the Gate does and finishes it.
func (f *fixture) perform(tok, key, terms string, outcome store.Outcome) {
	f.t.Helper()
	ctx := context.Background()
	res, err := storedriver.Steps(f.store).Take(ctx, sessions[tok].Owner(), storedriver.TakeRequest{Key: key, Terms: []byte(terms), Lifetime: 10 * time.Minute}, f.clock())
	if err != nil || res.Claim == nil {
		f.t.Fatalf("Take = %+v, %v; want a claim", res, err)
	}
	if outcome != 0 {
		if err := storedriver.Steps(f.store).Finish(ctx, *res.Claim, outcome, f.clock()); err != nil {
			f.t.Fatal(err)
		}
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		outcome store.Outcome // 0: still performing
		status  string
	}{
		{"W107 W113 W143 approval while performing", 0, "performing"},
		{"W142 outcome unknown stays performing", store.OutcomeUnknown, "performing"},
		{"W108 W113 W136 approval after performance", store.OutcomePerformed, "performed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			iss := f.issue("out", "k", jacket)
			a := approvalOf(iss.Operation.ID, iss.Operation.Revision, "")
			f.post("out", iss.Ref, a).expect(t, 204, "")
			f.perform("out", "k", jacket, tc.outcome)
			for _, approval := range []string{a, ""} { // the approval again, and a lookup
				res := f.post("out", iss.Ref, approval)
				res.expect(t, 200, "")
				if res.body["status"] != tc.status || res.body["operation_id"] != iss.Operation.ID {
					t.Errorf("answer = %s, want status %s", res.raw, tc.status)
				}
			}
		})
	}
	t.Run("W111 check 2 beats check 3", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
		f.perform("out", "k", jacket, store.OutcomePerformed)
		res := f.post("out", iss.Ref, approvalOf(iss.Operation.ID, "1791487200-never-returned", ""))
		res.expect(t, 200, "")
		if res.body["status"] != "performed" {
			t.Errorf("a performed operation with a bad revision: %s, want the check-2 answer", res.raw)
		}
	})
	t.Run("W109 W137 performed is remembered past expires_at", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
		f.perform("out", "k", jacket, store.OutcomePerformed)
		f.advance(time.Hour)
		res := f.post("out", iss.Ref, "")
		res.expect(t, 200, "")
		if res.body["status"] != "performed" {
			t.Errorf("status = %v", res.body["status"])
		}
	})
	t.Run("W98 not performed: waiting again, the approval used up", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
		f.perform("out", "k", jacket, store.OutcomeNotPerformed)
		f.post("out", iss.Ref, "").expect(t, 403, "approval_required")
	})
}

func TestDecline(t *testing.T) {
	t.Parallel()
	alt := &webkit.Alternative{Instructions: "The account holder can cancel on the website.", References: []webkit.AlternativeReference{{Type: "web", URL: "https://shop.example/account/subscription"}}}
	declineAgents := func(_ context.Context, d DeclineRequest) *webkit.Decline {
		if d.Approval.Approver == store.ApproverAgent {
			return &webkit.Decline{Reason: "Only the account holder can cancel the subscription.", Alternative: alt}
		}
		return nil
	}
	t.Run("W123 W125 W126 W127 W129 W131 W133 W134 an agent approval declined", func(t *testing.T) {
		f := newFixture(t)
		var seen DeclineRequest
		f.ep.Decline = func(ctx context.Context, d DeclineRequest) *webkit.Decline { seen = d; return declineAgents(ctx, d) }
		iss := f.issue("in", "cancel", `{"subscription_id":"sub_1"}`)
		h := fmt.Sprintf(`operation_id=%q, revision=%q, approver="agent"`, iss.Operation.ID, iss.Operation.Revision)
		res := f.post("in", iss.Ref, h)
		res.expect(t, 403, "approval_declined")
		if res.body["operation_id"] != iss.Operation.ID || res.body["revision"] != iss.Operation.Revision {
			t.Errorf("W127 decline = %s", res.raw)
		}
		if _, ok := res.body["operation"]; ok {
			t.Error("W126: a decline returned an operation")
		}
		for k := range res.body {
			switch k {
			case "error", "operation_id", "revision", "reason", "alternative":
			default:
				t.Errorf("W131: unexpected member %q", k)
			}
		}
		if a, _ := res.body["alternative"].(map[string]any); a == nil || a["references"] == nil {
			t.Errorf("W129 alternative = %v", res.body["alternative"])
		}
		if seen.Session.ID != "ses_in" || seen.Operation.Revision != iss.Operation.Revision || string(seen.Operation.Terms) != `{"subscription_id":"sub_1"}` {
			t.Errorf("the hook saw %+v", seen)
		}
		// W134: not recorded: the lookup still asks for approval, and a Take finds nothing.
		f.post("in", iss.Ref, "").expect(t, 403, "approval_required")
		take, err := storedriver.Steps(f.store).Take(context.Background(), sessions["in"].Owner(), storedriver.TakeRequest{Key: "cancel", Terms: []byte(`{"subscription_id":"sub_1"}`), Lifetime: 10 * time.Minute}, f.clock())
		if err != nil || take.Claim != nil {
			t.Errorf("W134: Take after a decline = %+v, %v", take, err)
		}
		// A user approval of the same revision is accepted.
		f.post("in", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
	})
	t.Run("W124 a failing check answers before the hook", func(t *testing.T) {
		f := newFixture(t)
		called := false
		f.ep.Decline = func(context.Context, DeclineRequest) *webkit.Decline { called = true; return &webkit.Decline{} }
		iss := f.issue("in", "cancel", `{"subscription_id":"sub_1"}`)
		f.post("in", iss.Ref, approvalOf(iss.Operation.ID, "1-bad", "")).expect(t, 403, "approval_required")
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 401, "sign_in_required")
		if called {
			t.Error("W124: the decline hook ran although a check failed")
		}
	})
}

// downStore fails every call, as an unreachable Redis would.
type downStore struct{ storedriver.Store }

var errDown = errors.New("connection refused")

func (downStore) Lookup(context.Context, store.Owner, string, time.Time) (storedriver.Found, bool, error) {
	return storedriver.Found{}, false, errDown
}
func (downStore) Record(context.Context, store.Owner, string, store.Approval, time.Time, storedriver.RecordOptions) (storedriver.RecordReply, error) {
	return storedriver.RecordReply{}, errDown
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.ep.Store = downStore{}
	for _, a := range []string{"", approvalOf("op_x", "1-x", "")} {
		res := f.post("out", "op_x.1-x", a)
		res.expect(t, 503, "temporarily_unavailable")
		if res.header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
	}
}

// FuzzEndpoint sends arbitrary bodies and headers: never a panic, never a 500.
func FuzzEndpoint(f *testing.F) {
	f.Add(`{"ref":"op_a.1-b"}`, `operation_id="op_a", revision="1-b", approver="user"`, `"operations";v="3"`, "1.0")
	f.Add(`{"ref":`, `operation_id=`, `operations`, "")
	f.Add(`{"ref":"a.b","ref":"c.d"}`, `approved_at="x"`, `"operations";v=3`, "1")
	f.Add(`[]`, ``, `"operations";v="3.1", "other";v="9"`, "1.2")
	mem := memstore.New(memstore.Config{})
	ep := &Endpoint{Store: mem.Steps(), Auth: sessions, Clock: func() time.Time { return t0 }, Logger: quiet}
	iss, _ := storetest.Issue(context.Background(), mem.Steps(), sessions["out"].Owner(), storedriver.TakeRequest{Key: "k", Terms: []byte(`{}`), Lifetime: time.Hour}, t0)
	f.Add(`{"ref":"`+iss.Ref+`"}`, fmt.Sprintf(`operation_id=%q, revision=%q, approver="agent"`, iss.Operation.ID, iss.Operation.Revision), `"operations";v="3"`, "1.0")
	f.Fuzz(func(t *testing.T, body, approval, extensions, version string) {
		r := httptest.NewRequest(http.MethodPost, "/poppy/operations", strings.NewReader(body))
		r.Header.Set(headers.Session, "out")
		r.Header.Set(headers.Version, version)
		r.Header.Set(headers.Extensions, extensions)
		if approval != "" {
			r.Header.Set(headers.Approval, approval)
		}
		w := httptest.NewRecorder()
		ep.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("status %d for body %q approval %q", w.Code, body, approval)
		}
		if b, _ := io.ReadAll(w.Body); len(b) > 0 && !json.Valid(b) {
			t.Fatalf("body is not JSON: %q", b)
		}
	})
}

// FuzzParseRefBody checks parseRefBody's fast path for {"ref":"<ref>"}
// against decodeRefBody: the same ref, or the same refusal.
func FuzzParseRefBody(f *testing.F) {
	for _, s := range []string{`{"ref":"op_a.1-b"}`, `{"ref":"a"}"}`, `{"ref":"a\"}`, `{"ref":"a\u0062"}`, `{"ref":""}`, `{"ref":"a.b","ref":"c.d"}`, `{"ref":"a.b"} `, `{"ref":"` + strings.Repeat("a", 2049) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := parseRefBody(body)
		want, wantErr := decodeRefBody(body)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: parseRefBody %q, %v; decodeRefBody %q, %v", body, got, gotErr, want, wantErr)
		}
	})
}
