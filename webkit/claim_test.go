package webkit

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/opsgate/opsgate/store"
)

// TestClaimOf: the handler gets the store's Claim, with terms of its own
// (changing them changes nothing the kit finishes with), and outside a
// performance nothing.
func TestClaimOf(t *testing.T) {
	if _, ok := ClaimOf(httptest.NewRequest("POST", "/exchange", nil)); ok {
		t.Fatal("a claim outside a performance")
	}
	want := store.Claim{
		Owner:     store.Owner{Agent: "https://agent.example/client", User: "u1", Account: "acct_9"},
		Operation: store.Operation{ID: "op_1", Revision: "r1", Terms: json.RawMessage(`{"a":1}`)},
		Approval:  store.Approval{OperationID: "op_1", Revision: "r1", Approver: store.ApproverUser},
		Token:     "tok",
	}
	p := &performing{claim: want}
	r := httptest.NewRequest("POST", "/exchange", nil)
	r = r.WithContext(context.WithValue(r.Context(), performingKey{}, p))
	got, ok := ClaimOf(r)
	if !ok || got.Operation.ID != "op_1" || got.Agent != want.Owner.Agent || got.Account != "acct_9" || got.Approval != want.Approval {
		t.Fatalf("ClaimOf = %+v, %v", got, ok)
	}
	got.Operation.Terms[1] = 'X'
	if string(p.claim.Operation.Terms) != `{"a":1}` {
		t.Fatalf("the handler's terms are the kit's: %s", p.claim.Operation.Terms)
	}
}
