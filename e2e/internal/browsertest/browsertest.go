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

// ChromiumPath is Debian's Chromium, the browser every test drives.
const ChromiumPath = "/usr/bin/chromium"

// Tab starts a headless Chromium with a fresh user-data dir and returns a
// tab whose context ends after within; the browser is closed when the
// test ends.
func Tab(t testing.TB, within time.Duration, opts ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	all := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ChromiumPath), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}, opts...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), all...)
	tab, cancel := chromedp.NewContext(actx)
	tab, cancelTimeout := context.WithTimeout(tab, within)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	if err := chromedp.Do(tab); err != nil { // start it
		t.Fatal(err)
	}
	return tab
}
