package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// ---- One record across interfaces (§3, §6 "APIs", "MCP", "Websites", §7) ----
//
// An operation is the action's, whichever interface returned it; each
// revision is the interface's that returned it (storedriver.TakeRequest.Via).

// via is a with the interface and the approval the request carries.
func via(a storedriver.TakeRequest, v, approved string) storedriver.TakeRequest {
	a.Via, a.Approved = v, approved
	return a
}

// wantVia fails the case unless rev is interface v's.
func wantVia(t testing.TB, rev, v string) {
	t.Helper()
	if got := storekit.RevisionVia(rev); got != v {
		t.Fatalf("revision %s is interface %q's, want %q's", rev, got, v)
	}
}

var _ = add("P04 P16 P32 M17 M33 an API's operation is the action's, stored, with revisions of its own", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_1", `{"size":"M"}`)
	web := e.noClaim(signedIn, a, at(0))
	api := e.noClaim(signedIn, via(a, storekit.ViaAPI, ""), at(time.Second))
	if api.Operation.ID != web.Operation.ID {
		t.Fatalf("the API's operation_id %s, the website's %s: one action, one operation_id (§3)", api.Operation.ID, web.Operation.ID)
	}
	wantVia(t, api.Operation.Revision, storekit.ViaAPI)
	wantVia(t, web.Operation.Revision, "")
	if strings.Count(api.Ref, ".") != 1 {
		t.Errorf("the API's ref %.60s… is sealed: its approval names a stored revision", api.Ref)
	}
	if string(api.Operation.Terms) != `{"size":"M"}` {
		t.Errorf("terms %s", api.Operation.Terms)
	}
	// P16, P23: the same request again gets the same revision.
	again := e.noClaim(signedIn, via(a, storekit.ViaAPI, ""), at(2*time.Second))
	if again.Operation.ID != api.Operation.ID || again.Operation.Revision != api.Operation.Revision {
		t.Errorf("the repeat got %s/%s, want %s/%s", again.Operation.ID, again.Operation.Revision, api.Operation.ID, api.Operation.Revision)
	}
	// M17 M33: an MCP server's revisions are its own too, of the same
	// operation.
	mcp := e.noClaim(signedIn, via(a, storekit.ViaMCP, ""), at(3*time.Second))
	if mcp.Operation.ID != api.Operation.ID {
		t.Errorf("the MCP server's operation_id %s, the API's %s", mcp.Operation.ID, api.Operation.ID)
	}
	wantVia(t, mcp.Operation.Revision, storekit.ViaMCP)
	// The website's request gets a revision of its own, never the API's.
	w2 := e.noClaim(signedIn, a, at(4*time.Second))
	wantVia(t, w2.Operation.Revision, "")
	if w2.Operation.ID != api.Operation.ID {
		t.Errorf("the website's operation_id %s after the API's %s", w2.Operation.ID, api.Operation.ID)
	}
	// W72: the website's current revision is the website's, whatever an
	// API issues after it.
	e.noClaim(signedIn, via(action(t, "exchange:ord_1", `{"size":"L"}`), storekit.ViaAPI, ""), at(5*time.Second))
	if rec := e.status(signedIn, w2.Ref, at(6*time.Second), storedriver.StatusWaiting); rec.Current.Revision != w2.Operation.Revision {
		t.Errorf("W72: Lookup of the website's ref names %s, want its own %s", rec.Current.Revision, w2.Operation.Revision)
	}
})

var _ = add("P61 M61 W46 an approval recorded at the website's endpoint is never claimed through an API or MCP server", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_2", `{"size":"M"}`)
	web := e.noClaim(signedIn, a, at(0))
	e.approve(signedIn, web, at(time.Second))
	for _, v := range []string{storekit.ViaAPI, storekit.ViaMCP} {
		// The website's revision named by the request's approval: nothing
		// claimed, an operation of the interface's own instead.
		res := e.noClaim(signedIn, via(a, v, web.Operation.Revision), at(2*time.Second))
		wantVia(t, res.Operation.Revision, v)
		if res.Operation.Revision == web.Operation.Revision {
			t.Errorf("%s: answered with the approval's own revision", v)
		}
	}
	// The browser's request still finds it.
	c := e.claim(signedIn, a, at(3*time.Second))
	if c.Operation.Revision != web.Operation.Revision {
		t.Errorf("the browser claimed %s, want %s", c.Operation.Revision, web.Operation.Revision)
	}
})

