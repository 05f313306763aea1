package opsendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// Answers the spec fixes exactly, each of which an earlier version of the
// kit got wrong.

func TestCheck2AnswersForTheRefsOperation(t *testing.T) {
	t.Parallel()
	t.Run("W113 W136 an approval naming another operation, sent with a performed operation's ref, gets that operation's status", func(t *testing.T) {
		f := newFixture(t)
		x := f.issue("out", "x", jacket)
		y := f.issue("out", "y", `{"b":2}`)
		f.post("out", y.Ref, approvalOf(y.Operation.ID, y.Operation.Revision, "")).expect(t, 204, "")
		f.perform("out", "y", `{"b":2}`, store.OutcomePerformed)

		res := f.post("out", y.Ref, approvalOf(x.Operation.ID, x.Operation.Revision, ""))
		res.expect(t, 200, "")
		if res.body["operation_id"] != y.Operation.ID || res.body["status"] != "performed" {
			t.Fatalf("answer %s; want {%q, performed}: check 2 is about the ref's operation", res.raw, y.Operation.ID)
		}
		// X was never approved: it still waits.
		f.post("out", x.Ref, "").expect(t, 403, "approval_required")
	})
	t.Run("W113 W143 the same while the ref's operation is performing", func(t *testing.T) {
		f := newFixture(t)
		x := f.issue("out", "x", jacket)
		y := f.issue("out", "y", `{"b":2}`)
		f.post("out", y.Ref, approvalOf(y.Operation.ID, y.Operation.Revision, "")).expect(t, 204, "")
		f.perform("out", "y", `{"b":2}`, 0) // claimed, not finished
		res := f.post("out", y.Ref, approvalOf(x.Operation.ID, x.Operation.Revision, ""))
		res.expect(t, 200, "")
		if res.body["operation_id"] != y.Operation.ID || res.body["status"] != "performing" {
			t.Fatalf("answer %s; want {%q, performing}", res.raw, y.Operation.ID)
		}
	})
	t.Run("W116 W122 an approval whose operation_id isn't the ref's operation fails check 3", func(t *testing.T) {
		f := newFixture(t)
		x := f.issue("out", "x", jacket)
		y := f.issue("out", "y", `{"b":2}`)
		res := f.post("out", x.Ref, approvalOf(y.Operation.ID, y.Operation.Revision, ""))
		res.expect(t, 403, "approval_required")
		op := res.operation(t)
		if op["operation_id"] != x.Operation.ID || op["revision"] == y.Operation.Revision {
			t.Fatalf("operation %v; want the ref's operation %s with a revision other than the approval's", op, x.Operation.ID)
		}
		f.post("out", x.Ref, "").expect(t, 403, "approval_required") // nothing recorded for X
	})
}

func TestUsedUpRevision(t *testing.T) {
	t.Parallel()
	t.Run("W98 W122 W90 an approval of a revision used up without performing is a check-3 failure, never a 204 that records nothing", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("out", "k", jacket)
		a := approvalOf(iss.Operation.ID, iss.Operation.Revision, "")
		f.post("out", iss.Ref, a).expect(t, 204, "")
		f.perform("out", "k", jacket, store.OutcomeNotPerformed) // the handler answered 4xx

		// A lookup offers a revision that can still be approved.
		res := f.post("out", iss.Ref, "")
		res.expect(t, 403, "approval_required")
		offered := res.operation(t)
		if offered["revision"] == iss.Operation.Revision {
			t.Fatalf("lookup offered the used-up revision %v again", offered["revision"])
		}
		// Approving the used-up revision again: 403 with a new revision.
		res = f.post("out", iss.Ref, a)
		res.expect(t, 403, "approval_required")
		if rev := res.operation(t)["revision"]; rev == iss.Operation.Revision {
			t.Fatalf("W122: answered with the approval's own revision %v", rev)
		}
		// Approving the offered revision records it, and the browser's next
		// repeat performs: no loop.
		f.post("out", iss.Ref, approvalOf(iss.Operation.ID, fmt.Sprint(offered["revision"]), "")).expect(t, 204, "")
		if res := f.post("out", iss.Ref, ""); res.status != 200 || res.body["status"] != "approved" {
			t.Fatalf("after approving the offered revision: %d %s", res.status, res.raw)
		}
		f.perform("out", "k", jacket, store.OutcomePerformed)
		if res := f.post("out", iss.Ref, ""); res.status != 200 || res.body["status"] != "performed" {
			t.Fatalf("after the repeat: %d %s", res.status, res.raw)
		}
	})
}

