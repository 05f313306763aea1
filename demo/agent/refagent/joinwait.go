package refagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// joinClickGrace is how long after pressing the join page's button the
// agent waits for the browser to submit the form before pressing it once
// more. A busy browser can drop a click that comes before it has shown
// the page; the form's own submit event says whether it took the click,
// so a click it took is never repeated (the assertion is single-use).
const joinClickGrace = 5 * time.Second

// joinPoll is how often the agent looks at the page the browser shows
// while a join is under way.
const joinPoll = 50 * time.Millisecond

// joinResult is what the browser shows once the join form's POST has
// been answered: the page it is at and, when its network events told it,
// the response of that page (after the website's 303, return_to's).
type joinResult struct {
	URL     string
	Status  int // 0: the browser did not say
	Headers network.Headers
}

// joinWatch records, from the tab's network events, the document request
// the join form sends and its last response. Its fields are guarded by mu:
// the listener runs on the tab's reading goroutine.
type joinWatch struct {
	mu      sync.Mutex
	id      network.RequestID // the form's POST; "" until the browser sends it
	url     string            // the URL of the last response to it
	status  int
	headers network.Headers
	failed  string // the browser's error text when the request failed
}

func (w *joinWatch) onEvent(ev any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		// The join page has one form, and the agent's click is the only
		// thing that posts a document in this tab while it is shown. A
		// redirect (the website's 303) keeps the request's id.
		if w.id == "" && ev.Type == network.ResourceTypeDocument && ev.Request.Method == http.MethodPost {
			w.id = ev.RequestID
		}
	case *network.EventResponseReceived:
		if ev.RequestID == w.id && w.id != "" {
			w.url, w.status, w.headers = ev.Response.URL, int(ev.Response.Status), ev.Response.Headers
		}
	case *network.EventLoadingFailed:
		if ev.RequestID == w.id && w.id != "" {
			w.failed = ev.ErrorText
		}
	}
}

func (w *joinWatch) seen() (sent bool, status int, failed string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id != "", w.status, w.failed
}

// joinPageState is what the page the browser shows says about itself.
type joinPageState struct {
	URL       string `json:"url"`
	Ready     string `json:"ready"`     // document.readyState
	Submitted bool   `json:"submitted"` // the join form's submit event fired
	Status    int    `json:"status"`    // the navigation's responseStatus; 0 when unknown
}

// joinMarkJS has the join form note its submit event on the page, so that
// the agent can tell a click the browser took from one it dropped. It
// changes nothing the form sends.
const joinMarkJS = `(() => {
	const f = document.getElementById("join-form");
	if (!f) return false;
	f.addEventListener("submit", () => { window.refagentJoinSubmitted = true; });
	return true;
})()`

const joinStateJS = `(() => {
	const n = performance.getEntriesByType("navigation")[0];
	return {url: location.href, ready: document.readyState, submitted: window.refagentJoinSubmitted === true,
		status: (n && n.responseStatus) || 0};
})()`

// submitJoin presses the join page's button (the browser is at pageURL,
// the join page) and waits, within ctx, for what a person at the browser
// would see: the page the join's answer leaves the browser at, loaded past
// "loading". It presses once more if the browser did not take the first
// click (the form sent nothing within joinClickGrace). A timeout says how
// far the join got.
func (a *Agent) submitJoin(ctx context.Context, pageURL string) (joinResult, error) {
	w := &joinWatch{}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := chromedp.Listen(lctx, w.onEvent); err != nil {
		return joinResult{}, fmt.Errorf("refagent: join: %w", err)
	}
	// The form first: a busy browser may not have built the page yet when
	// Navigate returns (pressing the button waited for it as well).
	if err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.ID("join-form"))); err != nil {
		return joinResult{}, fmt.Errorf("refagent: join: the join page never showed its join form: %w", err)
	}
	if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](joinMarkJS)); err != nil || !ok {
		return joinResult{}, fmt.Errorf("refagent: join: the join page shows no join form (%v)", err)
	}
	click := func() error {
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("join"), chromedp.NodeVisible)); err != nil {
			return fmt.Errorf("refagent: join: pressing the join page's button: %w", err)
		}
		return nil
	}
	if err := click(); err != nil {
		return joinResult{}, err
	}
	clicks, clicked := 1, time.Now()
	var st joinPageState // the last state the page told
	var stErr error      // the last read's error
	var shown time.Time  // when the browser first showed the answer's page
	for {
		sent, status, failed := w.seen()
		if failed != "" {
			return joinResult{}, fmt.Errorf("refagent: join: the browser's request to %s failed: %s", a.disc.Join, failed)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := chromedp.Run(pctx, chromedp.Evaluate[joinPageState](joinStateJS))
		cancel()
		// st stays the last state read, for the error at the end.
		if stErr = err; err == nil {
			st = got
		}
		// Between the form's submission and the next page's first
		// script, the page can have no context to evaluate in: that is a
		// join under way, not an error.
		if stErr == nil && st.URL != pageURL && st.Ready != "loading" {
			// The page is shown. Its response's headers (a refusal's
			// WWW-Authenticate) come from the tab's response event, which
			// has come before in all but a rare case: give that one a
			// second, then go by the page alone.
			if shown.IsZero() {
				shown = time.Now()
			}
			if status != 0 || st.Status == http.StatusOK || time.Since(shown) >= time.Second {
				break
			}
		}
		if stErr == nil && st.URL == pageURL && !st.Submitted && !sent && clicks == 1 && time.Since(clicked) >= joinClickGrace {
			a.step("the browser did not take the click on the join page within %s; pressing it once more", joinClickGrace)
			if err := click(); err != nil {
				return joinResult{}, err
			}
			clicks, clicked = 2, time.Now()
		}
		if !waitJoin(ctx, joinPoll) {
			return joinResult{}, a.joinTimeout(pageURL, clicks, sent, status, st, stErr, ctx.Err())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != 0 {
		return joinResult{URL: w.url, Status: w.status, Headers: w.headers}, nil
	}
	return joinResult{URL: st.URL, Status: st.Status}, nil
}

// waitJoin sleeps for d; false when ctx ends first.
func waitJoin(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// joinTimeout says what the browser showed when the join's wait ended.
// It names the join page by its path prefix only: its handle is
// single-use, but not a thing to print.
func (a *Agent) joinTimeout(pageURL string, clicks int, sent bool, status int, st joinPageState, stErr, err error) error {
	var seen string
	switch {
	case !sent && !st.Submitted:
		seen = "the browser never submitted the join form (the button was pressed once)"
		if clicks > 1 {
			seen = fmt.Sprintf("the browser never submitted the join form (the button was pressed %d times)", clicks)
		}
	case status == 0:
		seen = "the browser submitted the join form and got no answer"
	default:
		seen = fmt.Sprintf("the browser got %d %s", status, http.StatusText(status))
	}
	switch {
	case st.URL == "":
		seen += fmt.Sprintf("; the page could not be read (%v)", stErr)
	case st.URL == pageURL:
		seen += "; it still shows the join page " + a.local + "/join/…"
	default:
		seen += fmt.Sprintf("; it shows %s, still %s", st.URL, st.Ready)
	}
	if err == nil {
		err = errors.New("the wait ended")
	}
	return fmt.Errorf("refagent: join: no answer from %s within %s: %s: %w", a.disc.Join, a.cfg.StepTimeout, seen, err)
}
