package refagent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

func exchangeQuestion(amount string, action string) Question {
	terms := `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"` + amount + `","currency":"USD"}}`
	return Question{
		Operation:       store.Operation{ID: "op_1", Revision: "r1", Terms: json.RawMessage(terms), ExpiresAt: time.Now().Add(time.Minute)},
		Action:          action,
		AgentMayApprove: true,
	}
}

const exchangeAction = "POST http://shop.test/orders/ord_7Hk2/items/itm_4Qa/exchange"

func TestA24StandingInstruction(t *testing.T) {
	r, err := ParseRule("exchange<=100USD")
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	user := DeciderFunc(func(context.Context, Question) (Decision, error) {
		asked++
		return Decision{Approve: true, Approver: store.ApproverUser}, nil
	})
	s := &Standing{Rules: []Rule{r}, Ask: user}
	for _, tc := range []struct {
		name     string
		q        Question
		approver store.Approver
	}{
		{"A24 covered: 70.00 USD", exchangeQuestion("70.00", exchangeAction), store.ApproverAgent},
		{"A24 refund is covered", exchangeQuestion("-30.00", exchangeAction), store.ApproverAgent},
		{"A24 over the limit asks the user", exchangeQuestion("100.01", exchangeAction), store.ApproverUser},
		{"A24 another kind of action asks the user", exchangeQuestion("10.00", "POST http://shop.test/account/subscription/cancel"), store.ApproverUser},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := s.Decide(t.Context(), tc.q)
			if err != nil || !d.Approve || d.Approver != tc.approver || (d.Approver == store.ApproverAgent && d.InputType != "") {
				t.Fatalf("decision %+v, %v; want approver %s", d, err, tc.approver)
			}
		})
	}
	t.Run("A26 A43 only the user after an agent approval or a decline", func(t *testing.T) {
		q := exchangeQuestion("10.00", exchangeAction)
		q.AgentMayApprove, q.Why = false, "declined"
		if d, _ := s.Decide(t.Context(), q); d.Approver != store.ApproverUser {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("A25 can't tell: another currency", func(t *testing.T) {
		q := exchangeQuestion("10.00", exchangeAction)
		q.Operation.Terms = json.RawMessage(`{"price_difference":{"amount":"10.00","currency":"EUR"}}`)
		if d, _ := (&Standing{Rules: []Rule{r}}).Decide(t.Context(), q); d.Approve {
			t.Fatalf("approved without a covering instruction: %+v", d)
		}
	})
	for _, bad := range []string{"exchange<100USD", "exchange<=100", "<=1USD", "exchange<=1.234USD"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) accepted", bad)
		}
	}
}

func TestA07PlainText(t *testing.T) {
	s := "Exchange **it** [here](http://evil.example) ![x](http://evil.example/p.png) <img src=x onerror=alert(1)>\x1b[31mred\x1b[0m\u0007"
	got := PlainText(s)
	for _, want := range []string{"[here](http://evil.example)", "![x](http://evil.example/p.png)", "<img src=x onerror=alert(1)>", "**it**"} {
		if !strings.Contains(got, want) {
			t.Errorf("PlainText dropped %q: %q", want, got)
		}
	}
	if strings.ContainsAny(got, "\x1b\a") {
		t.Errorf("PlainText kept control characters: %q", got)
	}
}

func TestA27A28Checks(t *testing.T) {
	terms := json.RawMessage(`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`)
	r := &Reference{Method: "POST", URL: "http://shop.test/orders/ord_7Hk2/items/itm_4Qa/exchange", Body: []byte("replacement_sku=stormline-insulated-m")}
	if d, _ := checkAction(r, terms); len(d) != 0 {
		t.Errorf("A27: the same action flagged: %v", d)
	}
	r.Body = []byte("replacement_sku=stormline-insulated-l")
	if d, _ := checkAction(r, terms); len(d) != 1 || !strings.Contains(d[0], "stormline-insulated-l") {
		t.Errorf("A27: another size not flagged: %v", d)
	}
	r.URL = "http://shop.test/orders/ord_OTHER/items/itm_4Qa/exchange"
	if d, _ := checkAction(r, terms); len(d) != 2 {
		t.Errorf("A27: another order not flagged: %v", d)
	}
	if d := checkSummary("Exchange it for $70.00 more.", terms); len(d) != 0 {
		t.Errorf("A28: %v", d)
	}
	if d := checkSummary("Exchange it for free.", terms); len(d) != 1 {
		t.Errorf("A28: a summary without the amount not flagged: %v", d)
	}
	dates := json.RawMessage(`{"new_date":"2026-11-07","fee":{"amount":"0.00","currency":"USD"}}`)
	if d := checkSummary("Move it to Saturday, 7 November 2026. No fee ($0.00).", dates); len(d) != 0 {
		t.Errorf("A28: %v", d)
	}
	if d := checkSummary("Move it to Friday, 6 November 2026. No fee ($0.00).", dates); len(d) != 1 {
		t.Errorf("A28: a wrong date not flagged: %v", d)
	}
}