var _ = add("P30 P62 M31 M62 an approval recorded through an API is claimed only by the request that carries it", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_3", `{"size":"M"}`)
	api := e.noClaim(signedOut, via(a, storekit.ViaAPI, ""), at(0))
	e.wantRecord(signedOut, api.Ref, approvalOf(api.Operation), at(time.Second), storedriver.Recorded)
	// The website's request never claims it (§6 "Websites").
	if web := e.noClaim(signedOut, a, at(2*time.Second)); storekit.RevisionVia(web.Operation.Revision) != "" {
		t.Errorf("the website was answered with %s", web.Operation.Revision)
	}
	// Nor the MCP server's, nor an API request without an approval (P30).
	e.noClaim(signedOut, via(a, storekit.ViaMCP, api.Operation.Revision), at(3*time.Second))
	e.noClaim(signedOut, via(a, storekit.ViaAPI, ""), at(4*time.Second))
	// Nor the API request that carries it, for other terms (P29, P70).
	other := e.noClaim(signedOut, via(action(t, "exchange:ord_3", `{"size":"L"}`), storekit.ViaAPI, api.Operation.Revision), at(5*time.Second))
	if other.Operation.Revision == api.Operation.Revision || string(other.Operation.Terms) != `{"size":"L"}` {
		t.Errorf("P75: the request for other terms got %s %s", other.Operation.Revision, other.Operation.Terms)
	}
	c := e.claim(signedOut, via(a, storekit.ViaAPI, api.Operation.Revision), at(6*time.Second))
	if c.Operation.Revision != api.Operation.Revision || c.Approval.Revision != api.Operation.Revision {
		t.Errorf("claimed %s with %s, want %s", c.Operation.Revision, c.Approval.Revision, api.Operation.Revision)
	}
})

var _ = add("P34 P89 M35 M89 at most once across interfaces: one performs, the others wait, then find it performed", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_4", `{"size":"M"}`)
	web := e.noClaim(signedIn, a, at(0))
	e.approve(signedIn, web, at(time.Second))
	api := e.noClaim(signedIn, via(a, storekit.ViaAPI, ""), at(2*time.Second))
	if api.Operation.ID != web.Operation.ID {
		t.Fatalf("two operations of one action: %s, %s", web.Operation.ID, api.Operation.ID)
	}
	e.wantRecord(signedIn, api.Ref, approvalOf(api.Operation), at(3*time.Second), storedriver.Recorded)
	mcp := e.noClaim(signedIn, via(a, storekit.ViaMCP, ""), at(3*time.Second))
	e.wantRecord(signedIn, mcp.Ref, approvalOf(mcp.Operation), at(3*time.Second), storedriver.Recorded)
	c := e.claim(signedIn, a, at(4*time.Second))
	// P67, W145: while it performs, the others wait.
	for _, r := range []storedriver.TakeRequest{via(a, storekit.ViaAPI, api.Operation.Revision), via(a, storekit.ViaMCP, mcp.Operation.Revision)} {
		if res := e.take(signedIn, r, at(5*time.Second)); !res.Busy {
			t.Errorf("%s while the website performs: %+v, want busy", r.Via, res)
		}
	}
	e.wantRecord(signedIn, api.Ref, approvalOf(api.Operation), at(5*time.Second), storedriver.BeingPerformed)
	e.finish(c, store.OutcomePerformed, at(6*time.Second))
	// §7: performed, whichever revision is approved; the website kept no
	// answer for an API.
	rep := e.wantRecord(signedIn, api.Ref, approvalOf(api.Operation), at(7*time.Second), storedriver.AlreadyPerformed)
	if rep.Answer != nil {
		t.Errorf("an answer the website never gave: %q", rep.Answer)
	}
	e.wantRecord(signedIn, mcp.Ref, approvalOf(mcp.Operation), at(7*time.Second), storedriver.AlreadyPerformed)
	// P97: the next request is a new action.
	next := e.noClaim(signedIn, via(a, storekit.ViaMCP, mcp.Operation.Revision), at(8*time.Second))
	if next.Operation.ID == web.Operation.ID {
		t.Errorf("P97: the next request got the performed operation_id %s", next.Operation.ID)
	}
})

