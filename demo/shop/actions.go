package shop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/webkit"
)

const dateLayout = "2006-01-02"

// Amount is a sum of money in the terms: {"amount": "70.00", "currency": "USD"}.
type Amount struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
}

func amountOf(m shopdb.Money) Amount { return Amount{Amount: m.Decimal(), Currency: shopdb.Currency} }

// Why a handler running for a joined browser refuses to perform.
var (
	// errNotApproved: the browser is handled as a Session but the Gate took
	// no approval (describe passed the request through as not gated, and it
	// has become valid since). Nothing is performed without an approval.
	errNotApproved = errors.New("no approval was taken for this request")
	// errTermsChanged: the shop's data changed between the Gate taking the
	// approval and the handler running; the approved terms no longer hold.
	errTermsChanged = errors.New("the terms changed since they were approved")
)

// mayPerform decides whether the handler may perform an action with these
// terms now: an ordinary browser may; a browser handled as a Session may
// only with an approval the Gate took, for exactly these terms (§3: perform
// only what the approved revision describes). A browser with the shop's
// own login never reaches it: its handler sends it to the shop's own
// confirmation step first (ownflow.go, §4 W56).
func (s *Server) mayPerform(r *http.Request, terms any) error {
	claim, ok := webkit.ClaimOf(r)
	if !ok {
		if s.handledAsSession(r) {
			return errNotApproved
		}
		return nil
	}
	raw, err := json.Marshal(terms)
	if err != nil {
		return err
	}
	canon, err := storekit.CanonicalTerms(raw)
	if err != nil {
		return err
	}
	if !bytes.Equal(canon, claim.Operation.Terms) {
		return errTermsChanged
	}
	return nil
}

// --- Exchange an item (the spec's jacket example, §3) ---

// ExchangeTerms are the terms of an exchange. CurrentSKU is what the item
// is before the exchange: an item can be exchanged back and forth, and
// "for the L" from the M is another action than from the S (W30), which an
// approval of one must not cover.
type ExchangeTerms struct {
	OrderID         string `json:"order_id"`
	ItemID          string `json:"item_id"`
	CurrentSKU      string `json:"current_sku"`
	ReplacementSKU  string `json:"replacement_sku"`
	PriceDifference Amount `json:"price_difference"`
	// HandlingFee is a fee on top (the bench's new terms, bench.go).
	HandlingFee *Amount `json:"handling_fee,omitempty"`
}

func exchangeTerms(p shopdb.ExchangePlan) ExchangeTerms {
	t := ExchangeTerms{OrderID: p.OrderID, ItemID: p.ItemID, CurrentSKU: p.From.ID, ReplacementSKU: p.To.ID, PriceDifference: amountOf(p.PriceDifference)}
	if p.Fee != 0 {
		fee := amountOf(p.Fee)
		t.HandlingFee = &fee
	}
	return t
}

// exchangeSummary says the terms in plain language, with the amount (W28,
// W31), and no links or HTML (W29).
func exchangeSummary(p shopdb.ExchangePlan) string {
	s := fmt.Sprintf("Exchange the %s on order %s for the %s", p.From.Name, p.OrderID, p.To.Name)
	switch d := p.PriceDifference; {
	case d > 0:
		s += fmt.Sprintf(", for %s more, charged to the card used for the order.", d)
	case d < 0:
		s += fmt.Sprintf(", for %s less, refunded to the card used for the order.", -d)
	default:
		// The amount in words and in figures: the terms carry "0.00", and
		// the summary says everything the terms do (W31).
		s += fmt.Sprintf(", at no extra cost (%s).", d)
	}
	if p.Fee != 0 {
		s += fmt.Sprintf(" A handling fee of %s is charged to the same card.", p.Fee)
	}
	return s
}

