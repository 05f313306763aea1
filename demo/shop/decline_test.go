package shop

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// TestW130W131DeclineRevealsNothing runs the shop's decline hook through
// the real endpoint: an agent's approval of a cancellation is declined
// with a reason that says nothing the Session couldn't already see (W130):
// the same words for every agent, User and day, none of the account's
// details, no rule or amount, and an alternative on the shop's own public
// page. The body has no reason code (W131) and nothing is recorded (W134).
func TestW130W131DeclineRevealsNothing(t *testing.T) {
	t.Parallel()
	s, site, c := newHarnessShop(t)
	acct, _ := s.DB().Account(shopdb.DemoAccount)
	secret := []string{acct.Name, acct.Email, shopdb.DemoAccount, "rule", "risk", "$"}

	var first []byte
	for i, user := range []string{"usr_1", "usr_2", "usr_1"} {
		agent := site.NewAgent()
		sess := agent.SignedInSession(user, shopdb.DemoAccount)
		b := joinAs(t, sess)
		res := b.PostForm("/account/subscription/cancel", nil)
		if res.Ref == "" {
			t.Fatalf("cancel: %d %s", res.StatusCode, res.Body)
		}
		ans := sess.ApproveAs(res.Ref, store.ApproverAgent)
		if ans.StatusCode != 403 || ans.Error != "approval_declined" || ans.Decline == nil {
			t.Fatalf("agent approval: %d %s", ans.StatusCode, ans.Body)
		}
		var members map[string]json.RawMessage
		json.Unmarshal(ans.Body, &members)
		keys := make([]string, 0, len(members))
		for k := range members {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := []string{"alternative", "error", "operation_id", "reason", "revision"}; !slices.Equal(keys, want) {
			t.Errorf("W131: decline members %v, want %v", keys, want)
		}
		d := ans.Decline
		shown, _ := json.Marshal(struct {
			R string
			A *webkit.Alternative
		}{d.Reason, d.Alternative})
		for _, w := range secret {
			if strings.Contains(strings.ToLower(d.Reason+" "+d.Alternative.Instructions), strings.ToLower(w)) {
				t.Errorf("W130: the decline mentions %q: %s", w, shown)
			}
		}
		for _, ref := range d.Alternative.References {
			if !strings.HasPrefix(ref.URL, site.Origin+"/") {
				t.Errorf("W130: the alternative points off the shop's own pages: %s", ref.URL)
			}
		}
		if first == nil {
			first = shown
		} else if string(shown) != string(first) {
			t.Errorf("W130: the decline differs between Sessions (%d): %s vs %s", i, shown, first)
		}
		if look := sess.Lookup(res.Ref); look.Error != "approval_required" {
			t.Errorf("W134: after the decline: %d %s", look.StatusCode, look.Body)
		}
		c.Add(3 * 24 * time.Hour) // another day: another refund, the same words
	}

	// The user's own approval of the same cancellation is not declined,
	// and neither is an agent's approval of a resubscription.
	agent := site.NewAgent()
	sess := agent.SignedInSession("usr_9", shopdb.DemoAccount)
	b := joinAs(t, sess)
	perform(t, sess, b, b.PostForm("/account/subscription/cancel", nil))
	res := b.PostForm("/account/subscription/resubscribe", nil)
	if ans := sess.ApproveAs(res.Ref, store.ApproverAgent); ans.StatusCode != 204 {
		t.Errorf("an agent approval of a resubscription: %d %s", ans.StatusCode, ans.Body)
	}
}