func TestA33A39Approval(t *testing.T) {
	a := &Agent{cfg: Config{Clock: time.Now}, refsUsed: map[string]bool{}}
	op := store.Operation{ID: "op_1", Revision: "r1"}
	ag := a.approval(op, Decision{Approve: true, Approver: store.ApproverAgent, InputType: "tap"})
	us := a.approval(op, Decision{Approve: true, Approver: store.ApproverUser})
	if ag.InputType != "" || us.InputType != "typed" || ag.ApprovedAt.IsZero() || us.ApprovedAt.IsZero() {
		t.Errorf("A35, A39: agent %+v, user %+v", ag, us)
	}
	if ag.Reference == us.Reference || !strings.HasPrefix(ag.Reference, "apr_") {
		t.Errorf("A36: references %q %q", ag.Reference, us.Reference)
	}
	for _, ap := range []store.Approval{ag, us} {
		if err := headers.ValidateApproval(ap); err != nil {
			t.Errorf("A32, A40: %+v: %v", ap, err)
		}
		h, err := headers.FormatApproval(ap)
		if err != nil {
			t.Fatal(err)
		}
		back, err := headers.ParseApproval([]string{h})
		if err != nil || back.Approver != ap.Approver || back.Reference != ap.Reference {
			t.Errorf("A40: %q parses as %+v, %v", h, back, err)
		}
	}
}

// The demo's terms carry three kinds of amount: an exchange's
// price_difference, a cancellation's refund and a date change's fee. A
// rule checks every amount in the terms, whatever its key (A24), and a
// kind alone covers any amount.
func TestA24RulesKnowEveryAmount(t *testing.T) {
	cancelQ := func(refund, currency string) Question {
		terms := `{"subscription_id":"sub_5Kd1","plan":"Trail Box, monthly","effective_date":"2026-10-08","refund":{"amount":"` + refund + `","currency":"` + currency + `"}}`
		return Question{
			Operation:       store.Operation{ID: "op_c", Revision: "r1", Terms: json.RawMessage(terms), ExpiresAt: time.Now().Add(time.Minute)},
			Action:          "POST http://shop.test/account/subscription/cancel",
			AgentMayApprove: true,
		}
	}
	deliveryQ := Question{
		Operation:       store.Operation{ID: "op_d", Revision: "r1", Terms: json.RawMessage(`{"delivery_id":"del_2Wn8","new_date":"2026-11-07","fee":{"amount":"0.00","currency":"USD"}}`), ExpiresAt: time.Now().Add(time.Minute)},
		Action:          "POST http://shop.test/api/deliveries/del_2Wn8",
		AgentMayApprove: true,
	}
	twoAmounts := exchangeQuestion("10.00", exchangeAction)
	twoAmounts.Operation.Terms = json.RawMessage(`{"price_difference":{"amount":"10.00","currency":"USD"},"shipping":{"amount":"150.00","currency":"USD"}}`)
	for _, tc := range []struct {
		name, rule string
		q          Question
		want       bool
	}{
		{"refund within the limit", "cancel<=100USD", cancelQ("12.00", "USD"), true},
		{"refund over the limit", "cancel<=5USD", cancelQ("12.00", "USD"), false},
		{"refund in another currency", "cancel<=100USD", cancelQ("12.00", "EUR"), false},
		{"fee of a date change", "deliveries<=0USD", deliveryQ, true},
		{"every amount counts, not the first", "exchange<=100USD", twoAmounts, false},
		{"a kind alone covers any amount", "cancel", cancelQ("999.00", "USD"), true},
		{"a kind alone covers only its kind", "cancel", exchangeQuestion("1.00", exchangeAction), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseRule(tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			d, err := (&Standing{Rules: []Rule{r}}).Decide(t.Context(), tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if d.Approve != tc.want || (d.Approve && d.Approver != store.ApproverAgent) {
				t.Fatalf("%s: decision %+v, want approve=%v as the agent", tc.rule, d, tc.want)
			}
		})
	}
}

// A28: a zero amount written in words ("at no extra cost", the demo's
// same-price exchange) agrees with the terms; a missing non-zero amount
// does not.
func TestA28ZeroAmountInWords(t *testing.T) {
	zero := json.RawMessage(`{"price_difference":{"amount":"0.00","currency":"USD"}}`)
	if d := checkSummary("Exchange the Stormline Jacket (M) on order ord_7Hk2 for the Stormline Jacket (L), at no extra cost.", zero); len(d) != 0 {
		t.Errorf("a same-price exchange flagged: %v", d)
	}
	if d := checkSummary("Exchange the jacket for a larger one.", zero); len(d) != 1 {
		t.Errorf("a summary silent about the cost not flagged: %v", d)
	}
	if d := checkSummary("Exchange it at no extra cost.", json.RawMessage(`{"price_difference":{"amount":"5.00","currency":"USD"}}`)); len(d) != 1 {
		t.Errorf("no extra cost against 5.00 not flagged: %v", d)
	}
}

// The terms are shown once: Standing prints them when it decides itself,
// and leaves them to Ask (the Prompt) when the user decides.
func TestTermsShownOnce(t *testing.T) {
	var log, prompt strings.Builder
	q := exchangeQuestion("500.00", exchangeAction)
	r, _ := ParseRule("exchange<=100USD")
	s := &Standing{Rules: []Rule{r}, Log: &log, Ask: &Prompt{In: strings.NewReader("n\n"), Out: &prompt}}
	if _, err := s.Decide(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String()+prompt.String(), "Terms (operation"); n != 1 {
		t.Fatalf("the terms were shown %d times:\n%s\n%s", n, log.String(), prompt.String())
	}
	log.Reset()
	if _, err := (&Standing{Rules: []Rule{r}, Log: &log}).Decide(t.Context(), exchangeQuestion("5.00", exchangeAction)); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "Terms (operation"); n != 1 {
		t.Fatalf("an agent approval showed the terms %d times:\n%s", n, log.String())
	}
}

