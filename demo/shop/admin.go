package shop

import (
	"context"
	"errors"
	"github.com/opsgate/opsgate/internal/storekit"
	"net/http"
	"net/url"
	"time"

	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/store"
)

// The admin page lists the operations whose outcome nobody reported (a
// handler that failed or panicked, a web server killed mid-action) and
// resolves them (§7 W142; store.Store.Performing, Resolve). It is behind the
// shop's own login, never an agent's: an agent's Session can't settle what
// its own approval did.

// defaultStuckAfter is how long an operation must have been performing to
// be listed, unless ?older= says otherwise.
const defaultStuckAfter = time.Minute

// maxStuckListed bounds the page.
const maxStuckListed = 200

func (s *Server) adminAllowed(w http.ResponseWriter, r *http.Request) bool {
	if s.ownLogin(r) == "" {
		s.message(w, r, http.StatusForbidden, "Staff only",
			"Sign in with the shop's own login to see operations whose outcome is not known.",
			views.SignInButton(r.URL.Path))
		return false
	}
	return true
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
		outcome = store.Done
	case "not_performed":
		outcome = store.NotDone
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
	err := rc.Resolve(r.Context(), owner, id, outcome, s.cfg.Clock())
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
