package webkit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// apiSite is a shop whose exchange is offered on its JSON API and on its
// pages, behind one Gate with one describe (§4, §6 "APIs" and
// "Websites"): POST /api/orders/{order}/exchanges takes
// {"item_id","replacement_sku"}, POST /orders/{order}/exchange the same
// as a form. Each performance is counted at the handler.
type apiSite struct {
	site *webkittest.Site
	kit  *webkit.Kit
	now  atomic.Int64 // Unix nanoseconds; 0 is time.Now

	performed atomic.Int64
	// entered counts the handler's runs as they begin, before block.
	entered atomic.Int64
	// status is what the handler answers (0: 201), block when set
	// is waited on before it answers.
	status atomic.Int64
	block  atomic.Pointer[chan struct{}]
	// gone, when set, has describe refuse every exchange, as a shop's
	// does once the item is exchanged and no longer offers it.
	gone atomic.Bool
	// decline, when set, is the website's decline hook.
	decline func(endpoint.DeclineRequest) *webkit.Decline
}

type apiOptions struct {
	store   store.Store
	explain bool
	decline func(endpoint.DeclineRequest) *webkit.Decline
	// noMount serves the API routes without Mount.Handler in front.
	noMount bool
}

func newAPISite(t *testing.T, o apiOptions) *apiSite {
	t.Helper()
	a := &apiSite{site: webkittest.New("https://shop.example"), decline: o.decline}
	clock := func() time.Time {
		if n := a.now.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Now()
	}
	a.site.Clock = clock
	kit := webkit.New([]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210"))
	kit.Logger = slog.New(slog.DiscardHandler)
	kit.Clock = clock
	kit.ExplainRefusals = o.explain
	if o.store != nil {
		kit.Store = o.store
	}
	a.kit = kit
	describe := func(r *http.Request) (webkit.Action, error) {
		item, sku := "", ""
		if strings.HasPrefix(r.URL.Path, "/api/") {
			// The API call's verified Session, before any operation.
			if s, ok := webkit.SessionOf(r.Context()); !ok || s.Agent == "" || s.User == "" {
				return webkit.Action{}, errors.New("describe: no verified Session for an API call")
			}
			var body struct {
				ItemID         string `json:"item_id"`
				ReplacementSKU string `json:"replacement_sku"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				return webkit.Action{}, fmt.Errorf("the body is not {\"item_id\",\"replacement_sku\"}: %w", err)
			}
			item, sku = body.ItemID, body.ReplacementSKU
		} else {
			item, sku = r.FormValue("item_id"), r.FormValue("replacement_sku")
		}
		if item == "" || sku == "" {
			return webkit.Action{}, errors.New("item_id and replacement_sku are required")
		}
		if a.gone.Load() {
			return webkit.Action{}, errors.New("the item can't be exchanged")
		}
		order := r.PathValue("order")
		return webkit.Action{
			Key:     "exchange:" + order + ":" + item,
			Terms:   map[string]any{"order_id": order, "item_id": item, "replacement_sku": sku, "price_difference": map[string]string{"amount": "70.00", "currency": "USD"}},
			Summary: "Exchange item " + item + " on order " + order + " for " + sku + ", for $70.00 more.",
			Kind:    "exchange",
		}, nil
	}
	perform := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.entered.Add(1)
		if c := a.block.Load(); c != nil {
			<-*c
		}
		n := a.performed.Add(1)
		status := int(a.status.Load())
		if status == 0 {
			status = http.StatusCreated
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/api/exchanges/exc_%d", n))
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"exchange_id":"exc_%d","order_id":%q}`+"\n", n, r.PathValue("order"))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /api/orders/{order}/exchanges", kit.Gate(describe)(perform))
	mux.Handle("POST /orders/{order}/exchange", kit.Gate(describe)(perform))
	mux.Handle("POST /api/ping", kit.Gate(func(*http.Request) (webkit.Action, error) { return webkit.Action{}, webkit.ErrNotGated })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") })))
	// One interface only: describe sees the request, and a request that
	// carries Poppy-Session on itself is an API call (RULES.md choice 7).
	isAPICall := func(r *http.Request) bool { _, ok := r.Header["Poppy-Session"]; return ok }
	mux.Handle("POST /orders/{order}/gift-wrap", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		if isAPICall(r) {
			return webkit.Action{}, errors.New("gift wrapping is offered on the website only")
		}
		return webkit.Action{Key: "wrap:" + r.PathValue("order"), Terms: map[string]string{"order_id": r.PathValue("order")}, Summary: "Gift-wrap order " + r.PathValue("order") + "."}, nil
	})(perform))
	mux.Handle("POST /api/orders/{order}/refunds", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		if !isAPICall(r) {
			return webkit.Action{}, errors.New("refunds are offered on the API only")
		}
		return webkit.Action{Key: "refund:" + r.PathValue("order"), Terms: map[string]string{"order_id": r.PathValue("order")}, Summary: "Refund order " + r.PathValue("order") + "."}, nil
	})(perform))
	cfg := endpoint.Config{Origin: a.site.Origin, Kit: kit, Resolver: a.site.Resolver(), AccessTokens: a.site.AccessTokens()}
	if a.decline != nil {
		cfg.Decline = func(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline { return a.decline(d) }
	}
	m, err := endpoint.NewMount(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.noMount {
		a.site.Handler = mux
	} else {
		a.site.Handler = m.Handler(mux)
	}
	return a
}

// exchange is the API request for an exchange of item itm_4Qa on order.
func exchange(order, sku string) *http.Request {
	body := fmt.Sprintf(`{"item_id":"itm_4Qa","replacement_sku":%q}`, sku)
	r, _ := http.NewRequest(http.MethodPost, "/api/orders/"+order+"/exchanges", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// approvalOf is the user's approval of op, as an agent sends it (§6).
func approvalOf(op *store.Operation, approver store.Approver) *store.Approval {
	a := &store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: approver, ApprovedAt: time.Now().Add(-time.Minute)}
	if approver == store.ApproverUser {
		a.InputType = "tap"
	}
	return a
}

// ask sends the exchange without an approval and requires approval_required.
func (a *apiSite) ask(t *testing.T, s *webkittest.Session, r *http.Request) *store.Operation {
	t.Helper()
	before := a.performed.Load()
	res := s.Call(r, nil)
	if res.Err != nil || res.StatusCode != http.StatusForbidden || res.Error != "approval_required" || res.Operation == nil {
		t.Fatalf("the request without an approval: %d %v %s", res.StatusCode, res.Err, res.Body)
	}
	if a.performed.Load() != before {
		t.Fatal("P30: the handler ran before an approval came")
	}
	return res.Operation
}

func TestAPIExchange(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	agent := a.site.NewAgent()
	s := agent.SignedInSession("usr_1", "acct_1")
	res := s.Call(exchange("ord_7Hk2", "stormline-insulated-m"), nil)
	t.Run("P43 P44 P45 P46 approval required: 403 JSON with the operation, no WWW-Authenticate", func(t *testing.T) {
		if res.StatusCode != http.StatusForbidden || res.Error != "approval_required" {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type %q", ct)
		}
		if h := res.Header.Get("WWW-Authenticate"); h != "" {
			t.Errorf("P46: WWW-Authenticate %q", h)
		}
		op := res.Operation
		if op == nil || op.ID == "" || op.Revision == "" || len(op.Terms) == 0 || op.ExpiresAt.IsZero() {
			t.Fatalf("P12 P45: operation %+v", op)
		}
		if !storekit.ValidID(op.ID) || !storekit.ValidID(op.Revision) {
			t.Errorf("P19 P20: operation_id %q revision %q", op.ID, op.Revision)
		}
		var terms map[string]any
		if err := json.Unmarshal(op.Terms, &terms); err != nil || terms["replacement_sku"] != "stormline-insulated-m" {
			t.Errorf("P13: terms %s", op.Terms)
		}
		if a.performed.Load() != 0 {
			t.Error("P30: performed before an approval")
		}
	})
	op := res.Operation
	first := s.Call(exchange("ord_7Hk2", "stormline-insulated-m"), approvalOf(op, store.ApproverUser))
	t.Run("P03 P04 P49 P74 the same request with the approval is performed, with the handler's answer", func(t *testing.T) {
		if first.StatusCode != http.StatusCreated || !bytes.Contains(first.Body, []byte(`"exchange_id":"exc_1"`)) {
			t.Fatalf("%d %s", first.StatusCode, first.Body)
		}
		if a.performed.Load() != 1 {
			t.Fatalf("performed %d times", a.performed.Load())
		}
	})
	t.Run("P89 P90 P59 P60 a retry with the same approval, whatever its Idempotency-Key, gets the first answer", func(t *testing.T) {
		for _, key := range []string{"", "K1", "K2", "K3", ""} {
			r := exchange("ord_7Hk2", "stormline-insulated-m")
			if key != "" {
				r.Header.Set("Idempotency-Key", key)
			}
			again := s.Call(r, approvalOf(op, store.ApproverUser))
			if again.StatusCode != first.StatusCode || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Location") != first.Header.Get("Location") {
				t.Errorf("key %q: %d %s, want the first %d %s", key, again.StatusCode, again.Body, first.StatusCode, first.Body)
			}
		}
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				again := s.Call(exchange("ord_7Hk2", "stormline-insulated-m"), approvalOf(op, store.ApproverUser))
				if again.StatusCode != first.StatusCode || !bytes.Equal(again.Body, first.Body) {
					t.Errorf("at once: %d %s", again.StatusCode, again.Body)
				}
			})
		}
		wg.Wait()
		if n := a.performed.Load(); n != 1 {
			t.Fatalf("performed %d times", n)
		}
	})
	t.Run("P97 once performed, the same request without an approval is a new operation", func(t *testing.T) {
		next := a.ask(t, s, exchange("ord_7Hk2", "stormline-insulated-m"))
		if next.ID == op.ID {
			t.Errorf("P97: the performed operation_id %s again", op.ID)
		}
	})
	t.Run("P37 P50 another Session of the same agent, User and account approves it", func(t *testing.T) {
		b := agent.SignedInSession("usr_1", "acct_1")
		op := a.ask(t, s, exchange("ord_8", "m"))
		if res := b.Call(exchange("ord_8", "m"), approvalOf(op, store.ApproverAgent)); res.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
}

func TestAPIRetryWhilePerforming(t *testing.T) {
	a := newAPISite(t, apiOptions{explain: true})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	release := make(chan struct{})
	a.block.Store(&release)
	done := make(chan *webkittest.Response)
	go func() { done <- s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser)) }()
	// Wait until the handler holds the claim: then a retry is busy.
	deadline := time.Now().Add(5 * time.Second)
	for a.entered.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first request with the approval never reached the handler")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		retry := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
		if retry.StatusCode == http.StatusServiceUnavailable {
			t.Run("P67 P92 P95 P96 a retry while performing gets 503 with Retry-After, never a failure", func(t *testing.T) {
				if retry.Header.Get("Retry-After") == "" || retry.Error != "temporarily_unavailable" || retry.OperationStatus != "performing" {
					t.Errorf("%v %s", retry.Header, retry.Body)
				}
			})
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never busy: %d %s", retry.StatusCode, retry.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A request without an approval waits too (W145): no new operation
	// is offered while the first may be taking effect.
	if res := s.Call(exchange("ord_1", "m"), nil); res.StatusCode != http.StatusServiceUnavailable || res.Operation != nil {
		t.Errorf("without an approval while performing: %d %s", res.StatusCode, res.Body)
	}
	a.block.Store(nil)
	close(release)
	if res := <-done; res.StatusCode != http.StatusCreated {
		t.Fatalf("the first: %d %s", res.StatusCode, res.Body)
	}
	if n := a.performed.Load(); n != 1 {
		t.Fatalf("performed %d times", n)
	}
}

