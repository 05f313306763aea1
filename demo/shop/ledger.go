package shop

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// The ledger: the store's audit entries (store.Entry, §6, §8.1), for the
// staff on /admin/ledger (filtered by agent, User, operation, outcome),
// and on the account page, for a browser an agent joined, that agent's
// own decisions for its User.

// ledgerWindow is how far back the ledger reads: the entries' default
// retention.
const ledgerWindow = 24 * time.Hour

// maxLedgerRows bounds a page.
const maxLedgerRows = 300

// ledgerWhats are the values of store.Entry.What, for the filter.
var ledgerWhats = []string{storekit.EntryRecorded, storekit.EntryDeclined, storekit.EntryClaimed, storekit.EntryReleased,
	storekit.EntryPerformed, storekit.EntryNotPerformed, storekit.EntryUnknown, storekit.EntryResolved, storekit.EntryResolvedNotDo}

// ledger reads the entries of the last day that keep says to, newest
// first, at most maxLedgerRows (more reports that some were left out).
func (s *Server) ledger(ctx context.Context, operationID string, keep func(store.Entry) bool) (rows []views.LedgerEntry, more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := s.cfg.Clock()
	var es []store.Entry
	for e, err := range s.kit.Store.Entries(ctx, operationID, now.Add(-ledgerWindow), now.Add(time.Second)) {
		if err != nil {
			return nil, false, err
		}
		if keep(e) {
			es = append(es, e)
		}
	}
	slices.SortStableFunc(es, func(a, b store.Entry) int { return b.At.Compare(a.At) })
	if len(es) > maxLedgerRows {
		es, more = es[:maxLedgerRows], true
	}
	for _, e := range es {
		note := e.Reason
		if e.By != "" {
			note = "by " + e.By
		}
		rows = append(rows, views.LedgerEntry{
			At: e.At, What: e.What, OperationID: e.Operation.ID, Revision: e.Operation.Revision, Summary: e.Operation.Summary,
			Agent: e.Agent, User: e.User, Account: e.Account, Session: e.Session,
			Approver: string(e.Approval.Approver), ApprovedAt: e.Approval.ApprovedAt, InputType: e.Approval.InputType,
			Reference: e.Approval.Reference, Note: note, Instance: e.Instance,
		})
	}
	return rows, more, nil
}

// adminLedger (GET /admin/ledger) is the staff's ledger.
func (s *Server) adminLedger(w http.ResponseWriter, r *http.Request) {
	if !s.adminAllowed(w, r) {
		return
	}
	q := r.URL.Query()
	f := views.LedgerFilter{Agent: strings.TrimSpace(q.Get("agent")), User: strings.TrimSpace(q.Get("user")),
		Operation: strings.TrimSpace(q.Get("operation")), What: q.Get("what")}
	if !slices.Contains(ledgerWhats, f.What) {
		f.What = ""
	}
	v := views.LedgerView{Filter: f, Whats: ledgerWhats}
	if f.Operation != "" && !validOpID(f.Operation) {
		v.Problem = "That is not an operation_id."
	} else {
		var err error
		v.Entries, v.More, err = s.ledger(r.Context(), f.Operation, func(e store.Entry) bool {
			return (f.Agent == "" || strings.Contains(e.Agent, f.Agent)) && (f.User == "" || e.User == f.User) &&
				(f.What == "" || e.What == f.What)
		})
		if err != nil {
			s.cfg.Logger.Error("demo shop: the ledger could not be read", "err", err)
			v.Problem = "The store could not be read; try again."
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	vw := s.viewerOf(r)
	render(w, r, http.StatusOK, views.LedgerPage(s.chrome(r, vw, "Ledger", "account"), v))
}

// agentDecisions is what the account page shows a browser an agent
// joined: that agent's decisions for its User, and nobody else's.
func (s *Server) agentDecisions(r *http.Request, v viewer) []views.LedgerEntry {
	if !v.Joined || v.Session.Agent == "" {
		return nil
	}
	rows, _, err := s.ledger(r.Context(), "", func(e store.Entry) bool {
		return e.Agent == v.Session.Agent && e.User == v.Session.User
	})
	if err != nil {
		s.cfg.Logger.Error("demo shop: the ledger could not be read", "err", err)
	}
	return rows
}
