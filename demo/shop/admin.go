package shop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The admin page lists the operations whose outcome nobody reported (a
// handler that failed or panicked, a web server killed mid-action) and
// resolves them (§7 W142; store.Store.Performing, Resolve). It is for the shop's staff
// only: a staff credential (Config.StaffCredential), separate from the
// customer's login, signs a browser in as staff; neither a customer's login
// nor an agent's Session reaches it (an agent's Session can't settle what
// its own approval did, and marking an operation that took effect "not
// performed" lets it be performed again). Each Resolve is confirmed on a
// page of its own and logged.

// defaultStuckAfter is how long an operation must have been performing to
// be listed, unless ?older= says otherwise.
const defaultStuckAfter = time.Minute

// maxStuckListed bounds the page.
const maxStuckListed = 200

// staffCookie is the staff's sign-in, on /admin/ only.
const staffCookie = "ridgeline_staff"

// staffLifetime is how long a staff sign-in lasts.
const staffLifetime = 8 * time.Hour

// staffMark is what the staff cookie carries, sealed: a digest of the
// credential it was made with, so that changing the credential signs
// every staff browser out.
func (s *Server) staffMark() string {
	sum := sha256.Sum256([]byte("ridgeline staff\n" + s.cfg.StaffCredential))
	return hex.EncodeToString(sum[:16])
}

// isStaff reports whether r carries a valid staff sign-in.
func (s *Server) isStaff(r *http.Request) bool {
	c, err := r.Cookie(staffCookie)
	if err != nil {
		return false
	}
	var mark string
	if err := s.staff.Decode(staffCookie, c.Value, &mark); err != nil {
		return false
	}
	return mark == s.staffMark()
}

func (s *Server) adminAllowed(w http.ResponseWriter, r *http.Request) bool {
	if !s.isStaff(r) {
		ret := "/admin/operations"
		if r.Method == http.MethodGet {
			ret = localPath(r.URL.RequestURI(), ret)
		}
		v := s.viewerOf(r)
		render(w, r, http.StatusForbidden, views.StaffSignInPage(s.chrome(r, v, "Staff only", ""), ret, ""))
		return false
	}
	return true
}

// staffSignIn (POST /admin/signin) checks the staff credential.
func (s *Server) staffSignIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	ret := localPath(r.PostFormValue("return"), "/admin/operations")
	if !strings.HasPrefix(ret, "/admin/") {
		ret = "/admin/operations"
	}
	if s.slowed(w, r, s.staffTries, "staff credentials") {
		return
	}
	if !secretEqual(r.PostFormValue("staff"), s.cfg.StaffCredential) {
		s.staffTries.failed(s.sourceOf(r))
		// Never the value tried: only that a sign-in failed.
		s.cfg.Logger.Warn("demo shop: staff sign-in refused")
		v := s.viewerOf(r)
		render(w, r, http.StatusUnauthorized, views.StaffSignInPage(s.chrome(r, v, "Staff only", ""), ret, "That staff credential is not right."))
		return
	}
	s.staffTries.succeeded(s.sourceOf(r))
	value, err := s.staff.Encode(staffCookie, s.staffMark())
	if err != nil {
		http.Error(w, "sign-in failed", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: staffCookie, Value: value, Path: "/admin/", HttpOnly: true,
		Secure: s.secure, SameSite: http.SameSiteStrictMode, MaxAge: int(staffLifetime.Seconds()),
	})
	s.cfg.Logger.Info("demo shop: staff signed in")
	http.Redirect(w, r, ret, http.StatusSeeOther)
}

// staffSignOut (POST /admin/signout) ends the staff sign-in.
func (s *Server) staffSignOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: staffCookie, Value: "", Path: "/admin/", HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) reconciler() (store.Store, bool) {
	return s.kit.Store, s.kit.Store != nil
}

