package shop

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
)

// The shop's own approval flow (§4 W56).
//
// The Gate hands a joined browser that has a login of the shop's own to
// the shop's own flow: it performs no operation and asks no agent. That
// pass-through is only as strong as the shop's own flow, so the flow must
// be one a page script can't complete alone:
//
//   - The own login is a password someone typed (POST /signin checks it),
//     not a button a script can press.
//   - A gated action on an own login is never performed by the action's
//     route: the route sends the browser to a confirmation page (GET
//     /confirm) that says what will be done and carries a single-use
//     token, sealed, bound to the login's account, the browser's sandbox,
//     the action and its exact terms, valid 10 minutes.
//   - POST /confirm performs it only with that token, unused (the Store's
//     UseOnce, shared by every instance), the password again, and terms
//     that still match the ones shown.

// confirmLifetime is how long a confirmation page's token is valid.
const confirmLifetime = 10 * time.Minute

// confirmSealName is the securecookie name the confirmation token is
// sealed under (another name than the login cookie's, so neither decodes
// as the other).
const confirmSealName = "ridgeline_confirm"

// confirmToken is what the confirmation page's token carries, sealed.
type confirmToken struct {
	ID      string     `json:"id"`      // random, used once
	Account string     `json:"account"` // the own login's account
	Sandbox string     `json:"sandbox"` // whose data
	Params  url.Values `json:"params"`  // the action and its parameters
	Terms   []byte     `json:"terms"`   // canonical terms, as shown
	Exp     int64      `json:"exp"`     // unix seconds
}

// ownPlan is a gated action planned for the own flow.
type ownPlan struct {
	heading string
	terms   any
	summary string
	back    string // where "Don't do it" goes
	perform func() (done string, err error)
}

// errConfirmInvalid: the confirmation token is not this browser's, has
// expired or was changed.
var errConfirmInvalid = errors.New("this confirmation is not valid any more: start again from the shop's page")

// planOwn plans the action that q names for the own login acct, on r's
// sandbox. q holds "action" and the action's parameters.
func (s *Server) planOwn(r *http.Request, acct string, q url.Values) (ownPlan, error) {
	db, now := s.dbOf(r), s.now()
	switch q.Get("action") {
	case "exchange":
		p, err := db.PlanExchange(acct, q.Get("order"), q.Get("item"), q.Get("replacement_sku"))
		if err != nil {
			return ownPlan{}, err
		}
		return ownPlan{
			heading: "Confirm the exchange", terms: exchangeTerms(p), summary: exchangeSummary(p), back: "/orders/" + p.OrderID,
			perform: func() (string, error) {
				_, err := db.Exchange(acct, p, now)
				return "/orders/" + p.OrderID + "?exchanged=" + p.ItemID + "#item-" + p.ItemID, err
			},
		}, nil
	case "cancel":
		p, err := db.PlanCancel(acct, now)
		if err != nil {
			return ownPlan{}, err
		}
		return ownPlan{
			heading: "Confirm the cancellation", terms: cancelTerms(p), summary: cancelSummary(p), back: "/account/subscription",
			perform: func() (string, error) {
				_, err := db.CancelSubscription(acct, p, now)
				return "/account/subscription?cancelled=1", err
			},
		}, nil
	case "resubscribe":
		p, err := db.PlanResubscribe(acct, now)
		if err != nil {
			return ownPlan{}, err
		}
		return ownPlan{
			heading: "Confirm the subscription", terms: resubscribeTerms(p), summary: resubscribeSummary(p), back: "/account/subscription",
			perform: func() (string, error) {
				_, err := db.Resubscribe(acct, p, now)
				return "/account/subscription?resubscribed=1", err
			},
		}, nil
	case "reschedule":
		day, err := time.Parse(dateLayout, q.Get("date"))
		if err != nil {
			return ownPlan{}, fmt.Errorf("date must be a day written YYYY-MM-DD: %w", shopdb.ErrInvalid)
		}
		p, err := db.PlanReschedule(acct, q.Get("delivery"), day, now)
		if err != nil {
			return ownPlan{}, err
		}
		return ownPlan{
			heading: "Confirm the new delivery date", terms: rescheduleTerms(p), summary: rescheduleSummary(p), back: "/deliveries",
			perform: func() (string, error) {
				_, err := db.Reschedule(acct, p, now)
				return "/deliveries", err
			},
		}, nil
	}
	return ownPlan{}, fmt.Errorf("that action can't be confirmed here: %w", shopdb.ErrInvalid)
}

// confirmURL is the confirmation page of the action q names.
func confirmURL(q url.Values) string { return "/confirm?" + q.Encode() }

// askConfirm answers a gated action's request from a browser with the
// shop's own login: nothing is performed; the browser is sent to the
// confirmation page (a form's 303), or told where it is (a fetch's JSON
// 403, confirmation_required).
func (s *Server) askConfirm(w http.ResponseWriter, r *http.Request, q url.Values, asJSON bool) {
	if asJSON {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusForbidden, map[string]string{
			"error":       "confirmation_required",
			"message":     "Confirm this on the shop's confirmation page, with your password.",
			"confirm_url": confirmURL(q),
		})
		return
	}
	http.Redirect(w, r, confirmURL(q), http.StatusSeeOther)
}

