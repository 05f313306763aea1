package shop

import (
	"context"
	"encoding/json"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// DeclineAgentCancel is the shop's decline hook (§6 "Declining an
// approval"): it declines an `agent` approval of a subscription
// cancellation, because the shop wants the account holder to decide that
// themselves, and points to the subscription page at subscriptionURL as the
// alternative. It accepts every other approval (nil). The reason says
// nothing the Session couldn't already see (W130), and there is no reason
// code (W131).
func DeclineAgentCancel(subscriptionURL string) func(op store.Operation, a store.Approval, s webkit.Session) *webkit.Decline {
	return func(op store.Operation, a store.Approval, _ webkit.Session) *webkit.Decline {
		if a.Approver != store.ApproverAgent || !isCancellation(op) {
			return nil
		}
		return &webkit.Decline{
			OperationID: a.OperationID,
			Revision:    a.Revision,
			Reason:      "Only the account holder can cancel the subscription.",
			Alternative: &webkit.Alternative{
				Instructions: "The account holder can cancel the subscription on the Ridgeline Outfitters website, signed in.",
				References:   []webkit.AlternativeReference{{Type: "web", URL: subscriptionURL}},
			},
		}
	}
}

// isCancellation reports whether op's terms are a subscription
// cancellation's (CancelTerms): a resubscription names the subscription
// too, but has no effective date.
func isCancellation(op store.Operation) bool {
	var t struct {
		SubscriptionID *string `json:"subscription_id"`
		EffectiveDate  *string `json:"effective_date"`
	}
	return json.Unmarshal(op.Terms, &t) == nil && t.SubscriptionID != nil && t.EffectiveDate != nil
}

// declineHook plugs DeclineAgentCancel into the operations endpoint.
func (s *Server) declineHook(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline {
	if dec := s.bench.decline(d); dec != nil { // the bench's decline, in its scenario
		return dec
	}
	return DeclineAgentCancel(s.URL("/account/subscription"))(d.Operation, d.Approval, d.Session)
}