func (s *Server) adminOperations(w http.ResponseWriter, r *http.Request) {
	if !s.adminAllowed(w, r) {
		return
	}
	older := defaultStuckAfter
	if d, err := time.ParseDuration(r.URL.Query().Get("older")); err == nil && d >= 0 && d <= 30*24*time.Hour {
		older = d
	}
	v := views.AdminView{Older: older, Resolved: r.URL.Query().Get("resolved")}
	if !validOpID(v.Resolved) {
		v.Resolved = ""
	}
	rc, ok := s.reconciler()
	if !ok {
		v.Problem = "This store can't list operations whose outcome is not known."
	} else {
		now := s.cfg.Clock()
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		for st, err := range rc.Performing(ctx, now.Add(-older), now) {
			if err != nil {
				v.Problem = "The store could not be read: " + err.Error()
				break
			}
			v.Stuck = append(v.Stuck, views.StuckOperation{
				Agent: st.Owner.Agent, User: st.Owner.User, Account: st.Owner.Account,
				OperationID: st.Operation.ID, Summary: st.Operation.Summary,
				ClaimedAt: st.ClaimedAt, Unknown: st.Unknown,
			})
			if len(v.Stuck) == maxStuckListed {
				break
			}
		}
	}
	vw := s.viewerOf(r)
	render(w, r, http.StatusOK, views.AdminPage(s.chrome(r, vw, "Operations", "account"), v))
}

func (s *Server) adminResolve(w http.ResponseWriter, r *http.Request) {
	if !s.adminAllowed(w, r) {
		return
	}
	var outcome store.Outcome
	switch r.PostFormValue("outcome") {
	case "performed":
		outcome = store.OutcomePerformed
	case "not_performed":
		outcome = store.OutcomeNotPerformed
	default:
		s.message(w, r, http.StatusBadRequest, "Not resolved", "Choose performed or not performed.", views.BackLink("/admin/operations", "Back"))
		return
	}
	owner := store.Owner{Agent: r.PostFormValue("agent"), User: r.PostFormValue("user"), Account: r.PostFormValue("account")}
	id := r.PostFormValue("operation_id")
	rc, ok := s.reconciler()
	if !ok || owner.Agent == "" || owner.User == "" || !validOpID(id) {
		s.message(w, r, http.StatusBadRequest, "Not resolved", "That operation can't be resolved here.", views.BackLink("/admin/operations", "Back"))
		return
	}
	if r.PostFormValue("confirmed") != "yes" {
		// Ask first: "not performed" lets the operation be performed again.
		w.Header().Set("Cache-Control", "no-store")
		v := s.viewerOf(r)
		render(w, r, http.StatusOK, views.ResolveConfirmPage(s.chrome(r, v, "Resolve", ""), views.ResolveView{
			Operation: views.StuckOperation{Agent: owner.Agent, User: owner.User, Account: owner.Account, OperationID: id},
			Outcome:   r.PostFormValue("outcome"),
		}))
		return
	}
	// The ledger names who resolved it (store.Entry.By): the staff.
	err := rc.Resolve(r.Context(), owner, id, outcome, "staff (admin page)", s.cfg.Clock())
	// Every Resolve is logged: who it was for and what was said, never a
	// token or a cookie.
	s.cfg.Logger.Info("demo shop: staff resolved an operation",
		"operation_id", id, "agent", owner.Agent, "user", owner.User, "account", owner.Account,
		"outcome", r.PostFormValue("outcome"), "ok", err == nil)
	switch {
	case errors.Is(err, store.ErrNotPerforming):
		s.message(w, r, http.StatusConflict, "Already settled", "That operation is no longer waiting for an outcome.", views.BackLink("/admin/operations", "Back"))
		return
	case err != nil:
		s.cfg.Logger.Error("demo shop: resolve failed", "operation_id", id, "err", err)
		w.Header().Set("Retry-After", "2")
		s.message(w, r, http.StatusServiceUnavailable, "Not resolved", "The store could not be reached; try again.", views.BackLink("/admin/operations", "Back"))
		return
	}
	http.Redirect(w, r, "/admin/operations?resolved="+url.QueryEscape(id), http.StatusSeeOther)
}

func validOpID(id string) bool { return id != "" && storekit.ValidID(id) }
