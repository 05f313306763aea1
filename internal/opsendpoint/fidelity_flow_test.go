package opsendpoint_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
)

// W46: a recorded approval of a website operation applies to a browser
// joined to any Session that can approve it: the operation is returned in
// Session 1, approved in Session 2, and performed by the browser of
// Session 3, all of the same agent and User.
func TestApprovalAppliesToAnotherSessionsBrowser(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st, _ := open(t)
			var runs atomic.Int32
			s := newShop(t, st, tokenKey(t), &runs)
			a := newAgent(t)
			b1 := joinBrowser(t, s, a, "ses_1", "usr_1", "", `"operations";v="3"`)
			r := ref(t, b1.exchange(s, "ord_7Hk2", "L"), "ses_1")

			_, body, _ := a.call(t, s, r, agentRequest{sid: "ses_2", user: "usr_1"})
			op := body["operation"].(map[string]any)
			if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_2", user: "usr_1", approval: userApproval(op)}); status != http.StatusNoContent {
				t.Fatalf("approval in Session 2: %d %v", status, body)
			}
			b3 := joinBrowser(t, s, a, "ses_3", "usr_1", "", `"operations";v="3"`)
			if res := b3.exchange(s, "ord_7Hk2", "L"); res.StatusCode != http.StatusOK || runs.Load() != 1 {
				t.Fatalf("W46 Session 3's browser: %d, runs %d", res.StatusCode, runs.Load())
			}
			// Session 1's browser repeating gets a new operation, never a
			// second performance (§7).
			if res := b1.exchange(s, "ord_7Hk2", "L"); res.StatusCode != http.StatusForbidden || runs.Load() != 1 {
				t.Fatalf("Session 1's browser after: %d, runs %d", res.StatusCode, runs.Load())
			}
			if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != 200 || body["status"] != string(storedriver.StatusPerformed) {
				t.Fatalf("lookup: %d %v", status, body)
			}
			// Another User's browser never takes it (W45).
			b4 := joinBrowser(t, s, a, "ses_4", "usr_2", "", `"operations";v="3"`)
			if res := b4.exchange(s, "ord_7Hk2", "L"); res.StatusCode != http.StatusForbidden || runs.Load() != 1 {
				t.Fatalf("another User's browser: %d, runs %d", res.StatusCode, runs.Load())
			}
		})
	}
}

