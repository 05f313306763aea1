package shop

import (
	"context"
	"github.com/opsgate/opsgate/store/storetest"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/store"
)

// W142: the admin page lists operations whose outcome nobody reported, and
// resolves them; only the shop's own login reaches it.
func TestAdminResolvesStuckOperations(t *testing.T) {
	s, c := newTestServer(t)
	st := s.kit.Store
	ctx := context.Background()
	owner := store.Owner{Agent: "https://agent.example/client", User: "usr_1"}
	claim := func(key string) store.Issued {
		t.Helper()
		a := store.TakeRequest{Key: key, Terms: []byte(`{"order_id":"` + key + `"}`), Summary: "Exchange on " + key + ".", Lifetime: time.Hour}
		iss, err := storetest.Issue(ctx, st, owner, a, c.Now())
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := st.Record(ctx, owner, iss.Ref, store.Approval{OperationID: iss.Operation.ID, Revision: iss.Operation.Revision, Approver: "user"}, c.Now(), store.RecordOptions{}); err != nil || rep.Result != store.Recorded {
			t.Fatalf("Record: %v %v", rep.Result, err)
		}
		if res, err := st.Take(ctx, owner, a, c.Now()); err != nil || res.Claim == nil {
			t.Fatalf("Take: %+v %v", res, err)
		}
		return iss
	}
	done, notDone := claim("ord_a"), claim("ord_b")
	c.Add(2 * time.Minute)

	if res, _ := do(t, s, "GET", "/admin/operations", nil, nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("without the shop's login: %d", res.StatusCode)
	}
	if res, _ := do(t, s, "POST", "/admin/operations/resolve", strings.NewReader("outcome=performed"), formHeader); res.StatusCode != http.StatusForbidden {
		t.Fatalf("resolve without the shop's login: %d", res.StatusCode)
	}
	login := signIn(t, s)
	res, body := do(t, s, "GET", "/admin/operations", nil, nil, login)
	if res.StatusCode != 200 || !strings.Contains(body, done.Operation.ID) || !strings.Contains(body, notDone.Operation.ID) {
		t.Fatalf("list: %d, missing an operation:\n%s", res.StatusCode, body)
	}
	if _, body := do(t, s, "GET", "/admin/operations?older=1h", nil, nil, login); strings.Contains(body, done.Operation.ID) {
		t.Fatal("?older=1h lists an operation claimed 2 minutes ago")
	}
	resolve := func(iss store.Issued, outcome string) *http.Response {
		form := url.Values{"agent": {owner.Agent}, "user": {owner.User}, "account": {""}, "operation_id": {iss.Operation.ID}, "outcome": {outcome}}
		res, _ := do(t, s, "POST", "/admin/operations/resolve", strings.NewReader(form.Encode()), formHeader, login)
		return res
	}
	if res := resolve(done, "performed"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve performed: %d", res.StatusCode)
	}
	if res := resolve(notDone, "not_performed"); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve not performed: %d", res.StatusCode)
	}
	if res := resolve(done, "performed"); res.StatusCode != http.StatusConflict {
		t.Fatalf("resolving twice: %d, want 409", res.StatusCode)
	}
	if res := resolve(done, "maybe"); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a made-up outcome: %d", res.StatusCode)
	}
	status := func(iss store.Issued) store.Status {
		rec, found, err := st.Lookup(ctx, owner, iss.Ref, c.Now())
		if err != nil || !found {
			t.Fatalf("Lookup: %v %v", found, err)
		}
		return rec.Status
	}
	if got := status(done); got != store.Performed {
		t.Errorf("resolved performed: %s", got)
	}
	if got := status(notDone); got != store.Waiting {
		t.Errorf("resolved not performed: %s", got)
	}
	if _, body := do(t, s, "GET", "/admin/operations", nil, nil, login); strings.Contains(body, done.Operation.ID) {
		t.Error("a resolved operation is still listed")
	}
}