// newOffline is an Agent without a browser, for the parts that only talk
// to the endpoint.
func newOffline(t *testing.T, endpoint string) *Agent {
	t.Helper()
	keys, err := agentside.NewAgentKeys("http://127.0.0.1:1/agent.json", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	return &Agent{
		cfg:      Config{Clock: time.Now, HTTPClient: &http.Client{Timeout: 5 * time.Second}, Log: io.Discard, StepTimeout: 50 * time.Millisecond},
		origin:   "http://shop.test",
		keys:     keys,
		disc:     Discovery{Operations: true, Endpoint: endpoint},
		sessions: map[string]*Session{}, refsUsed: map[string]bool{}, declined: map[string]bool{}, cautious: map[string]string{},
		wake: make(chan struct{}),
	}
}

// A 401 from the endpoint says why it happens while developing: a site
// reloads an agent's keys at most every 30 s.
func TestSessionRefusedSaysWhy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Poppy-Session error="invalid_session"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"invalid_session"}`)
	}))
	defer srv.Close()
	a := newOffline(t, srv.URL)
	_, err := a.Lookup(t.Context(), "op.rev", &Session{SID: "ses_1"})
	if !errors.Is(err, ErrSessionRefused) || !strings.Contains(err.Error(), "30 s") {
		t.Fatalf("err = %v, want ErrSessionRefused naming the 30 s key reload", err)
	}

	// A website that explains its refusals: its words, not the guess.
	why := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"invalid_session","error_description":"session JWT: aud \"http://127.0.0.1:8080\" names the host 127.0.0.1"}`)
	}))
	defer why.Close()
	_, err = newOffline(t, why.URL).Lookup(t.Context(), "op.rev", &Session{SID: "ses_1"})
	if !errors.Is(err, ErrSessionRefused) || !strings.Contains(err.Error(), `names the host 127.0.0.1`) || strings.Contains(err.Error(), "30 s") {
		t.Fatalf("err = %v, want the website's words", err)
	}
}

// Approve waits a bounded time for a reference, and says what to check.
func TestApproveWaitIsBounded(t *testing.T) {
	a := newOffline(t, "http://127.0.0.1:1/")
	start := time.Now()
	_, err := a.Approve(context.Background(), DeciderFunc(func(context.Context, Question) (Decision, error) { return Decision{}, nil }))
	if err == nil || !strings.Contains(err.Error(), "is the action gated") {
		t.Fatalf("err = %v, want a bounded wait that says what to check", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Approve waited %s", d)
	}
}