func (s *Server) planExchange(r *http.Request) (shopdb.ExchangePlan, error) {
	var sku string
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
		// The JSON API's request (PathAPIExchange, and the MCP tool's):
		// {"replacement_sku": "…"}.
		var req struct {
			ReplacementSKU string `json:"replacement_sku"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
		if err != nil || len(body) > maxJSONBody || json.Unmarshal(body, &req) != nil {
			return shopdb.ExchangePlan{}, fmt.Errorf(`the body must be a JSON object such as {"replacement_sku": "stormline-insulated-m"}: %w`, shopdb.ErrInvalid)
		}
		sku = req.ReplacementSKU
		if sku == "" {
			return shopdb.ExchangePlan{}, fmt.Errorf("choose one replacement: %w", shopdb.ErrInvalid)
		}
	} else {
		if err := r.ParseForm(); err != nil {
			return shopdb.ExchangePlan{}, fmt.Errorf("the form could not be read: %w", shopdb.ErrInvalid)
		}
		sku = r.PostForm.Get("replacement_sku")
		if sku == "" || len(r.PostForm["replacement_sku"]) != 1 {
			return shopdb.ExchangePlan{}, fmt.Errorf("choose one replacement: %w", shopdb.ErrInvalid)
		}
	}
	db := s.dbOf(r)
	plan, err := db.PlanExchange(s.viewerOf(r).Account, r.PathValue("order"), r.PathValue("item"), sku)
	if err != nil {
		return plan, err
	}
	return s.bench.plan(r, db, s.viewerOf(r).Account, plan), nil // the bench's terms, in its scenarios
}

func (s *Server) describeExchange(r *http.Request) (webkit.Action, error) {
	plan, err := s.planExchange(r)
	if err != nil {
		return webkit.Action{}, webkit.ErrNotGated // the handler refuses it; nothing to approve
	}
	return webkit.Action{
		Key:      s.bench.key(r, "exchange:"+plan.OrderID+":"+plan.ItemID),
		Terms:    exchangeTerms(plan),
		Summary:  s.bench.summary(r, plan, exchangeSummary(plan)),
		Kind:     "exchange", // the metrics' label: never an ID
		Lifetime: s.bench.lifetime(r),
	}, nil
}

func (s *Server) exchange(w http.ResponseWriter, r *http.Request) {
	plan, err := s.planExchange(r)
	if err == nil && s.ownLogin(r) != "" { // §4 W56: the shop's own flow
		s.askConfirm(w, r, url.Values{"action": {"exchange"}, "order": {plan.OrderID}, "item": {plan.ItemID}, "replacement_sku": {plan.To.ID}}, false)
		return
	}
	if err == nil && s.anonymous(r) {
		s.message(w, r, http.StatusForbidden, "Sign in to exchange",
			"Only the account holder can exchange an item. Sign in first (the password is printed where the demo was started), or let your personal agent do it in its own copy of the demo data. Nothing was changed.",
			views.SignInButton("/orders/"+plan.OrderID))
		return
	}
	if err == nil {
		err = s.mayPerform(r, exchangeTerms(plan))
	}
	if err == nil {
		s.bench.performing(r) // the bench's slow performance, in its scenario
		_, err = s.dbOf(r).Exchange(s.viewerOf(r).Account, plan, s.now())
	}
	if err != nil {
		s.renderOrder(w, r, statusOf(err), "The exchange was not made. "+sentence(err))
		return
	}
	http.Redirect(w, r, "/orders/"+plan.OrderID+"?exchanged="+plan.ItemID+"#item-"+plan.ItemID, http.StatusSeeOther)
}

// exchangeResult is the JSON API's answer of a performed exchange.
type exchangeResult struct {
	OrderID        string `json:"order_id"`
	ItemID         string `json:"item_id"`
	ReplacementSKU string `json:"replacement_sku"`
	Status         string `json:"status"`
}

// apiExchange is the exchange on the shop's JSON API (PathAPIExchange),
// behind the same Gate and describe as the page's form: an agent calls it
// with its Session on the request (§4, §6 "APIs"), a page script with its
// joined browser's.
func (s *Server) apiExchange(w http.ResponseWriter, r *http.Request) {
	plan, err := s.planExchange(r)
	if err == nil && s.anonymous(r) {
		writeJSON(w, http.StatusForbidden, apiError{Error: "sign_in_required", Message: "Sign in to exchange an item, or let your personal agent do it in its own copy of the demo data. Nothing was changed."})
		return
	}
	if err == nil && s.ownLogin(r) != "" {
		writeJSON(w, http.StatusForbidden, apiError{Error: "forbidden", Message: "Exchange the item on its order page, where the shop asks for your confirmation. Nothing was changed."})
		return
	}
	if err == nil {
		err = s.mayPerform(r, exchangeTerms(plan))
	}
	if err == nil {
		s.bench.performing(r)
		_, err = s.dbOf(r).Exchange(s.viewerOf(r).Account, plan, s.now())
	}
	if err != nil {
		status := statusOf(err)
		code := map[int]string{http.StatusBadRequest: "invalid_request", http.StatusNotFound: "not_found", http.StatusConflict: "conflict", http.StatusForbidden: "forbidden"}[status]
		writeJSON(w, status, apiError{Error: code, Message: sentence(err)})
		return
	}
	writeJSON(w, http.StatusCreated, exchangeResult{OrderID: plan.OrderID, ItemID: plan.ItemID, ReplacementSKU: plan.To.ID, Status: "exchanged"})
}

// --- Cancel the subscription (an account's operation, §3) ---

// CancelTerms are the terms of a cancellation.
type CancelTerms struct {
	SubscriptionID string `json:"subscription_id"`
	Plan           string `json:"plan"`
	EffectiveDate  string `json:"effective_date"`
	Refund         Amount `json:"refund"`
}

func cancelTerms(p shopdb.CancelPlan) CancelTerms {
	return CancelTerms{SubscriptionID: p.SubscriptionID, Plan: p.Plan, EffectiveDate: p.EffectiveDate.Format(dateLayout), Refund: amountOf(p.Refund)}
}

func cancelSummary(p shopdb.CancelPlan) string {
	return fmt.Sprintf("Cancel the %s subscription (%s), effective %s. %s is refunded to the card on file for the unused days of this month, and there are no further monthly charges.",
		p.Plan, p.SubscriptionID, p.EffectiveDate.Format("Monday, 2 January 2006"), p.Refund)
}

// errSignInRequired: only the account holder cancels the subscription.
var errSignInRequired = errors.New("sign in to cancel the subscription")

func (s *Server) planCancel(r *http.Request) (shopdb.CancelPlan, error) {
	v := s.viewerOf(r)
	if !v.SignedIn {
		return shopdb.CancelPlan{}, errSignInRequired
	}
	return s.dbOf(r).PlanCancel(v.Account, s.now())
}

func (s *Server) describeCancel(r *http.Request) (webkit.Action, error) {
	plan, err := s.planCancel(r)
	if err != nil {
		return webkit.Action{}, webkit.ErrNotGated // signed out or nothing to cancel: the handler says so
	}
	return webkit.Action{
		Key:     "cancel-subscription:" + plan.SubscriptionID,
		Terms:   cancelTerms(plan),
		Summary: cancelSummary(plan),
		Kind:    "cancel_subscription", // the metrics' label: never an ID
	}, nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	plan, err := s.planCancel(r)
	if errors.Is(err, errSignInRequired) {
		s.message(w, r, http.StatusForbidden, "Sign in to cancel",
			"Only the account holder can cancel the subscription. Sign in first, then cancel it on the subscription page.",
			views.SignInButton("/account/subscription"))
		return
	}
	if err == nil && s.ownLogin(r) != "" { // §4 W56: the shop's own flow
		s.askConfirm(w, r, url.Values{"action": {"cancel"}}, false)
		return
	}
	if err == nil {
		err = s.mayPerform(r, cancelTerms(plan))
	}
	if err == nil {
		_, err = s.dbOf(r).CancelSubscription(s.viewerOf(r).Account, plan, s.now())
	}
	if err != nil {
		s.renderSubscription(w, r, statusOf(err), "The subscription was not cancelled. "+sentence(err))
		return
	}
	http.Redirect(w, r, "/account/subscription?cancelled=1", http.StatusSeeOther)
}

// --- Resubscribe (an account's operation, like the cancellation) ---

// ResubscribeTerms are the terms of a resubscription: a new paid month of
// the plan from StartDate, Price charged today and on RenewsOn.
type ResubscribeTerms struct {
	SubscriptionID string `json:"subscription_id"`
	Plan           string `json:"plan"`
	StartDate      string `json:"start_date"`
	RenewsOn       string `json:"renews_on"`
	Price          Amount `json:"price"`
}

func resubscribeTerms(p shopdb.ResubscribePlan) ResubscribeTerms {
	return ResubscribeTerms{SubscriptionID: p.SubscriptionID, Plan: p.Plan, StartDate: p.StartDate.Format(dateLayout), RenewsOn: p.RenewsOn.Format(dateLayout), Price: amountOf(p.Price)}
}

func resubscribeSummary(p shopdb.ResubscribePlan) string {
	const long = "Monday, 2 January 2006"
	return fmt.Sprintf("Resubscribe to the %s subscription (%s) from %s. %s is charged to the card on file today, and again every month from %s.",
		p.Plan, p.SubscriptionID, p.StartDate.Format(long), p.Price, p.RenewsOn.Format(long))
}

func (s *Server) planResubscribe(r *http.Request) (shopdb.ResubscribePlan, error) {
	v := s.viewerOf(r)
	if !v.SignedIn {
		return shopdb.ResubscribePlan{}, errSignInRequired
	}
	return s.dbOf(r).PlanResubscribe(v.Account, s.now())
}

func (s *Server) describeResubscribe(r *http.Request) (webkit.Action, error) {
	plan, err := s.planResubscribe(r)
	if err != nil {
		return webkit.Action{}, webkit.ErrNotGated // signed out or already active: the handler says so
	}
	return webkit.Action{
		Key:     "resubscribe:" + plan.SubscriptionID,
		Terms:   resubscribeTerms(plan),
		Summary: resubscribeSummary(plan),
		Kind:    "resubscribe", // the metrics' label: never an ID
	}, nil
}

func (s *Server) resubscribe(w http.ResponseWriter, r *http.Request) {
	plan, err := s.planResubscribe(r)
	if errors.Is(err, errSignInRequired) {
		s.message(w, r, http.StatusForbidden, "Sign in to resubscribe",
			"Only the account holder can resubscribe. Sign in first, then resubscribe on the subscription page.",
			views.SignInButton("/account/subscription"))
		return
	}
	if err == nil && s.ownLogin(r) != "" { // §4 W56: the shop's own flow
		s.askConfirm(w, r, url.Values{"action": {"resubscribe"}}, false)
		return
	}
	if err == nil {
		err = s.mayPerform(r, resubscribeTerms(plan))
	}
	if err == nil {
		_, err = s.dbOf(r).Resubscribe(s.viewerOf(r).Account, plan, s.now())
	}
	if err != nil {
		s.renderSubscription(w, r, statusOf(err), "The subscription was not renewed. "+sentence(err))
		return
	}
	http.Redirect(w, r, "/account/subscription?resubscribed=1", http.StatusSeeOther)
}

// --- Change a delivery date (a fetch-driven page, JSON) ---

// RescheduleTerms are the terms of a delivery date change.
type RescheduleTerms struct {
	DeliveryID  string `json:"delivery_id"`
	OrderID     string `json:"order_id"`
	CurrentDate string `json:"current_date"`
	NewDate     string `json:"new_date"`
	Fee         Amount `json:"fee"`
}

func rescheduleTerms(p shopdb.ReschedulePlan) RescheduleTerms {
	return RescheduleTerms{DeliveryID: p.DeliveryID, OrderID: p.OrderID, CurrentDate: p.From.Format(dateLayout), NewDate: p.To.Format(dateLayout), Fee: amountOf(0)}
}

func rescheduleSummary(p shopdb.ReschedulePlan) string {
	const long = "Monday, 2 January 2006"
	return fmt.Sprintf("Move delivery %s of order %s from %s to %s. There is no fee ($0.00).",
		p.DeliveryID, p.OrderID, p.From.Format(long), p.To.Format(long))
}

// maxJSONBody bounds the delivery request's body: {"date": "YYYY-MM-DD"}.
const maxJSONBody = 4 << 10

// rescheduleRequest is the JSON body of POST /api/deliveries/{id}.
type rescheduleRequest struct {
	Date string `json:"date"`
}

// errBadRequest marks a request body the shop can't read.
var errBadRequest = errors.New("bad request")

func (s *Server) planReschedule(r *http.Request) (shopdb.ReschedulePlan, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return shopdb.ReschedulePlan{}, fmt.Errorf("%w: send a JSON body with Content-Type: application/json", errBadRequest)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
	if err != nil || len(body) > maxJSONBody {
		return shopdb.ReschedulePlan{}, fmt.Errorf("%w: the body could not be read or is too long", errBadRequest)
	}
	var req rescheduleRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil || dec.More() {
		return shopdb.ReschedulePlan{}, fmt.Errorf(`%w: the body must be a JSON object such as {"date": "2026-11-07"}`, errBadRequest)
	}
	if req.Date == "" {
		return shopdb.ReschedulePlan{}, fmt.Errorf("%w: date is missing", errBadRequest)
	}
	day, err := time.Parse(dateLayout, req.Date)
	if err != nil {
		return shopdb.ReschedulePlan{}, fmt.Errorf("%w: date must be a day written YYYY-MM-DD, such as 2026-11-07", errBadRequest)
	}
	return s.dbOf(r).PlanReschedule(s.viewerOf(r).Account, r.PathValue("id"), day, s.now())
}

func (s *Server) describeReschedule(r *http.Request) (webkit.Action, error) {
	plan, err := s.planReschedule(r)
	if err != nil {
		return webkit.Action{}, webkit.ErrNotGated // the handler answers 400 or 404
	}
	return webkit.Action{
		Key:     "delivery-date:" + plan.DeliveryID,
		Terms:   rescheduleTerms(plan),
		Summary: rescheduleSummary(plan),
		Kind:    "delivery_date", // the metrics' label: never an ID
	}, nil
}

// rescheduleResult is the JSON answer of a performed date change.
type rescheduleResult struct {
	DeliveryID string `json:"delivery_id"`
	Date       string `json:"date"`
	DateText   string `json:"date_text"`
}

// apiError is the JSON answer of a refused request.
type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func (s *Server) reschedule(w http.ResponseWriter, r *http.Request) {
	plan, err := s.planReschedule(r)
	if err == nil && s.ownLogin(r) != "" { // §4 W56: the shop's own flow
		s.askConfirm(w, r, url.Values{"action": {"reschedule"}, "delivery": {plan.DeliveryID}, "date": {plan.To.Format(dateLayout)}}, true)
		return
	}
	if err == nil && s.anonymous(r) {
		writeJSON(w, http.StatusForbidden, apiError{Error: "sign_in_required", Message: "Sign in to change the delivery date, or let your personal agent do it in its own copy of the demo data. Nothing was changed."})
		return
	}
	if err == nil {
		err = s.mayPerform(r, rescheduleTerms(plan))
	}
	var d shopdb.Delivery
	if err == nil {
		d, err = s.dbOf(r).Reschedule(s.viewerOf(r).Account, plan, s.now())
	}
	if err != nil {
		status := statusOf(err)
		code := map[int]string{http.StatusBadRequest: "invalid_request", http.StatusNotFound: "not_found", http.StatusConflict: "conflict", http.StatusForbidden: "forbidden"}[status]
		writeJSON(w, status, apiError{Error: code, Message: sentence(err)})
		return
	}
	writeJSON(w, http.StatusOK, rescheduleResult{DeliveryID: d.ID, Date: d.Date.Format(dateLayout), DateText: d.Date.Format("Monday, 2 January 2006")})
}

// anonymous reports whether r comes from a browser joined to no agent's
// Session and without the shop's own login: a visitor of the shared copy
// of the demo data, who may look but not change it, so that nothing
// (such as `agent check`, whose unjoined browser repeats a gated action,
// W07) changes the data other visitors see (issue 37). A person signs in
// and confirms each action (ownflow.go); an agent acts in its own copy.
func (s *Server) anonymous(r *http.Request) bool {
	if _, joined := s.sessionOf(r); joined {
		return false
	}
	return s.ownLogin(r) == ""
}

// statusOf maps a refusal to its HTTP status: 4xx, so the Gate records the
// action as not performed (the approval stays used up, §7 W98).
func statusOf(err error) int {
	switch {
	case errors.Is(err, shopdb.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, shopdb.ErrConflict), errors.Is(err, errTermsChanged):
		return http.StatusConflict
	case errors.Is(err, errNotApproved), errors.Is(err, errSignInRequired):
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// sentence is err's text for a person: the wrapped sentinels' words dropped.
func sentence(err error) string {
	msg := err.Error()
	for _, sentinel := range []error{shopdb.ErrInvalid, errBadRequest, shopdb.ErrNotFound, shopdb.ErrConflict} {
		if errors.Is(err, sentinel) {
			msg = trimSentinel(msg, sentinel.Error())
		}
	}
	if msg == "" {
		return "The request could not be handled."
	}
	return upperFirst(msg) + "."
}

func trimSentinel(msg, s string) string {
	for _, form := range []string{": " + s, s + ": "} {
		if i := bytes.Index([]byte(msg), []byte(form)); i >= 0 {
			return msg[:i] + msg[i+len(form):]
		}
	}
	return msg
}

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