func TestRefsTheCompanyNeverReturned(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	iss := f.issue("out", "k", jacket)
	for _, ref := range []string{
		iss.Operation.ID + ".madeUp",
		iss.Operation.ID + ".1791487200-k3Jd9Qx2mW8v",
		iss.Operation.ID + "." + iss.Operation.Revision + "x",
	} {
		t.Run("§4 lookup "+ref, func(t *testing.T) {
			f.post("out", ref, "").expect(t, 400, "invalid_request")
		})
		t.Run("§4 approval "+ref, func(t *testing.T) {
			f.post("out", ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 400, "invalid_request")
			// Nothing was recorded: the real ref still waits.
			f.post("out", iss.Ref, "").expect(t, 403, "approval_required")
		})
	}
}

func TestEvery401CarriesAChallenge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, tok, want string }{
		{"W70 no Poppy-Session", "", `Poppy-Session error="invalid_session"`},
		{"W70 unknown Session", "forged", `Poppy-Session error="invalid_session"`},
		{"access token of another agent", "bad-token", `Bearer error="invalid_token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			res := f.do(tc.tok, `{"ref":"a.b"}`, "", nil)
			if res.status != http.StatusUnauthorized {
				t.Fatalf("status %d", res.status)
			}
			if got := res.header.Get("WWW-Authenticate"); got != tc.want {
				t.Fatalf("WWW-Authenticate = %q, want %q (RFC 9110 §15.5.2)", got, tc.want)
			}
		})
	}
	t.Run("W44 the sign-in challenge", func(t *testing.T) {
		f := newFixture(t)
		iss := f.issue("in", "k", jacket)
		res := f.post("out", iss.Ref, "")
		res.expect(t, 401, "sign_in_required")
		if got := res.header.Get("WWW-Authenticate"); got != `Bearer error="sign_in_required"` {
			t.Fatalf("WWW-Authenticate = %q", got)
		}
	})
}

// §6: "MUST NOT reject or decline an approval because an optional member is
// missing or because it doesn't recognize the input_type".
func TestMalformedOptionalMembersAreIgnored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, extra, member string }{
		{"W83 input_type a Token", `, input_type=tap`, "input_type"},
		{"W83 input_type a Boolean", `, input_type=?1`, "input_type"},
		{"W82 approved_at negative", `, approved_at=-1`, "approved_at"},
		{"W82 reference with a dot", `, reference="a.b"`, "reference"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			var logs bytes.Buffer
			f.ep.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			iss := f.issue("out", "k", jacket)
			h := fmt.Sprintf(`operation_id=%q, revision=%q, approver="user"%s`, iss.Operation.ID, iss.Operation.Revision, tc.extra)
			f.post("out", iss.Ref, h).expect(t, 204, "")
			rec, _, _ := storedriver.Steps(f.store).Lookup(context.Background(), sessions["out"].Owner(), iss.Ref, f.clock())
			if len(rec.Approvals) != 1 {
				t.Fatalf("approvals = %+v", rec.Approvals)
			}
			a := rec.Approvals[0]
			if a.InputType != "" || a.Reference != "" || !a.ApprovedAt.IsZero() {
				t.Fatalf("the malformed member was kept: %+v", a)
			}
			if !strings.Contains(logs.String(), "member="+tc.member) {
				t.Fatalf("no log line names the ignored member %s: %q", tc.member, logs.String())
			}
		})
	}
}

// W50: the answer to a lookup is the same signed in and signed out: same
// status, headers and body, apart from the operation's own IDs.
func TestSameAnswerSignedInAndOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	out := f.issue("out", "k", jacket)
	in := f.issue("in", "k", jacket)
	a, b := f.post("out", out.Ref, ""), f.post("in", in.Ref, "")
	normalise := func(r response, iss storedriver.TakeResult) string {
		raw := strings.ReplaceAll(r.raw, iss.Operation.ID, "OP")
		raw = strings.ReplaceAll(raw, iss.Operation.Revision, "REV")
		h := r.header.Clone()
		h.Del("Content-Length")
		hb, _ := json.Marshal(h)
		return fmt.Sprintf("%d %s %s", r.status, hb, raw)
	}
	if x, y := normalise(a, out), normalise(b, in); x != y {
		t.Fatalf("W50: signed out answered\n%s\nsigned in answered\n%s", x, y)
	}
	// And once each is approved and performed.
	f.post("out", out.Ref, approvalOf(out.Operation.ID, out.Operation.Revision, "")).expect(t, 204, "")
	f.post("in", in.Ref, approvalOf(in.Operation.ID, in.Operation.Revision, "")).expect(t, 204, "")
	for _, tc := range []struct {
		tok string
		iss storedriver.TakeResult
	}{{"out", out}, {"in", in}} {
		f.perform(tc.tok, "k", jacket, store.OutcomePerformed)
	}
	a, b = f.post("out", out.Ref, ""), f.post("in", in.Ref, "")
	if x, y := normalise(a, out), normalise(b, in); x != y {
		t.Fatalf("W50: performed, signed out answered\n%s\nsigned in answered\n%s", x, y)
	}
}

// endedAuth is fakeAuth where some Sessions have ended.
type endedAuth struct {
	fakeAuth
	ended map[string]bool
}

func (e endedAuth) Authenticate(ctx context.Context, r *http.Request) (webkit.Session, error) {
	if e.ended[r.Header.Get(headers.Session)] {
		return webkit.Session{}, fmt.Errorf("%w: the Session has ended", ErrUnauthenticated)
	}
	return e.fakeAuth.Authenticate(ctx, r)
}

// W41: an operation can be approved in a Session that starts after the one
// that returned it has ended.
func TestApprovedAfterTheSessionEnded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	iss := f.issue("out", "k", jacket)
	auth := endedAuth{fakeAuth: fakeAuth{"out": sessions["out"], "later": {ID: "ses_later", Agent: agentA, User: "usr_1"}}, ended: map[string]bool{}}
	f.ep.Auth = auth
	auth.ended["out"] = true
	res := f.post("out", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, ""))
	res.expect(t, 401, "invalid_session") // the ended Session itself can't
	f.post("later", iss.Ref, "").expect(t, 403, "approval_required")
	f.post("later", iss.Ref, approvalOf(iss.Operation.ID, iss.Operation.Revision, "")).expect(t, 204, "")
	if res := f.post("later", iss.Ref, ""); res.body["status"] != "approved" {
		t.Fatalf("W41: after approving in the later Session: %s", res.raw)
	}
}

// W88: the endpoint accepts no approval of another interface's operation.
// The kit's endpoint knows only the operations its website's store issued;
// an operation the website's API issued (here, from a store of its own)
// is not found, and nothing is recorded anywhere.
func TestAnotherInterfacesOperation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	api := memstore.New(memstore.Config{})
	owner := sessions["out"].Owner()
	apiOp, err := storetest.Issue(context.Background(), api.Steps(), owner, storedriver.TakeRequest{Key: "k", Terms: []byte(jacket), Lifetime: 10 * time.Minute}, f.clock())
	if err != nil {
		t.Fatal(err)
	}
	f.post("out", apiOp.Ref, approvalOf(apiOp.Operation.ID, apiOp.Operation.Revision, "")).expect(t, 400, "invalid_request")
	f.post("out", apiOp.Ref, "").expect(t, 400, "invalid_request")
	if rec, found, _ := api.Lookup(context.Background(), owner, apiOp.Ref, f.clock()); !found || len(rec.Approvals) != 0 {
		t.Fatalf("W88: the API's operation got an approval through endpoint: %+v", rec)
	}
}