func TestAPIOutcomeUnknown(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	a.status.Store(http.StatusBadGateway) // a downstream timeout
	res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
	t.Run("P95 P96 an outcome the API can't tell is 503 with Retry-After, never the handler's failure", func(t *testing.T) {
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || bytes.Contains(res.Body, []byte("exchange_id")) {
			t.Fatalf("%d %v %s", res.StatusCode, res.Header, res.Body)
		}
		a.status.Store(0)
		again := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
		if again.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("the retry: %d %s", again.StatusCode, again.Body)
		}
		if n := a.performed.Load(); n != 1 {
			t.Errorf("the handler ran %d times", n)
		}
	})
}

func TestAPINotPerformedIsCheckedAgain(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	a.status.Store(http.StatusConflict) // the handler's own 4xx: not performed
	res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
	if res.StatusCode != http.StatusConflict {
		t.Fatalf("%d %s", res.StatusCode, res.Body)
	}
	a.status.Store(0)
	t.Run("P90 an attempt that took no effect is checked again, not answered with its first answer", func(t *testing.T) {
		again := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
		if again.StatusCode != http.StatusForbidden || again.Operation == nil || again.Operation.Revision == op.Revision {
			t.Fatalf("%d %s", again.StatusCode, again.Body)
		}
		if again.Operation.ID != op.ID {
			t.Errorf("P17: a new operation_id %s for the same action", again.Operation.ID)
		}
		if res := s.Call(exchange("ord_1", "m"), approvalOf(again.Operation, store.ApproverUser)); res.StatusCode != http.StatusCreated {
			t.Fatalf("the new revision approved: %d %s", res.StatusCode, res.Body)
		}
	})
}