// W148: the sid in Poppy-Operation isn't a credential. A Session JWT of the
// right shape, naming the agent's client_id and the browser's sid, but
// signed through a delegation by a key the agent never published, is
// refused, and nothing is recorded.
func TestForgedSessionJWT(t *testing.T) {
	var runs atomic.Int32
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	a := newAgent(t)
	b := joinBrowser(t, s, a, "ses_1", "usr_1", "", `"operations";v="3"`)
	r := ref(t, b.exchange(s, "ord_7Hk2", "L"), "ses_1")
	_, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"})
	op := body["operation"].(map[string]any)

	forger, err := agentside.NewAgentKeys(a.clientID(), "ES256") // same client_id, keys not in its JWKS
	if err != nil {
		t.Fatal(err)
	}
	dlg, err := forger.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	jwt, err := dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(jwt, ".") != 2 {
		t.Fatalf("not a compact JWS: %q", jwt)
	}
	req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/poppy/operations", strings.NewReader(`{"ref":"`+r+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headers.Session, jwt)
	req.Header.Set(headers.Version, "1.0")
	req.Header.Set(headers.Extensions, `"operations";v="3"`)
	req.Header.Set(headers.Approval, userApproval(op))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != `Poppy-Session error="invalid_session"` {
		t.Fatalf("forged Session JWT: %d %q, want 401 with the Poppy-Session challenge", res.StatusCode, res.Header.Get("WWW-Authenticate"))
	}
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != http.StatusForbidden {
		t.Fatalf("W148: after the forged approval: %d %v, want 403 approval_required (nothing recorded)", status, body)
	}
	if res := b.exchange(s, "ord_7Hk2", "L"); res.StatusCode != http.StatusForbidden || runs.Load() != 0 {
		t.Fatalf("W148: the browser's repeat performed: %d, runs %d", res.StatusCode, runs.Load())
	}
}

// countingStore counts the store steps the endpoint takes.
type countingStore struct {
	storedriver.Store
	steps atomic.Int32
}

func (c *countingStore) Record(ctx context.Context, o store.Owner, ref string, a store.Approval, now time.Time, opts storedriver.RecordOptions) (storedriver.RecordReply, error) {
	c.steps.Add(1)
	return c.Store.Record(ctx, o, ref, a, now, opts)
}

func (c *countingStore) UseOnce(ctx context.Context, key string, until, now time.Time) (bool, error) {
	c.steps.Add(1)
	return c.Store.UseOnce(ctx, key, until, now)
}

func (c *countingStore) Lookup(ctx context.Context, o store.Owner, ref string, now time.Time) (storedriver.Found, bool, error) {
	c.steps.Add(1)
	return c.Store.Lookup(ctx, o, ref, now)
}

// The approval request uses up its Session JWT's jti in the same store step
// as the approval it records: one round trip, and a replay, whether of a
// lookup's token or an approval's, is refused with nothing recorded, on
// every web server sharing the store.
func TestReplayFusedWithRecord(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			_, client := open(t)
			key := tokenKey(t)
			var runs atomic.Int32
			c1, c2 := &countingStore{Store: storedriver.Steps(client())}, &countingStore{Store: storedriver.Steps(client())}
			s1, s2 := newShop(t, storedriver.AsStore(c1), key, &runs), newShop(t, storedriver.AsStore(c2), key, &runs)
			a := newAgent(t)
			b := joinBrowser(t, s1, a, "ses_1", "usr_1", "", `"operations";v="3"`)
			r := ref(t, b.exchange(s1, "ord_1", "S"), "ses_1")
			_, body, _ := a.call(t, s1, r, agentRequest{sid: "ses_1", user: "usr_1"})
			op := body["operation"].(map[string]any)

			// A lookup's token can't carry an approval afterwards.
			look := agentRequest{sid: "ses_1", user: "usr_1", jti: "jti-lookup"}
			if status, _, _ := a.call(t, s1, r, look); status != 403 {
				t.Fatalf("lookup: %d", status)
			}
			look.approval = userApproval(op)
			if status, body, h := a.call(t, s2, r, look); status != 401 || body["error"] != "invalid_session" || h.Get("WWW-Authenticate") == "" {
				t.Fatalf("approval with a lookup's token: %d %v", status, body)
			}
			if status, _, _ := a.call(t, s1, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != 403 {
				t.Fatalf("the replayed approval was recorded: %d", status)
			}

			// The approval request: one store step.
			c1.steps.Store(0)
			q := agentRequest{sid: "ses_1", user: "usr_1", jti: "jti-approve", approval: userApproval(op)}
			if status, body, _ := a.call(t, s1, r, q); status != 204 {
				t.Fatalf("approval: %d %v", status, body)
			}
			if n := c1.steps.Load(); n != 1 {
				t.Errorf("the approval request took %d store steps, want 1 (the jti used up in Record's step)", n)
			}
			// Its token again, at the other server, with or without the approval.
			if status, body, _ := a.call(t, s2, r, q); status != 401 || body["error"] != "invalid_session" {
				t.Fatalf("replayed approval: %d %v", status, body)
			}
			q.approval = ""
			if status, body, _ := a.call(t, s2, r, q); status != 401 {
				t.Fatalf("lookup with an approval's token: %d %v", status, body)
			}
			// A malformed approval uses its token up too.
			bad := agentRequest{sid: "ses_1", user: "usr_1", jti: "jti-bad", approval: `operation_id=`}
			if status, _, _ := a.call(t, s1, r, bad); status != 400 {
				t.Fatalf("malformed approval: %d", status)
			}
			bad.approval = ""
			if status, _, _ := a.call(t, s2, r, bad); status != 401 {
				t.Fatalf("a malformed approval's token used again: %d", status)
			}
		})
	}
}

// W87: an approval of a website operation is accepted only at endpoint. The
// kit offers no other interface, so the only other place an agent could
// send one is the website's own route, as an API call with its Session
// header and Poppy-Approval but without the joined browser: the Gate treats
// that as an ordinary request (W07), and neither records nor uses the
// approval, nor the one recorded at endpoint.
func TestApprovalOnlyAtEndpoint(t *testing.T) {
	var runs atomic.Int32
	s := newShop(t, memstore.New(memstore.Config{}), tokenKey(t), &runs)
	a := newAgent(t)
	b := joinBrowser(t, s, a, "ses_1", "usr_1", "", `"operations";v="3"`)
	r := ref(t, b.exchange(s, "ord_7Hk2", "L"), "ses_1")
	_, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"})
	op := body["operation"].(map[string]any)

	jwt, err := a.dlg.SessionJWT(agentside.SessionClaims{Audience: origin, SID: "ses_1", User: "usr_1"})
	if err != nil {
		t.Fatal(err)
	}
	apiCall := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.server.URL+"/orders/ord_7Hk2/exchange", strings.NewReader("size=L"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(headers.Session, jwt)
		req.Header.Set(headers.Version, "1.0")
		req.Header.Set(headers.Extensions, `"operations";v="3"`)
		req.Header.Set(headers.Approval, userApproval(op))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.Header.Get("Poppy-Operation") != "" {
			t.Fatalf("the website's route answered the API call with an operation")
		}
	}
	apiCall()
	// Not recorded: the operation still waits for an approval.
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != http.StatusForbidden {
		t.Fatalf("W87: after an approval sent to the website's route: %d %v", status, body)
	}
	// Recorded at endpoint, it isn't used by the API call either: the
	// joined browser's repeat performs it, once.
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1", approval: userApproval(op)}); status != http.StatusNoContent {
		t.Fatalf("approval at endpoint: %d %v", status, body)
	}
	before := runs.Load()
	apiCall()
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != 200 || body["status"] != "approved" {
		t.Fatalf("W87: the API call used the recorded approval: %d %v", status, body)
	}
	if res := b.exchange(s, "ord_7Hk2", "L"); res.StatusCode != http.StatusOK {
		t.Fatalf("the joined browser's repeat: %d", res.StatusCode)
	}
	if status, body, _ := a.call(t, s, r, agentRequest{sid: "ses_1", user: "usr_1"}); status != 200 || body["status"] != "performed" {
		t.Fatalf("after the browser's repeat: %d %v", status, body)
	}
	// The API call is the API's (RULES.md choice 7): the website's
	// approval fails its check 3 and it performs nothing (W87, P61); the
	// joined browser's approved repeat performs, once.
	if got := runs.Load() - before; got != 1 {
		t.Fatalf("handler runs %d", got)
	}
}
