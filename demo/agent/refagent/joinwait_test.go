package refagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// dropJoinClicks has every join page the tab loads swallow its button's
// first n clicks, as a busy browser that has not shown the page yet drops
// them: the form is not submitted.
func dropJoinClicks(t *testing.T, tab context.Context, n int) {
	t.Helper()
	js := fmt.Sprintf(`if (location.pathname.startsWith("/join/")) {
	let dropped = 0;
	addEventListener("click", e => {
		if (e.target.id === "join" && dropped < %d) { dropped++; e.preventDefault(); e.stopImmediatePropagation(); }
	}, true);
}`, n)
	if _, err := chromedp.Call(tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: js}); err != nil {
		t.Fatal(err)
	}
}

// A join whose first click the browser did not take is pressed once more
// and lands on the shop; a click it took is never pressed again.
func TestJoinClickDroppedOnce(t *testing.T) {
	tab := chromium(t)
	shopURL := joinShop(t)
	var log syncBuffer
	a := agentFor(t, Config{Shop: shopURL, Browser: tab, StepTimeout: 20 * time.Second, Log: &log})
	if _, err := a.Join(t.Context(), JoinOptions{}); err != nil {
		t.Fatalf("a join with every click taken: %v", err)
	}
	if strings.Contains(log.String(), "once more") {
		t.Fatalf("a click the browser took was pressed again:\n%s", log.String())
	}

	dropJoinClicks(t, tab, 1)
	start := time.Now()
	s, err := a.Join(t.Context(), JoinOptions{})
	if err != nil {
		t.Fatalf("a join whose first click was dropped: %v\n%s", err, log.String())
	}
	if took := time.Since(start); took < joinClickGrace {
		t.Errorf("the join took %v, under joinClickGrace (%v): the first click was not the dropped one", took, joinClickGrace)
	}
	if n := strings.Count(log.String(), "pressing it once more"); n != 1 {
		t.Errorf("pressed once more %d times, want 1:\n%s", n, log.String())
	}
	at, err := chromedp.Run(tab, chromedp.Location())
	if err != nil || !strings.HasPrefix(at, shopURL+"/") {
		t.Errorf("the browser is at %q (%v), want the shop", at, err)
	}
	a.mu.Lock()
	joined := a.joined[s.SID]
	a.mu.Unlock()
	if !joined {
		t.Errorf("Session %s is not counted as joined (A10)", s.SID)
	}
}

// A browser that takes no click gets two presses and then an error that
// says what it showed, within the step's timeout.
func TestJoinClickNeverTaken(t *testing.T) {
	tab := chromium(t)
	shopURL := joinShop(t)
	var log syncBuffer
	const step = 8 * time.Second
	a := agentFor(t, Config{Shop: shopURL, Browser: tab, StepTimeout: step, Log: &log})
	dropJoinClicks(t, tab, 1000)
	start := time.Now()
	_, err := a.Join(t.Context(), JoinOptions{})
	took := time.Since(start)
	if err == nil {
		t.Fatal("the join succeeded with every click dropped")
	}
	for _, want := range []string{"never submitted the join form (the button was pressed 2 times)", "still shows the join page", a.disc.Join, "within 8s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	// Bounded by the step, not by the test: a busy machine adds some.
	if took > 3*step {
		t.Errorf("the join took %v, want about its StepTimeout %v", took, step)
	}
	t.Log(err)
}

// agentFor is a reference agent of cfg, closed when t ends.
func agentFor(t *testing.T, cfg Config) *Agent {
	t.Helper()
	a, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}
