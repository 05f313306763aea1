package shop

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/a-h/templ"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/webkit"
)

// loginCookie is the shop's own login (not the kit's join cookie).
const loginCookie = "ridgeline_login"

// viewer is who is looking at a page.
type viewer struct {
	// Account is whose orders and deliveries the pages show: the signed-in
	// account, or the demo account for everyone else (a demo shortcut, so
	// that an exchange works signed out; the account page says so).
	Account string
	// SignedIn is true with the shop's own login or a signed-in join.
	SignedIn bool
	// Login is "shop", "agent" or "".
	Login string
	// Session is the Poppy Session the browser is joined to, if any.
	Session webkit.Session
	Joined  bool
}

func (s *Server) viewerOf(r *http.Request) viewer {
	v := viewer{Account: shopdb.DemoAccount}
	v.Session, v.Joined = s.sessionOf(r)
	if acct := s.ownLogin(r); acct != "" {
		v.Account, v.SignedIn, v.Login = acct, true, "shop"
	} else if v.Joined && v.Session.Account != "" {
		v.Account, v.SignedIn, v.Login = v.Session.Account, true, "agent"
	}
	return v
}

// handledAsSession reports whether the Gate handles r as its browser's
// Session (§4 W54–W56): joined, and no login of the shop's own. Such a
// request performs an action only with a taken approval.
func (s *Server) handledAsSession(r *http.Request) bool {
	if _, joined := s.sessionOf(r); !joined {
		return false
	}
	return s.ownLogin(r) == ""
}

// ownLogin returns the account of the shop's own login cookie, or "".
func (s *Server) ownLogin(r *http.Request) string {
	c, err := r.Cookie(loginCookie)
	if err != nil {
		return ""
	}
	var acct string
	if err := s.login.Decode(loginCookie, c.Value, &acct); err != nil {
		return ""
	}
	if _, ok := s.dbOf(r).Account(acct); !ok {
		return ""
	}
	return acct
}

func (s *Server) chrome(r *http.Request, v viewer, title, active string) views.Chrome {
	c := views.Chrome{Title: title, Active: active, Login: v.Login, Path: r.URL.Path}
	if v.SignedIn {
		if a, ok := s.dbOf(r).Account(v.Account); ok {
			c.Customer = a.Name
		}
	}
	if v.Joined {
		c.Session = v.Session.ID
	}
	return c
}

func render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := c.Render(context.WithoutCancel(r.Context()), w); err != nil {
		// The status is written; nothing more to tell the browser.
		return
	}
}

func (s *Server) message(w http.ResponseWriter, r *http.Request, status int, heading, text string, action templ.Component) {
	v := s.viewerOf(r)
	render(w, r, status, views.Message(s.chrome(r, v, heading, ""), heading, text, action))
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request, what string) {
	s.message(w, r, http.StatusNotFound, "Not found", "We couldn't find "+what+".", views.BackLink("/", "Back to the shop"))
}

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	v := s.viewerOf(r)
	render(w, r, http.StatusOK, views.Home(s.chrome(r, v, "Shop", "shop"), s.dbOf(r).Products()))
}

func (s *Server) product(w http.ResponseWriter, r *http.Request) {
	p, ok := s.dbOf(r).Product(r.PathValue("slug"))
	if !ok {
		s.notFound(w, r, "that product")
		return
	}
	v := s.viewerOf(r)
	render(w, r, http.StatusOK, views.ProductPage(s.chrome(r, v, p.Name, "shop"), p))
}

func (s *Server) account(w http.ResponseWriter, r *http.Request) {
	v := s.viewerOf(r)
	acct, _ := s.dbOf(r).Account(v.Account)
	av := views.AccountView{Account: acct, Orders: s.dbOf(r).Orders(v.Account), SignedIn: v.SignedIn, Agent: v.Joined, Reset: r.URL.Query().Has("reset")}
	av.Decisions = s.agentDecisions(r, v)
	if sub, ok := s.dbOf(r).Subscription(v.Account); ok {
		av.Subscription = &sub
	}
	render(w, r, http.StatusOK, views.AccountPage(s.chrome(r, v, "Your account", "account"), av))
}

func (s *Server) order(w http.ResponseWriter, r *http.Request) {
	s.renderOrder(w, r, http.StatusOK, "")
}

