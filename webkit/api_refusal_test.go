package webkit_test

import (
	"net/http"
	"sync/atomic"
	"testing"

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
