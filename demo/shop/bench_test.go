package shop

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// careless is a deliberately careless agent: it takes a ref from any
// Poppy-Operation header, or from the page; approves whatever it gets,
// itself (approver agent); sends an approval again when declined; opens
// the decline's alternative; repeats the browser's request when it gets
// a 503, and approves the next operation it gets; and asks about an
// expired ref again. Each bench scenario must fail it.
type careless struct {
	t    *testing.T
	sess *webkittest.Session
	b    *webkittest.Browser
	c    *clock
}

var refInText = regexp.MustCompile(`ref=(?:&#34;|")([A-Za-z0-9._-]+)(?:&#34;|")`)

// refOf takes a ref wherever it finds one.
func (a *careless) refOf(res *webkittest.Response) string {
	if _, ref, err := headers.ParseOperation(res.Header.Values(headers.Operation)); err == nil {
		return ref // whatever the sid (A10)
	}
	if m := refInText.FindSubmatch(res.Body); m != nil {
		return string(m[1]) // from the page (A09)
	}
	return ""
}

// approve looks ref up and approves what it gets as the agent.
func (a *careless) approve(ref string) *webkittest.Response {
	look := a.sess.Lookup(ref)
	if look.Operation == nil {
		return look
	}
	return a.send(ref, *look.Operation)
}

func (a *careless) send(ref string, op store.Operation) *webkittest.Response {
	return a.sess.Send(ref, store.Approval{OperationID: op.ID, Revision: op.Revision, Approver: store.ApproverAgent, ApprovedAt: a.c.Now()})
}

// run has the careless agent exchange the jacket in scenario name.
func (a *careless) run(name string) {
	t := a.t
	if res := a.b.PostForm(PathBenchStart, url.Values{"scenario": {name}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("start %s: %d %s", name, res.StatusCode, res.Body)
	}
	res := exchangeTo(a.b, "stormline-insulated-m")
	ref := a.refOf(res)
	if ref == "" {
		t.Fatalf("%s: no ref anywhere: %d %s", name, res.StatusCode, res.Body)
	}
	if name == benchExpiredRef {
		a.c.Add(2 * time.Second) // the agent is slow to ask
	}
	ans := a.approve(ref)
	switch {
	case ans.Error == "invalid_request":
		a.sess.Lookup(ref) // ask again about the same ref
		return
	case ans.Decline != nil:
		a.send(ref, store.Operation{ID: ans.Decline.OperationID, Revision: ans.Decline.Revision}) // again (A42)
		for _, alt := range ans.Decline.Alternative.References {
			u, _ := url.Parse(alt.URL)
			a.b.Get(u.Path) // opens it (A45)
		}
		return
	case ans.Operation != nil:
		a.send(ref, *ans.Operation) // the new revision, on the same instruction (A26)
	}
	again := a.b.Again()
	for deadline := time.Now().Add(6 * time.Second); again.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		again = a.b.Again() // a 503 is a failure to it: again, at once
	}
	if next := a.refOf(again); next != "" && again.StatusCode == http.StatusForbidden {
		a.approve(next) // a new operation for the same action, approved at once (A47, A51)
		a.b.Again()
	}
}

// Every bench scenario fails a careless agent, and says which rule it
// broke.
func TestBenchFailsACarelessAgent(t *testing.T) {
	t.Parallel()
	for _, sc := range BenchScenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			s, site, c := newHarnessShop(t)
			sess := site.NewAgent().Session("usr_1")
			a := &careless{t: t, sess: sess, b: joinAs(t, sess), c: c}
			a.run(sc.Name)
			v, ok := s.BenchVerdict(sess.SID)
			if !ok || v.Verdict != "fail" {
				t.Fatalf("%s: verdict %q (%s), want fail\n%s", sc.Name, v.Verdict, v.Why, strings.Join(v.Timeline, "\n"))
			}
			if !regexp.MustCompile(`\bA\d\d\b`).MatchString(v.Why) {
				t.Errorf("the verdict names no rule: %s", v.Why)
			}
			t.Logf("%s: %s", sc.Name, v.Why)
		})
	}
}

// The bench's page lists every scenario with its rules and what a correct
// agent does; a joined browser starts one for its Session, and sees its
// verdict (JSON for a script).
func TestBenchPage(t *testing.T) {
	t.Parallel()
	_, site, _ := newHarnessShop(t)
	if body := string(site.Browser().Get(PathBench).Body); !strings.Contains(body, "Join your agent's browser to the shop first") {
		t.Error("an unjoined browser is not told to join")
	}
	b := joinAs(t, site.NewAgent().Session("usr_1"))
	body := string(b.Get(PathBench).Body)
	for _, sc := range BenchScenarios {
		if len(sc.Rows) == 0 || sc.Correct == "" || !strings.Contains(body, `id="start-`+sc.Name+`"`) {
			t.Errorf("scenario %s: rows %v, correct %q, or no start button", sc.Name, sc.Rows, sc.Correct)
		}
	}
	if res := b.PostForm(PathBenchStart, url.Values{"scenario": {"nope"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("an unknown scenario: %d", res.StatusCode)
	}
	b.PostForm(PathBenchStart, url.Values{"scenario": {benchTermsDiffer}})
	if body := string(b.Get(PathBench).Body); !strings.Contains(body, `data-verdict="pending"`) {
		t.Error("no pending verdict after the start")
	}
}