func (s *Server) renderOrder(w http.ResponseWriter, r *http.Request, status int, errText string) {
	v := s.viewerOf(r)
	o, ok := s.dbOf(r).Order(v.Account, r.PathValue("order"))
	if !ok {
		s.notFound(w, r, "that order")
		return
	}
	ov := views.OrderView{Order: o, Options: map[string][]shopdb.SKU{}, Exchanged: r.URL.Query().Get("exchanged"), Error: errText}
	for _, it := range o.Items {
		ov.Options[it.ID] = s.dbOf(r).ExchangeOptions(it.SKU)
	}
	render(w, r, status, views.OrderPage(s.chrome(r, v, "Order "+o.ID, "account"), ov))
}

func (s *Server) subscription(w http.ResponseWriter, r *http.Request) {
	s.renderSubscription(w, r, http.StatusOK, "")
}

func (s *Server) renderSubscription(w http.ResponseWriter, r *http.Request, status int, errText string) {
	v := s.viewerOf(r)
	sub, ok := s.dbOf(r).Subscription(v.Account)
	if !ok {
		s.notFound(w, r, "a subscription on this account")
		return
	}
	sv := views.SubscriptionView{Subscription: sub, SignedIn: v.SignedIn, Cancelled: r.URL.Query().Has("cancelled") && sub.Status == shopdb.SubscriptionCancelled, Error: errText}
	if plan, err := s.dbOf(r).PlanCancel(v.Account, s.now()); err == nil {
		sv.Plan = &plan
	}
	if plan, err := s.dbOf(r).PlanResubscribe(v.Account, s.now()); err == nil {
		sv.Resubscribe = &plan
	}
	sv.Resubscribed = r.URL.Query().Has("resubscribed") && sub.Status == shopdb.SubscriptionActive
	render(w, r, status, views.SubscriptionPage(s.chrome(r, v, "Subscription", "account"), sv))
}

func (s *Server) deliveries(w http.ResponseWriter, r *http.Request) {
	v := s.viewerOf(r)
	today := shopdb.Day(s.now())
	dv := views.DeliveriesView{
		Deliveries: s.dbOf(r).Deliveries(v.Account),
		Earliest:   today.AddDate(0, 0, shopdb.EarliestDays).Format(dateLayout),
		Latest:     today.AddDate(0, 0, shopdb.LatestDays).Format(dateLayout),
	}
	c := s.chrome(r, v, "Deliveries", "deliveries")
	// The kit's fetch helper first, then the page's own script, which uses it.
	c.Scripts = []string{"/_opsgate/fetch.js", "/static/deliveries.js"}
	render(w, r, http.StatusOK, views.DeliveriesPage(c, dv))
}

// signIn is the shop's own login, for people: the demo customer's
// password (Config.CustomerPassword), so that a page script can't sign a
// joined browser in and leave the agent out (§4 W56; ownflow.go).
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	ret := localPath(r.PostFormValue("return"), "/account")
	if s.slowed(w, r, s.passwordTries, "passwords") {
		return
	}
	if !s.customerPassword(r.PostFormValue("password")) {
		s.passwordTries.failed(s.sourceOf(r))
		v := s.viewerOf(r)
		render(w, r, http.StatusUnauthorized, views.SignInPage(s.chrome(r, v, "Sign in", "account"), views.SignInView{Return: ret, Error: "That password is not right."}))
		return
	}
	s.passwordTries.succeeded(s.sourceOf(r))
	value, err := s.login.Encode(loginCookie, shopdb.DemoAccount)
	if err != nil {
		http.Error(w, "sign-in failed", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: value, Path: "/", HttpOnly: true,
		Secure: s.secure, SameSite: http.SameSiteLaxMode, MaxAge: 12 * 60 * 60,
	})
	http.Redirect(w, r, ret, http.StatusSeeOther)
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// leave (POST /leave, the agent bar's "Leave") ends the browser's join:
// Sessions.Unbind expires the join cookie and its binding marker, so the
// browser is an ordinary one again and can be joined anew. The shop's own
// login, if any, stays. Unbind also leaves a marker in the kit's store, so
// a copy of the old cookie replayed by hand is no binding either.
func (s *Server) leave(w http.ResponseWriter, r *http.Request) {
	if sess, joined := s.sessionOf(r); joined {
		if err := s.kit.Sessions.Unbind(w, r); err != nil {
			s.cfg.Logger.Error("demo shop: leave failed", "err", err)
			http.Error(w, "the browser could not leave its Session", http.StatusInternalServerError)
			return
		}
		s.cfg.Logger.Info("demo shop: a browser left its Session", "sid", sess.ID)
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// localPath returns p when it is a path on this site, else def: never an
// open redirect.
func localPath(p, def string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return def
	}
	if u, err := url.Parse(p); err != nil || u.Host != "" || u.Scheme != "" {
		return def
	}
	return p
}