// confirmPage (GET /confirm) shows what the action q names will do, and
// the form that confirms it with a fresh single-use token.
func (s *Server) confirmPage(w http.ResponseWriter, r *http.Request) {
	acct := s.ownLogin(r)
	if acct == "" {
		s.message(w, r, http.StatusForbidden, "Sign in to confirm",
			"Only the account holder confirms an action here. Sign in first.",
			views.SignInButton(r.URL.RequestURI()))
		return
	}
	q := r.URL.Query()
	plan, err := s.planOwn(r, acct, q)
	if err != nil {
		s.message(w, r, statusOf(err), "Nothing to confirm", sentence(err), views.BackLink("/account", "Back to your account"))
		return
	}
	s.renderConfirm(w, r, http.StatusOK, acct, q, plan, "")
}

func (s *Server) renderConfirm(w http.ResponseWriter, r *http.Request, status int, acct string, q url.Values, plan ownPlan, errText string) {
	terms, err := canonicalTerms(plan.terms)
	if err != nil {
		s.cfg.Logger.Error("demo shop: confirmation terms", "err", err)
		http.Error(w, "the confirmation could not be prepared", http.StatusInternalServerError)
		return
	}
	tok := confirmToken{
		ID: rand.Text(), Account: acct, Sandbox: s.sandboxKey(r), Params: actionParams(q),
		Terms: terms, Exp: s.now().Add(confirmLifetime).Unix(),
	}
	sealed, err := s.login.Encode(confirmSealName, tok)
	if err != nil {
		s.cfg.Logger.Error("demo shop: confirmation token", "err", err)
		http.Error(w, "the confirmation could not be prepared", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Cache-Control", "no-store") // the page holds a token
	v := s.viewerOf(r)
	render(w, r, status, views.ConfirmPage(s.chrome(r, v, plan.heading, "account"), views.ConfirmView{
		Heading: plan.heading, Summary: plan.summary, Token: sealed, Back: plan.back, Error: errText,
	}))
}

// confirm (POST /confirm) performs the action of a confirmation token:
// the browser's own login, the password again, the token unused and the
// terms unchanged since they were shown.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	acct := s.ownLogin(r)
	if acct == "" {
		s.message(w, r, http.StatusForbidden, "Sign in to confirm",
			"Only the account holder confirms an action here. Sign in first.", views.SignInButton("/account"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	var tok confirmToken
	if err := s.login.Decode(confirmSealName, r.PostFormValue("token"), &tok); err != nil ||
		tok.ID == "" || tok.Account != acct || tok.Sandbox != s.sandboxKey(r) || !s.now().Before(time.Unix(tok.Exp, 0)) {
		s.message(w, r, http.StatusForbidden, "Not done", upperFirst(errConfirmInvalid.Error())+".", views.BackLink("/account", "Back to your account"))
		return
	}
	plan, err := s.planOwn(r, acct, tok.Params)
	if err == nil {
		var terms []byte
		if terms, err = canonicalTerms(plan.terms); err == nil && !bytes.Equal(terms, tok.Terms) {
			err = errTermsChanged
		}
	}
	if err != nil {
		s.message(w, r, statusOf(err), "Not done", sentence(err), views.BackLink("/account", "Back to your account"))
		return
	}
	if s.slowed(w, r, s.passwordTries, "passwords") {
		return
	}
	if !s.customerPassword(r.PostFormValue("password")) {
		s.passwordTries.failed(s.sourceOf(r))
		// The token is not used up: the person may type it again.
		s.renderConfirm(w, r, http.StatusUnauthorized, acct, tok.Params, plan, "That password is not right. Nothing was done.")
		return
	}
	s.passwordTries.succeeded(s.sourceOf(r))
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	first, err := storedriver.Steps(s.kit.Store).UseOnce(ctx, "demo-confirm:"+tok.ID, time.Unix(tok.Exp, 0), s.now())
	cancel()
	if err != nil {
		w.Header().Set("Retry-After", "2")
		s.message(w, r, http.StatusServiceUnavailable, "Not done", "The shop could not check the confirmation; nothing was done. Try again.", views.BackLink(plan.back, "Back"))
		return
	}
	if !first {
		s.message(w, r, http.StatusConflict, "Already confirmed", "This confirmation was used already; nothing more was done.", views.BackLink(plan.back, "Back"))
		return
	}
	done, err := plan.perform()
	if err != nil {
		s.message(w, r, statusOf(err), "Not done", sentence(err), views.BackLink(plan.back, "Back"))
		return
	}
	s.cfg.Logger.Info("demo shop: own login confirmed an action", "action", tok.Params.Get("action"))
	http.Redirect(w, r, done, http.StatusSeeOther)
}

// actionParams keeps only the parameters an action reads.
func actionParams(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range []string{"action", "order", "item", "replacement_sku", "delivery", "date"} {
		if v := q.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

func canonicalTerms(terms any) ([]byte, error) {
	raw, err := json.Marshal(terms)
	if err != nil {
		return nil, err
	}
	return storekit.CanonicalTerms(raw)
}

// customerPassword reports whether pw is the demo customer's password, in
// constant time.
func (s *Server) customerPassword(pw string) bool {
	return secretEqual(pw, s.cfg.CustomerPassword)
}

// secretEqual compares two secrets in constant time (of their digests, so
// the length leaks nothing either).
func secretEqual(got, want string) bool {
	if want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// signInPage (GET /signin) asks for the password.
func (s *Server) signInPage(w http.ResponseWriter, r *http.Request) {
	v := s.viewerOf(r)
	ret := localPath(r.URL.Query().Get("return"), "/account")
	render(w, r, http.StatusOK, views.SignInPage(s.chrome(r, v, "Sign in", "account"), views.SignInView{Return: ret}))
}
