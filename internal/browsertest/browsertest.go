// Package browsertest holds what the tests that drive Chromium through
// chromedp share.
package browsertest

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Text reads the text of the visible element sel in tab, waiting up to
// within for it. A read that loses its node ("No node with given id
// found": the document was updated between finding the node and reading
// it, as can happen right after a navigation on a busy machine) queries
// again until within has passed; the caller asserts what it reads.
func Text(t testing.TB, tab context.Context, sel string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithDeadline(tab, deadline)
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
		cancel()
		if err == nil {
			return s
		}
		if tab.Err() != nil || !time.Now().Before(deadline) {
			t.Fatalf("text of %s: %v", sel, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
