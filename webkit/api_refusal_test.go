package webkit_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
)

// A site's decline wins, even over an approval this very approval left
// recorded before: its first request carried other terms (check 3
// failed after the hook had accepted it), and the hook declines the
// second. Nothing is performed (P79, P88; fail closed).
func TestAPIDeclineAfterAnApprovalWasRecorded(t *testing.T) {
	stores := map[string]func(t *testing.T) store.Store{
		"memory": func(*testing.T) store.Store { return memstore.New(memstore.Config{}) },
		"redis": func(t *testing.T) store.Store {
			return redisstore.New(redistest.Server(t), redisstore.Options{})
		},
	}
	for name, newStore := range stores {
		t.Run("P79 P88 "+name, func(t *testing.T) {
			var declining atomic.Bool
			a := newAPISite(t, apiOptions{store: newStore(t), decline: func(endpoint.DeclineRequest) *webkit.Decline {
				if declining.Load() {
					return &webkit.Decline{Reason: "Exchanges are paused."}
				}
				return nil
			}})
			s := a.site.NewAgent().Session("usr_1")
			op := a.ask(t, s, exchange("ord_1", "m"))
			ap := approvalOf(op, "agent")
			if res := s.Call(exchange("ord_1", "l"), ap); res.StatusCode != http.StatusForbidden || a.performed.Load() != 0 {
				t.Fatalf("the approval on other terms: %d, performed %d", res.StatusCode, a.performed.Load())
			}
			declining.Store(true)
			res := s.Call(exchange("ord_1", "m"), ap)
			if res.StatusCode != http.StatusForbidden || res.Error != "approval_declined" {
				t.Errorf("the declined approval: %d %s, want 403 approval_declined", res.StatusCode, res.Body)
			}
			if n := a.performed.Load(); n != 0 {
				t.Fatalf("performed %d times although the site declined the approval", n)
			}
		})
	}
}

// Each request member that changes the outcome is in the terms, and so
// in the revision: N distinct sets of terms get N distinct revisions
// (§3 P27, P33), and the summary the site wrote, with the amount and the
// size its terms carry, reaches the agent unchanged (P28).
func TestAPITermsMakeTheRevision(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	s := a.site.NewAgent().Session("usr_1")
	revisions := map[string]string{}
	var id string
	for _, sku := range []string{"xs", "s", "m", "l", "xl"} {
		op := a.ask(t, s, exchange("ord_27", sku))
		var terms map[string]any
		if err := json.Unmarshal(op.Terms, &terms); err != nil || terms["replacement_sku"] != sku {
			t.Fatalf("P27: the terms of the request for %s: %s (%v)", sku, op.Terms, err)
		}
		if other, ok := revisions[op.Revision]; ok {
			t.Fatalf("P33: %s and %s got the same revision %s", other, sku, op.Revision)
		}
		revisions[op.Revision] = sku
		if id != "" && op.ID != id {
			t.Errorf("one action got operations %s and %s", id, op.ID)
		}
		id = op.ID
		if !strings.Contains(op.Summary, "70.00") || !strings.Contains(op.Summary, " "+sku+",") {
			t.Errorf("P28: the summary %q lacks the amount or size its terms carry", op.Summary)
		}
	}
}

// A decline's reason is the site's own words, and the answer carries
// nothing else of the kit's but the spec's members (§6 P85).
func TestAPIDeclineCarriesOnlyTheSitesReason(t *testing.T) {
	const reason = "Exchanges need your own tap."
	a := newAPISite(t, apiOptions{decline: func(endpoint.DeclineRequest) *webkit.Decline {
		return &webkit.Decline{Reason: reason}
	}})
	s := a.site.NewAgent().SignedInSession("usr_1", "acct_1")
	op := a.ask(t, s, exchange("ord_85", "m"))
	res := s.Call(exchange("ord_85", "m"), approvalOf(op, store.ApproverAgent))
	var body map[string]any
	if err := json.Unmarshal(res.Body, &body); err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("%d %s", res.StatusCode, res.Body)
	}
	for k, v := range body {
		switch k {
		case "error", "operation_id", "revision":
		case "reason":
			if v != reason {
				t.Errorf("P85: reason %q, the site gave %q", v, reason)
			}
		default:
			t.Errorf("P85: the decline carries %q: %v", k, v)
		}
	}
	if a.performed.Load() != 0 {
		t.Error("performed")
	}
}

// The API remembers it performed an operation at least until the
// approved revision's expires_at: a retry with the same approval a second
// before it gets the first answer, and nothing runs again (§7 P91).
func TestAPIPerformedRememberedUntilExpiresAt(t *testing.T) {
	a := newAPISite(t, apiOptions{})
	start := time.Now().Truncate(time.Second)
	a.now.Store(start.UnixNano())
	s := a.site.NewAgent().Session("usr_1")
	op := a.ask(t, s, exchange("ord_91", "m"))
	first := s.Call(exchange("ord_91", "m"), approvalOf(op, store.ApproverUser))
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", first.StatusCode, first.Body)
	}
	for _, at := range []time.Duration{-time.Second, 0} {
		a.now.Store(op.ExpiresAt.Add(at).UnixNano())
		again := s.Call(exchange("ord_91", "m"), approvalOf(op, store.ApproverUser))
		if again.StatusCode != first.StatusCode || string(again.Body) != string(first.Body) || a.performed.Load() != 1 {
			t.Fatalf("P91: a retry %v from expires_at: %d %s, performed %d; want the first answer, once", at, again.StatusCode, again.Body, a.performed.Load())
		}
	}
}
