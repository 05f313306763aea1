package e2e_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
)

// churnJS replaces the waiting page's Continue form with a copy of itself
// every few milliseconds for the page's first 2 seconds (or until a mouse
// button goes down on it): the node the agent found is gone by the time it
// clicks it ("No node with given id found"), as when the document is
// updated right after a navigation on a busy machine. The agent's press
// comes well within those 2 seconds (the approval takes milliseconds); the
// control itself is always there.
const churnJS = `<script>(function () {
  var stop = false, until = Date.now() + 2000;
  document.addEventListener("mousedown", function () { stop = true; }, true);
  (function churn() {
    if (stop || Date.now() > until) return;
    var f = document.getElementById("opsgate-continue");
    if (f) f.replaceWith(f.cloneNode(true));
    setTimeout(churn, 3);
  })();
})();</script>`

// replaceWaiting replaces k's waiting page with h; every other refusal stays
// the kit's own.
func replaceWaiting(k *webkit.Kit, h http.HandlerFunc) {
	k.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := pages.WaitingOf(r); !ok {
			k.Refuse(w, r)
			return
		}
		h(w, r)
	})
}

// churningWaiting is the kit's own waiting page with churnJS added.
func churningWaiting(w http.ResponseWriter, r *http.Request) {
	v, _ := pages.WaitingOf(r)
	rec := httptest.NewRecorder()
	pages.Waiting(rec, r, v, templates.Chrome{})
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	w.Write(bytes.Replace(rec.Body.Bytes(), []byte("</body>"), []byte(churnJS+"</body>"), 1))
}

// TestContinueClickSurvivesDocumentUpdates: the agent presses the waiting
// page's Continue (A41) even when the control's node is replaced between
// finding it and clicking it; it looks again instead of reporting "no
// Continue control on the page" (refagent clickContinue).
func TestContinueClickSurvivesDocumentUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	if browserErr != nil {
		t.Fatalf("chromium could not start: %v", browserErr)
	}
	t.Parallel()
	s := newMxSite(t, mxRouters[0], mxProtections[0], func(k *webkit.Kit) { replaceWaiting(k, churningWaiting) })
	page := "/orders/" + mxOrder
	a, tab := mxAgent(t, s, page)
	const rounds = 3
	for i := range rounds {
		a.NewTask()
		in(t, tab, chromedp.Navigate(s.url+strings.Replace(page, mxOrder, mxOrder+string(rune('a'+i)), 1)))
		in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
		waitingPage(t, tab)
		out := s.approve(t, a, &mxApprover{})
		if out.Result != refagent.Performed {
			t.Fatalf("round %d: outcome %q, want performed", i+1, out.Result)
		}
		waitText(t, tab, "#done", "Exchanged order")
	}
	time.Sleep(300 * time.Millisecond)
	if ex, _, _, _, runs, _ := s.counts(); runs != rounds || len(ex) != rounds {
		t.Errorf("the handler ran %d times (%q), want %d", runs, ex, rounds)
	}
}

// TestNoContinueControlFailsClearly: a waiting page without a Continue
// control still makes the agent's press fail, once its bound has passed,
// saying so (the retry above does not hide a real absence).
func TestNoContinueControlFailsClearly(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "chromium", chromiumPath+" not found")
	}
	if browserErr != nil {
		t.Fatalf("chromium could not start: %v", browserErr)
	}
	t.Parallel()
	noControl := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`<!doctype html><div id="opsgate-waiting"><h1>Waiting for approval</h1><p>No way to continue here.</p></div>`))
	})
	s := newMxSite(t, mxRouters[0], mxProtections[0], func(k *webkit.Kit) { replaceWaiting(k, noControl) })
	page := "/orders/" + mxOrder
	a, tab := mxAgent(t, s, page)
	in(t, tab, chromedp.Click(chromedp.CSS("#exchange button"), chromedp.NodeVisible))
	waitingPage(t, tab)
	start := time.Now()
	out, err := a.Approve(ctxTimeout(t, 30*time.Second), &mxApprover{})
	if err == nil || !strings.Contains(err.Error(), "no Continue control on the page within 10s") {
		t.Fatalf("Approve on a page without Continue: %+v, %v; want the error naming the missing control", out, err)
	}
	if d := time.Since(start); d < 9*time.Second || d > 20*time.Second {
		t.Errorf("the press gave up after %s, want about 10s", d)
	}
	if _, _, _, _, runs, _ := s.counts(); runs != 0 {
		t.Errorf("the handler ran %d times", runs)
	}
}