func TestAPIExtensionRequired(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	for _, tc := range []struct{ name, ext string }{
		{"P08 P09 none", ""},
		{"P10 another major version", `"operations";v="2"`},
		{"P10 a later major version", `"operations";v="4"`},
	} {
		for _, approved := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s P11 approval %v", tc.name, approved), func(t *testing.T) {
				r := exchange("ord_1", "m")
				r.Header[http.CanonicalHeaderKey("Poppy-Extensions")] = nil
				if tc.ext != "" {
					r.Header.Set("Poppy-Extensions", tc.ext)
				}
				var ap *store.Approval
				if approved {
					ap = approvalOf(op, store.ApproverUser)
				}
				res := s.Call(r, ap)
				var body map[string]any
				_ = json.Unmarshal(res.Body, &body)
				if res.StatusCode != http.StatusForbidden || body["error"] != "extension_required" || body["extension"] != "operations" || body["operation"] != nil {
					t.Fatalf("%d %s", res.StatusCode, res.Body)
				}
			})
		}
	}
	if a.performed.Load() != 0 {
		t.Fatal("performed for a request that did not declare operations v3")
	}
	t.Run("P05 an action the Company doesn't gate is answered as usual", func(t *testing.T) {
		r, _ := http.NewRequest(http.MethodPost, "/api/ping", nil)
		if res := s.Call(r, nil); res.StatusCode != http.StatusOK || string(res.Body) != "pong" {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
}

func TestAPISessionChecksFirst(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	for _, approved := range []bool{false, true} {
		t.Run(fmt.Sprintf("P63 P64 an invalid Session gets invalid_session, never an operation (approval %v)", approved), func(t *testing.T) {
			r := exchange("ord_1", "m")
			r.Header.Set("Poppy-Session", "eyJ0eXAiOiJwb3BweS1zZXNzaW9uK2p3dCJ9.e30.AAAA")
			var ap *store.Approval
			if approved {
				ap = approvalOf(op, store.ApproverUser)
			}
			res := s.Call(r, ap)
			if res.StatusCode != http.StatusUnauthorized || res.Error != "invalid_session" || res.Operation != nil ||
				!strings.Contains(res.Header.Get("WWW-Authenticate"), "invalid_session") {
				t.Fatalf("%d %v %s", res.StatusCode, res.Header, res.Body)
			}
		})
	}
	t.Run("P64 a Session JWT used twice is refused", func(t *testing.T) {
		r := exchange("ord_1", "m")
		jwt := ""
		var first *webkittest.Response
		r2 := exchange("ord_1", "m")
		first = s.Call(r, nil)
		jwt = r.Header.Get("Poppy-Session")
		r2.Header.Set("Poppy-Session", jwt)
		if first.StatusCode != http.StatusForbidden {
			t.Fatalf("first: %d", first.StatusCode)
		}
		if res := s.Call(r2, nil); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("replayed: %d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("P07 a request without Poppy-Version 1 is refused", func(t *testing.T) {
		r := exchange("ord_1", "m")
		r.Header.Set("Poppy-Version", "2.0")
		if res := s.Call(r, approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusBadRequest || res.Operation != nil {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	if a.performed.Load() != 0 {
		t.Fatal("performed for an unverified request")
	}
}

func TestAPIWithoutTheMount(t *testing.T) {
	a := newAPISite(t, apiOptions{noMount: true})
	s := a.site.NewAgent().Session("usr_1")
	res := s.Call(exchange("ord_1", "m"), nil)
	t.Run("a request with Poppy-Session the Gate can't verify is refused, never ordinary", func(t *testing.T) {
		if res.StatusCode != http.StatusInternalServerError || res.Error != "server_error" || a.performed.Load() != 0 {
			t.Fatalf("%d %s, performed %d", res.StatusCode, res.Body, a.performed.Load())
		}
	})
	t.Run("W07 a request without it is an ordinary browser's", func(t *testing.T) {
		r := a.site.Browser().PostForm("/orders/ord_1/exchange", url.Values{"item_id": {"i"}, "replacement_sku": {"m"}})
		if r.StatusCode != http.StatusCreated || a.performed.Load() != 1 {
			t.Fatalf("%d %s", r.StatusCode, r.Body)
		}
	})
}

func TestAPIApprovalHeader(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	order := 0
	// each makes a new action, and sends its approval as header says.
	send := func(header func(op *store.Operation) string) (*webkittest.Response, *store.Operation) {
		order++
		o := fmt.Sprint("ord_", order)
		op := a.ask(t, s, exchange(o, "m"))
		r := exchange(o, "m")
		r.Header.Set("Poppy-Approval", header(op))
		return s.Call(r, nil), op
	}
	ids := func(op *store.Operation) string {
		return fmt.Sprintf(`operation_id=%q, revision=%q`, op.ID, op.Revision)
	}
	for _, tc := range []struct {
		name    string
		header  func(op *store.Operation) string
		perform bool
	}{
		{"P51 the spec's user approval", func(op *store.Operation) string {
			return ids(op) + `, approver="user", approved_at=1791487260, input_type="tap", reference="apr_01JD8ZK3Q9"`
		}, true},
		{"P51 the spec's agent approval", func(op *store.Operation) string {
			return ids(op) + `, approver="agent", approved_at=1791487255, reference="apr_01JD8ZK3R4"`
		}, true},
		{"P51 a value that doesn't parse", func(op *store.Operation) string { return ids(op) + `, approver="user", revision=(` }, false},
		{"P51 approved_at a String", func(op *store.Operation) string { return ids(op) + `, approver="user", approved_at="1791487260"` }, false},
		{"P52 no approver", func(op *store.Operation) string { return ids(op) }, false},
		{"P52 another approver", func(op *store.Operation) string { return ids(op) + `, approver="robot"` }, false},
		{"P53 an unknown member", func(op *store.Operation) string { return ids(op) + `, approver="user", sig=:AAAA:` }, true},
		{"P54 approved_at an hour old", func(op *store.Operation) string {
			return ids(op) + fmt.Sprintf(`, approver="user", approved_at=%d`, time.Now().Add(-time.Hour).Unix())
		}, true},
		{"P55 input_type with agent", func(op *store.Operation) string { return ids(op) + `, approver="agent", input_type="tap"` }, true},
		{"P57 only the required members", func(op *store.Operation) string { return ids(op) + `, approver="user"` }, true},
		{"P58 an input_type it doesn't know", func(op *store.Operation) string { return ids(op) + `, approver="user", input_type="blink"` }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.performed.Load()
			res, op := send(tc.header)
			performed := a.performed.Load() - before
			switch {
			case tc.perform && (res.StatusCode != http.StatusCreated || performed != 1):
				t.Fatalf("want performed: %d %s", res.StatusCode, res.Body)
			case !tc.perform && (res.StatusCode != http.StatusForbidden || res.Error != "approval_required" || performed != 0):
				t.Fatalf("want approval_required, not performed: %d %s", res.StatusCode, res.Body)
			case !tc.perform && res.Operation.Revision == op.Revision:
				// The request had no approval: its own revision is reused, as
				// for any request without one.
			}
		})
	}
}

func TestAPIChecks(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	agent := a.site.NewAgent()
	s := agent.SignedInSession("usr_1", "acct_1")
	t.Run("P66 P42 another agent's Session: as without an approval, never the first answer", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_1", "m"))
		if res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		other := a.site.NewAgent().SignedInSession("usr_1", "acct_1")
		res := other.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
		if res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.ID == op.ID {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		otherUser := agent.SignedInSession("usr_2", "acct_1")
		if res := otherUser.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusForbidden || res.Operation == nil {
			t.Fatalf("another User: %d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("P39 P41 a signed-out Session meets the account's operation: the challenge", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_2", "m"))
		out := agent.Session("usr_1")
		res := out.Call(exchange("ord_2", "m"), approvalOf(op, store.ApproverUser))
		if res.StatusCode != http.StatusUnauthorized || res.Error != "sign_in_required" || !strings.Contains(res.Header.Get("WWW-Authenticate"), "sign_in_required") {
			t.Fatalf("%d %v %s", res.StatusCode, res.Header, res.Body)
		}
	})
	t.Run("P40 another account: as without an approval", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_3", "m"))
		res := agent.SignedInSession("usr_1", "acct_2").Call(exchange("ord_3", "m"), approvalOf(op, store.ApproverUser))
		if res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.ID == op.ID {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("P68 P76 a made-up revision: the operation with another revision", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_4", "m"))
		made := *op
		made.Revision = "1791487200-madeUpRevision00"
		res := s.Call(exchange("ord_4", "m"), approvalOf(&made, store.ApproverUser))
		if res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.Revision == made.Revision {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("P29 P70 P75 P76 P21 the approval on a request for other terms: their operation", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_5", "m"))
		res := s.Call(exchange("ord_5", "l"), approvalOf(op, store.ApproverUser))
		if res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.Revision == op.Revision || !bytes.Contains(res.Operation.Terms, []byte(`"replacement_sku":"l"`)) {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		if res.Operation.ID != op.ID {
			t.Errorf("P17: operation_id %s, want %s", res.Operation.ID, op.ID)
		}
		// P34: both revisions approved and sent: performed once.
		if res := s.Call(exchange("ord_5", "l"), approvalOf(res.Operation, store.ApproverUser)); res.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		before := a.performed.Load()
		if res := s.Call(exchange("ord_5", "m"), approvalOf(op, store.ApproverUser)); res.StatusCode == http.StatusCreated && a.performed.Load() != before {
			t.Errorf("P34: the other revision performed the operation again")
		}
	})
	t.Run("P71 JSON members in another order and other spaces mean the same", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_6", "m"))
		r, _ := http.NewRequest(http.MethodPost, "/api/orders/ord_6/exchanges", strings.NewReader(` { "replacement_sku" : "m" , "item_id":"itm_4Qa" } `))
		if res := s.Call(r, approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusCreated {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("P16 P23 the same request twice: one operation_id, one revision", func(t *testing.T) {
		one, two := a.ask(t, s, exchange("ord_7", "m")), a.ask(t, s, exchange("ord_7", "m"))
		if one.ID != two.ID || one.Revision != two.Revision || !bytes.Equal(one.Terms, two.Terms) || !one.ExpiresAt.Equal(two.ExpiresAt) {
			t.Fatalf("%+v %+v", one, two)
		}
		if other := a.ask(t, s, exchange("ord_8", "m")); other.ID == one.ID {
			t.Errorf("P18: two actions share %s", one.ID)
		}
	})
	t.Run("P47 the same answer signed in or out", func(t *testing.T) {
		in := s.Call(exchange("ord_9", "m"), nil)
		out := agent.Session("usr_1").Call(exchange("ord_9", "m"), nil)
		if in.StatusCode != out.StatusCode || in.Error != out.Error || (in.Operation == nil) != (out.Operation == nil) {
			t.Fatalf("in %d %s, out %d %s", in.StatusCode, in.Body, out.StatusCode, out.Body)
		}
	})
}

func TestAPIExpiry(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	start := time.Now().Truncate(time.Second)
	a.now.Store(start.UnixNano())
	s := a.site.NewAgent().Session("usr_1")
	for _, tc := range []struct {
		name    string
		after   time.Duration
		perform bool
	}{{"P15 P69 at exactly expires_at", 0, true}, {"P15 P69 a second later", time.Second, false}} {
		t.Run(tc.name, func(t *testing.T) {
			a.now.Store(start.UnixNano())
			order := "ord_" + strings.Fields(tc.name)[len(strings.Fields(tc.name))-1]
			op := a.ask(t, s, exchange(order, "m"))
			a.now.Store(op.ExpiresAt.Add(tc.after).UnixNano())
			res := s.Call(exchange(order, "m"), approvalOf(op, store.ApproverUser))
			if tc.perform != (res.StatusCode == http.StatusCreated) {
				t.Fatalf("%d %s", res.StatusCode, res.Body)
			}
			if !tc.perform && (res.Operation == nil || res.Operation.Revision == op.Revision || !res.Operation.ExpiresAt.After(op.ExpiresAt)) {
				t.Fatalf("P69: %s", res.Body)
			}
		})
	}
}

func TestAPIDecline(t *testing.T) {
	a := newAPISite(t, apiOptions{decline: func(d endpoint.DeclineRequest) *webkit.Decline {
		if d.Approval.Approver == store.ApproverAgent {
			return &webkit.Decline{OperationID: "made_up", Reason: "Only you can approve an exchange.",
				Alternative: &webkit.Alternative{Instructions: "Exchange it on the order page.", References: []webkit.AlternativeReference{{Type: "web", URL: "https://shop.example/orders"}}}}
		}
		return nil
	}})
	s := a.site.NewAgent().SignedInSession("usr_1", "acct_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverAgent))
	t.Run("P77 P79 P80 P81 P82 P84 P86 P87 an agent approval declined: 403 with the members, nothing performed", func(t *testing.T) {
		if res.StatusCode != http.StatusForbidden || res.Error != "approval_declined" || res.Decline == nil {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		if res.Decline.OperationID != op.ID || res.Decline.Revision != op.Revision || res.Decline.Reason == "" || res.Decline.Alternative == nil {
			t.Errorf("P82: %+v", res.Decline)
		}
		var body map[string]any
		_ = json.Unmarshal(res.Body, &body)
		if _, ok := body["operation"]; ok {
			t.Error("P80: a decline with an operation")
		}
		if _, ok := body["code"]; ok || res.Header.Get("WWW-Authenticate") != "" {
			t.Error("P86 P87: a code or a challenge")
		}
		if a.performed.Load() != 0 {
			t.Error("P79: performed")
		}
	})
	t.Run("P88 a declined approval is not recorded: the request without one gets the operation", func(t *testing.T) {
		again := s.Call(exchange("ord_1", "m"), nil)
		if again.StatusCode != http.StatusForbidden || again.Error != "approval_required" || again.Operation == nil {
			t.Fatalf("%d %s", again.StatusCode, again.Body)
		}
		if res := s.Call(exchange("ord_1", "m"), approvalOf(again.Operation, store.ApproverUser)); res.StatusCode != http.StatusCreated {
			t.Fatalf("the user's approval: %d %s", res.StatusCode, res.Body)
		}
	})
	t.Run("P78 a failing check gets its own answer, not a decline", func(t *testing.T) {
		op := a.ask(t, s, exchange("ord_2", "m"))
		made := *op
		made.Revision = "1791487200-madeUpRevision00"
		res := s.Call(exchange("ord_2", "m"), approvalOf(&made, store.ApproverAgent))
		if res.Error != "approval_required" {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
}

// The Done-when test of issue 38: an approval recorded at the website's
// endpoint is refused when sent to the API for the same action, and the
// API's approval is refused at the website's endpoint (§6 "Websites").
func TestOneRecordAcrossInterfaces(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			o := apiOptions{}
			if backend == "redis" {
				o.store = redisstore.New(redistest.Server(t), redisstore.Options{})
			}
			a := newAPISite(t, o)
			s := a.site.NewAgent().SignedInSession("usr_1", "acct_1")
			b, err := s.Join()
			if err != nil {
				t.Fatal(err)
			}
			form := url.Values{"item_id": {"itm_4Qa"}, "replacement_sku": {"m"}}
			t.Run("P61 an approval recorded at the website's endpoint is refused at the API", func(t *testing.T) {
				page := b.PostForm("/orders/ord_1/exchange", form)
				if page.StatusCode != http.StatusForbidden || page.Ref == "" {
					t.Fatalf("%d %s", page.StatusCode, page.Body)
				}
				look := s.Lookup(page.Ref)
				if look.Operation == nil {
					t.Fatalf("lookup: %d %s", look.StatusCode, look.Body)
				}
				if res := s.Approve(page.Ref); res.StatusCode != http.StatusNoContent {
					t.Fatalf("approval at the endpoint: %d %s", res.StatusCode, res.Body)
				}
				res := s.Call(exchange("ord_1", "m"), approvalOf(look.Operation, store.ApproverUser))
				if res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.Revision == look.Operation.Revision {
					t.Fatalf("the website's approval at the API: %d %s", res.StatusCode, res.Body)
				}
				if res.Operation.ID != look.Operation.ID {
					t.Errorf("one action, two operation_ids: %s, %s", look.Operation.ID, res.Operation.ID)
				}
				if a.performed.Load() != 0 {
					t.Fatal("performed through the API with the website's approval")
				}
				// The browser's repeat still performs it, once.
				if res := page.Continue(); res.StatusCode != http.StatusCreated || a.performed.Load() != 1 {
					t.Fatalf("Continue: %d %s", res.StatusCode, res.Body)
				}
				// What the website performed is not performed again through
				// the API with the API's own approval of the same action (§7).
				if res2 := s.Call(exchange("ord_1", "m"), approvalOf(res.Operation, store.ApproverUser)); res2.StatusCode == http.StatusCreated || a.performed.Load() != 1 {
					t.Fatalf("the API's approval after the website performed: %d %s", res2.StatusCode, res2.Body)
				}
			})
			t.Run("P62 W88 the API's approval is refused at the website's endpoint", func(t *testing.T) {
				before := a.performed.Load()
				op := a.ask(t, s, exchange("ord_2", "m"))
				page := b.PostForm("/orders/ord_2/exchange", form)
				if page.Ref == "" {
					t.Fatalf("%d %s", page.StatusCode, page.Body)
				}
				if res := s.Send(page.Ref, *approvalOf(op, store.ApproverUser)); res.StatusCode == http.StatusNoContent {
					t.Fatalf("the API's approval with the website's ref: recorded: %d %s", res.StatusCode, res.Body)
				}
				if res := s.Send(op.ID+"."+op.Revision, *approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusBadRequest {
					t.Fatalf("the API's approval with its own revision as a ref: %d %s", res.StatusCode, res.Body)
				}
				if res := page.Continue(); res.StatusCode != http.StatusForbidden || a.performed.Load() != before {
					t.Fatalf("the browser performed with the API's approval: %d %s", res.StatusCode, res.Body)
				}
				if res := s.Call(exchange("ord_2", "m"), approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusCreated || a.performed.Load() != before+1 {
					t.Fatalf("the API's approval at the API: %d %s", res.StatusCode, res.Body)
				}
			})
			t.Run("P34 W145 one action approved on both interfaces is performed once", func(t *testing.T) {
				before := a.performed.Load()
				op := a.ask(t, s, exchange("ord_3", "m"))
				page := b.PostForm("/orders/ord_3/exchange", form)
				if page.Ref == "" {
					t.Fatalf("%d %s", page.StatusCode, page.Body)
				}
				if res := s.Approve(page.Ref); res.StatusCode != http.StatusNoContent {
					t.Fatalf("approval at the endpoint: %d %s", res.StatusCode, res.Body)
				}
				if res := s.Call(exchange("ord_3", "m"), approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusCreated {
					t.Fatalf("the API's approval at the API: %d %s", res.StatusCode, res.Body)
				}
				if res := page.Continue(); res.StatusCode == http.StatusCreated || a.performed.Load() != before+1 {
					t.Fatalf("the website performed it again: %d %s", res.StatusCode, res.Body)
				}
				if look := s.Lookup(page.Ref); look.OperationStatus != "performed" {
					t.Errorf("the website's ref after the API performed: %d %s", look.StatusCode, look.Body)
				}
			})
		})
	}
}

func TestAPIAtMostOnceOnRedis(t *testing.T) {
	a := newAPISite(t, apiOptions{store: redisstore.New(redistest.Server(t), redisstore.Options{})})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	t.Run("P89 the same approval sent 10 times at once performs once", func(t *testing.T) {
		var wg sync.WaitGroup
		codes := make(chan int, 10)
		for range 10 {
			wg.Go(func() { codes <- s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser)).StatusCode })
		}
		wg.Wait()
		close(codes)
		for c := range codes {
			if c != http.StatusCreated && c != http.StatusServiceUnavailable {
				t.Errorf("status %d", c)
			}
		}
		if n := a.performed.Load(); n != 1 {
			t.Fatalf("performed %d times", n)
		}
	})
}

// TestAPIRouteOneInterface keeps a gated route to one interface: its
// describe refuses a request of the other, and nothing is performed.
func TestAPIRouteOneInterface(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	b, err := s.Join()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("website only: the API call is refused, the joined browser gets its operation", func(t *testing.T) {
		r, _ := http.NewRequest(http.MethodPost, "/orders/ord_1/gift-wrap", nil)
		if res := s.Call(r, nil); res.StatusCode != http.StatusBadRequest || res.Operation != nil {
			t.Fatalf("API call: %d %s", res.StatusCode, res.Body)
		}
		if page := b.PostForm("/orders/ord_1/gift-wrap", url.Values{}); page.StatusCode != http.StatusForbidden || page.Ref == "" {
			t.Fatalf("browser: %d %s", page.StatusCode, page.Body)
		}
	})
	t.Run("API only: the joined browser is refused, the API call gets its operation", func(t *testing.T) {
		if page := b.PostForm("/api/orders/ord_1/refunds", url.Values{}); page.StatusCode != http.StatusBadRequest || page.Ref != "" {
			t.Fatalf("browser: %d %s", page.StatusCode, page.Body)
		}
		r, _ := http.NewRequest(http.MethodPost, "/api/orders/ord_1/refunds", nil)
		if res := s.Call(r, nil); res.StatusCode != http.StatusForbidden || res.Operation == nil {
			t.Fatalf("API call: %d %s", res.StatusCode, res.Body)
		}
	})
	if n := a.performed.Load(); n != 0 {
		t.Fatalf("performed %d times", n)
	}
}

// TestAPIChecksBeforeDescribe: checks 1 and 2 come before check 3 (P65),
// so a retry of a performed approval gets the first answer even when
// describe no longer describes the action (P90); and an approval naming
// the real revision with a made-up operation_id is never answered with
// that revision (P76).
func TestAPIChecksBeforeDescribe(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	t.Run("P68 P76 the real revision with a made-up operation_id: another revision", func(t *testing.T) {
		bad := approvalOf(op, store.ApproverUser)
		bad.OperationID = "op_madeUp0000000000000"
		res := s.Call(exchange("ord_1", "m"), bad)
		if res.StatusCode != http.StatusForbidden || res.Operation == nil || res.Operation.Revision == op.Revision || a.performed.Load() != 0 {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
	})
	first := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", first.StatusCode, first.Body)
	}
	a.gone.Store(true)
	t.Run("P65 P90 a retry once describe refuses the action: the first answer", func(t *testing.T) {
		res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
		if res.StatusCode != first.StatusCode || !bytes.Equal(res.Body, first.Body) || a.performed.Load() != 1 {
			t.Fatalf("%d %s, first %d %s", res.StatusCode, res.Body, first.StatusCode, first.Body)
		}
		if res := s.Call(exchange("ord_1", "m"), nil); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("without the approval: %d %s", res.StatusCode, res.Body)
		}
	})
}

// downStore fails Take while down is set, as a store that is briefly
// unreachable does.
type downStore struct {
	storedriver.Store
	down atomic.Bool
}

func (d *downStore) Take(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	if d.down.Load() {
		return storedriver.TakeResult{}, errors.New("the store is unreachable")
	}
	return d.Store.Take(ctx, o, a, now)
}

// TestAPIStoreDown: while the store can't be reached, the request with
// the approval gets 503 with Retry-After and nothing is performed; the
// approval still applies once it is back, and performs once (§7 P95,
// P96; W144 at the API).
func TestAPIStoreDown(t *testing.T) {
	st := &downStore{Store: storedriver.Steps(memstore.New(memstore.Config{}))}
	a := newAPISite(t, apiOptions{store: storedriver.AsStore(st)})
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_1", "m"))
	st.down.Store(true)
	res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser))
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || a.performed.Load() != 0 {
		t.Fatalf("store down: %d %s", res.StatusCode, res.Body)
	}
	st.down.Store(false)
	for range 2 {
		if res := s.Call(exchange("ord_1", "m"), approvalOf(op, store.ApproverUser)); res.StatusCode != http.StatusCreated {
			t.Fatalf("store back: %d %s", res.StatusCode, res.Body)
		}
	}
	if n := a.performed.Load(); n != 1 {
		t.Fatalf("performed %d times", n)
	}
}
