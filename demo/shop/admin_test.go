package shop

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/internal/testclock"
	"github.com/opsgate/opsgate/store"
)

// W142: the admin page lists operations whose outcome nobody reported, and
// resolves them; only the shop's staff reach it.
func TestAdminResolvesStuckOperations(t *testing.T) {
	s, c := newTestServer(t)
	st := s.kit.Store
	ctx := context.Background()
	owner := store.Owner{Agent: "https://agent.example/client", User: "usr_1"}
	claim := func(key string) storedriver.TakeResult {
		t.Helper()
		a := storedriver.TakeRequest{Key: key, Terms: []byte(`{"order_id":"` + key + `"}`), Summary: "Exchange on " + key + ".", Lifetime: time.Hour}
		iss, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, c.Now())
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := storedriver.Steps(st).Record(ctx, owner, iss.Ref, store.Approval{OperationID: iss.Operation.ID, Revision: iss.Operation.Revision, Approver: "user"}, c.Now(), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			t.Fatalf("Record: %v %v", rep.Result, err)
		}
		if res, err := storedriver.Steps(st).Take(ctx, owner, a, c.Now()); err != nil || res.Claim == nil {
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
	login := staffSignIn(t, s)
	res, body := do(t, s, "GET", "/admin/operations", nil, nil, login)
	if res.StatusCode != 200 || !strings.Contains(body, done.Operation.ID) || !strings.Contains(body, notDone.Operation.ID) {
		t.Fatalf("list: %d, missing an operation:\n%s", res.StatusCode, body)
	}
	if _, body := do(t, s, "GET", "/admin/operations?older=1h", nil, nil, login); strings.Contains(body, done.Operation.ID) {
		t.Fatal("?older=1h lists an operation claimed 2 minutes ago")
	}
	resolve := func(iss storedriver.TakeResult, outcome string) *http.Response {
		form := url.Values{"agent": {owner.Agent}, "user": {owner.User}, "account": {""}, "operation_id": {iss.Operation.ID}, "outcome": {outcome}, "confirmed": {"yes"}}
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
	status := func(iss storedriver.TakeResult) storedriver.Status {
		rec, found, err := storedriver.Steps(st).Lookup(ctx, owner, iss.Ref, c.Now())
		if err != nil || !found {
			t.Fatalf("Lookup: %v %v", found, err)
		}
		return rec.Status
	}
	if got := status(done); got != storedriver.StatusPerformed {
		t.Errorf("resolved performed: %s", got)
	}
	if got := status(notDone); got != storedriver.StatusWaiting {
		t.Errorf("resolved not performed: %s", got)
	}
	if _, body := do(t, s, "GET", "/admin/operations", nil, nil, login); strings.Contains(body, done.Operation.ID) {
		t.Error("a resolved operation is still listed")
	}
}

// testStaff is the staff credential in the tests.
const testStaff = "staff credential for the tests"

// staffSignIn signs in as the shop's staff.
func staffSignIn(t *testing.T, s *Server) *http.Cookie {
	t.Helper()
	res, _ := do(t, s, "POST", "/admin/signin", strings.NewReader(url.Values{"staff": {s.cfg.StaffCredential}}.Encode()), formHeader)
	for _, c := range res.Cookies() {
		if c.Name == staffCookie && c.MaxAge > 0 {
			return c
		}
	}
	t.Fatalf("staff sign-in: %d, no cookie", res.StatusCode)
	return nil
}

// The attack run's break: after the customer's one-click sign-in, anyone
// saw every agent's stuck operations and could resolve them; marking one
// that took effect "not performed" lets it be performed a second time.
// W142: the admin page is the staff's, with a credential of its own; a
// Resolve is confirmed first and logged, without any secret.
func TestAdminIsStaffOnly(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	c := testclock.At(t0)
	s, err := NewServer(Config{
		BaseURL: "http://shop.test", Clock: c.Now, AllowLocal: true,
		Logger:           slog.New(slog.NewTextHandler(&logs, nil)),
		CustomerPassword: testPassword, StaffCredential: testStaff,
	})
	if err != nil {
		t.Fatal(err)
	}
	st := s.kit.Store
	ctx := context.Background()
	owner := store.Owner{Agent: "https://agent.example/client", User: "usr_1"}
	a := storedriver.TakeRequest{Key: "ord_a", Terms: []byte(`{"order_id":"ord_a"}`), Summary: "Exchange on ord_a.", Lifetime: time.Hour}
	iss, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := storedriver.Steps(st).Record(ctx, owner, iss.Ref, store.Approval{OperationID: iss.Operation.ID, Revision: iss.Operation.Revision, Approver: "user"}, c.Now(), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record: %v %v", rep.Result, err)
	}
	if res, err := storedriver.Steps(st).Take(ctx, owner, a, c.Now()); err != nil || res.Claim == nil {
		t.Fatalf("Take: %+v %v", res, err)
	}
	c.Add(2 * time.Minute)
	status := func() storedriver.Status {
		rec, found, err := storedriver.Steps(st).Lookup(ctx, owner, iss.Ref, c.Now())
		if err != nil || !found {
			t.Fatalf("Lookup: %v %v", found, err)
		}
		return rec.Status
	}
	resolve := func(confirmed bool, cookies ...*http.Cookie) (*http.Response, string) {
		form := url.Values{"agent": {owner.Agent}, "user": {owner.User}, "account": {""}, "operation_id": {iss.Operation.ID}, "outcome": {"not_performed"}}
		if confirmed {
			form.Set("confirmed", "yes")
		}
		return do(t, s, "POST", "/admin/operations/resolve", strings.NewReader(form.Encode()), formHeader, cookies...)
	}

	t.Run("W142 the customer's login is not staff", func(t *testing.T) {
		customer := signIn(t, s)
		if res, body := do(t, s, "GET", "/admin/operations", nil, nil, customer); res.StatusCode != http.StatusForbidden || strings.Contains(body, iss.Operation.ID) {
			t.Errorf("the customer's login sees the admin page: %d", res.StatusCode)
		}
		if res, _ := resolve(true, customer); res.StatusCode != http.StatusForbidden {
			t.Errorf("the customer's login resolves: %d", res.StatusCode)
		}
		joined := join(t, s, agentSession)
		if res, _ := resolve(true, joined...); res.StatusCode != http.StatusForbidden {
			t.Errorf("a joined browser resolves: %d", res.StatusCode)
		}
		if got := status(); got != storedriver.StatusPerforming {
			t.Fatalf("resolved by a non-staff browser: %s", got)
		}
	})

	t.Run("W142 the staff credential", func(t *testing.T) {
		for _, cred := range []string{"", "guess", testPassword} {
			res, _ := do(t, s, "POST", "/admin/signin", strings.NewReader(url.Values{"staff": {cred}}.Encode()), formHeader)
			if res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
				t.Errorf("staff sign-in with %q: %d, %d cookies", cred, res.StatusCode, len(res.Cookies()))
			}
		}
		// A staff cookie made under another credential is refused.
		other, err := NewServer(Config{BaseURL: "http://shop.test", Clock: c.Now, AllowLocal: true, Logger: quiet, Keys: s.cfg.Keys, StaffCredential: "another"})
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := do(t, s, "GET", "/admin/operations", nil, nil, staffSignIn(t, other)); res.StatusCode != http.StatusForbidden {
			t.Errorf("a staff cookie of another credential: %d", res.StatusCode)
		}
	})

	t.Run("W142 a Resolve is confirmed and logged", func(t *testing.T) {
		staff := staffSignIn(t, s)
		if res, body := do(t, s, "GET", "/admin/operations", nil, nil, staff); res.StatusCode != http.StatusOK || !strings.Contains(body, iss.Operation.ID) {
			t.Fatalf("staff list: %d", res.StatusCode)
		}
		res, body := resolve(false, staff)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, `name="confirmed" value="yes"`) || !strings.Contains(body, "performs it again") {
			t.Fatalf("an unconfirmed Resolve: %d\n%s", res.StatusCode, body)
		}
		if got := status(); got != storedriver.StatusPerforming {
			t.Fatalf("resolved without the confirmation: %s", got)
		}
		if res, _ := resolve(true, staff); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("confirmed Resolve: %d", res.StatusCode)
		}
		if got := status(); got != storedriver.StatusWaiting {
			t.Errorf("after not_performed: %s", got)
		}
		out := logs.String()
		if !strings.Contains(out, "staff resolved an operation") || !strings.Contains(out, iss.Operation.ID) || !strings.Contains(out, "outcome=not_performed") {
			t.Errorf("the Resolve is not logged:\n%s", out)
		}
		for _, secret := range []string{testStaff, testPassword, staff.Value} {
			if strings.Contains(out, secret) {
				t.Errorf("the log holds a secret %.12q…", secret)
			}
		}
	})
}