var _ = add("P90 M90 a performed operation keeps the answer its claim gave, and only a short one", func(t *testing.T, e *env) {
	for i, answer := range []string{`{"status":200,"body":"done"}`, strings.Repeat("x", storekit.MaxAnswer+1)} {
		a := action(t, "exchange:ord_5_"+string(rune('a'+i)), `{"size":"M"}`)
		api := e.noClaim(signedOut, via(a, storekit.ViaAPI, ""), at(0))
		e.wantRecord(signedOut, api.Ref, approvalOf(api.Operation), at(time.Second), storedriver.Recorded)
		c := e.claim(signedOut, via(a, storekit.ViaAPI, api.Operation.Revision), at(2*time.Second))
		ctx := storedriver.WithAnswer(e.ctx(), []byte(answer))
		if err := e.client(4).Finish(ctx, *c, store.OutcomePerformed, at(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		rep := e.wantRecord(signedOut, api.Ref, approvalOf(api.Operation), at(4*time.Second), storedriver.AlreadyPerformed)
		switch {
		case len(answer) <= storekit.MaxAnswer && string(rep.Answer) != answer:
			t.Errorf("the retry's answer %q, want the first %q", rep.Answer, answer)
		case len(answer) > storekit.MaxAnswer && rep.Answer != nil:
			t.Errorf("kept %d bytes, more than %d", len(rep.Answer), storekit.MaxAnswer)
		}
		// Another User's request knows nothing of it (check 1, P66).
		e.wantRecord(otherUser, api.Ref, approvalOf(api.Operation), at(4*time.Second), storedriver.NotFound)
	}
})

var _ = add("P90 M90 a claim through an API not performed after all offers the same terms again, as the API's", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_6", `{"size":"M"}`)
	api := e.noClaim(signedIn, via(a, storekit.ViaMCP, ""), at(0))
	e.wantRecord(signedIn, api.Ref, approvalOf(api.Operation), at(time.Second), storedriver.Recorded)
	c := e.claim(signedIn, via(a, storekit.ViaMCP, api.Operation.Revision), at(2*time.Second))
	e.finish(c, store.OutcomeNotPerformed, at(3*time.Second))
	// Used up (W98): the retry fails check 3, and gets a revision of the
	// same interface that an approval can still use.
	rep := e.wantRecord(signedIn, api.Ref, approvalOf(api.Operation), at(4*time.Second), storedriver.RevisionMismatch)
	wantVia(t, rep.Operation.Revision, storekit.ViaMCP)
	next := e.noClaim(signedIn, via(a, storekit.ViaMCP, ""), at(5*time.Second))
	wantVia(t, next.Operation.Revision, storekit.ViaMCP)
	if next.Operation.Revision == api.Operation.Revision || next.Operation.ID != api.Operation.ID {
		t.Errorf("after not performed: %s/%s, want a new revision of %s", next.Operation.ID, next.Operation.Revision, api.Operation.ID)
	}
})

var _ = add("P89 M89 the same approval sent through an API at once performs once", func(t *testing.T, e *env) {
	a := action(t, "exchange:ord_7", `{"size":"M"}`)
	api := e.noClaim(signedOut, via(a, storekit.ViaAPI, ""), at(0))
	ap := approvalOf(api.Operation)
	const n = 8
	claims := make(chan *store.Claim, n)
	run(t, e, n, func(i int, s storedriver.Store) error {
		now := at(time.Second)
		if _, err := s.Record(context.WithoutCancel(e.ctx()), signedOut, api.Ref, ap, now, storedriver.RecordOptions{}); err != nil {
			return err
		}
		r := via(a, storekit.ViaAPI, api.Operation.Revision)
		r.ClaimToken = storekit.NewToken()
		res, err := s.Take(e.ctx(), signedOut, r, now)
		if err != nil {
			return err
		}
		if res.Claim != nil {
			claims <- res.Claim
		}
		return nil
	})
	close(claims)
	if got := len(claims); got != 1 {
		t.Fatalf("%d claims of one approval sent %d times at once", got, n)
	}
})
