package refagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/internal/headers"
)

// Reference is a ref the agent took from a Poppy-Operation header of a
// response its own browser received (§4, A08), with the request that got
// it: the action the browser just took (A27).
type Reference struct {
	SID, Ref string
	// Method, URL and Body are the browser's request: what the agent
	// asked for (§8.2).
	Method, URL string
	Body        []byte
	// Resource is the CDP resource type: "Document" for a page load or form
	// submission, "Fetch" or "XHR" for a page script's request.
	Resource string
	Status   int
	At       time.Time

	tab     *tab
	handled bool
}

// ShortRef is ref as the agent's steps name it after printing it once in
// full: its first characters and its length.
func ShortRef(ref string) string {
	const keep = 24
	if len(ref) <= keep+8 {
		return ref
	}
	return fmt.Sprintf("%s… (%d characters)", ref[:keep], len(ref))
}

// Action is "METHOD URL": which action a reference is for, as the agent
// sees it (§5: "what it asked for is the action its browser just took").
func (r *Reference) Action() string { return r.Method + " " + r.URL }

// Response is one response the agent's browser received.
type Response struct {
	Method, URL string
	Status      int
	Resource    string
	Operation   bool // it carried a Poppy-Operation header
	At          time.Time
	Tab         string
}

type tab struct {
	name  string
	ctx   context.Context
	reqs  map[network.RequestID]request
	extra map[network.RequestID]network.Headers // extra-info headers before their response
}

type request struct {
	method, url string
	body        []byte
	status      int    // set by responseReceived
	resource    string // set by responseReceived
}

// NewTab opens another tab in the agent's browser (it shares the
// browser's cookies, so its join) and watches its network events too.
// Cancel it to close the tab.
func (a *Agent) NewTab() (context.Context, context.CancelFunc, error) {
	ctx, cancel := chromedp.NewContext(a.cfg.Browser)
	a.mu.Lock()
	name := fmt.Sprintf("tab %d", len(a.tabs)+1)
	a.mu.Unlock()
	if _, err := a.watch(ctx, name); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// watch enables the network domain on a tab and reads its events (A08:
// the only place references come from).
func (a *Agent) watch(ctx context.Context, name string) (*tab, error) {
	t := &tab{name: name, ctx: ctx, reqs: map[network.RequestID]request{}, extra: map[network.RequestID]network.Headers{}}
	maxPost := int64(64 << 10)
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{MaxPostDataSize: &maxPost}); err != nil {
		return nil, fmt.Errorf("refagent: network.enable: %w", err)
	}
	// Listen calls fn on the tab's reading goroutine, in order: it must
	// be quick and run no command. It only records, under the lock.
	if err := chromedp.Listen(ctx, func(ev any) { a.onEvent(t, ev) }); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.tabs = append(a.tabs, t)
	a.mu.Unlock()
	return t, nil
}

func (a *Agent) onEvent(t *tab, ev any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		if ev.RedirectResponse != nil {
			// The redirected request's response (a 303 after a form
			// POST) arrives here, not in responseReceived.
			if prev, ok := t.reqs[ev.RequestID]; ok {
				a.onResponseLocked(t, string(ev.RequestID)+"#"+ev.RedirectResponse.URL, prev, int(ev.RedirectResponse.Status), string(ev.Type), ev.RedirectResponse.Headers)
			}
		}
		var body []byte
		for _, e := range ev.Request.PostDataEntries {
			body = append(body, e.Bytes...)
		}
		t.reqs[ev.RequestID] = request{method: ev.Request.Method, url: ev.Request.URL, body: body}
		if ev.RedirectResponse == nil {
			a.sent = append(a.sent, sentRequest{action: ev.Request.Method + " " + ev.Request.URL, at: time.Now(), tab: t})
			if len(a.sent) > maxSent {
				a.sent = append(a.sent[:0], a.sent[len(a.sent)-maxSent/2:]...)
			}
			a.notifyLocked()
		}
	case *network.EventResponseReceived:
		req, ok := t.reqs[ev.RequestID]
		if !ok {
			req = request{method: "GET", url: ev.Response.URL}
		}
		req.status, req.resource = int(ev.Response.Status), string(ev.Type)
		t.reqs[ev.RequestID] = req
		h := ev.Response.Headers
		if headerValue(h, "Poppy-Operation") == "" && t.extra[ev.RequestID] != nil {
			h = t.extra[ev.RequestID]
		}
		delete(t.extra, ev.RequestID)
		a.onResponseLocked(t, string(ev.RequestID), req, req.status, req.resource, h)
	case *network.EventResponseReceivedExtraInfo:
		// The raw headers as received, in either order with
		// responseReceived; used when that one lacks Poppy-Operation.
		if headerValue(ev.Headers, "Poppy-Operation") == "" {
			return
		}
		if req, ok := t.reqs[ev.RequestID]; ok && req.resource != "" {
			a.takeHeaderLocked(t, string(ev.RequestID), req, req.status, req.resource, ev.Headers)
		} else {
			t.extra[ev.RequestID] = ev.Headers
		}
	}
}

func (a *Agent) onResponseLocked(t *tab, id string, req request, status int, resource string, h network.Headers) {
	op := headerValue(h, "Poppy-Operation") != ""
	a.responses = append(a.responses, Response{Method: req.method, URL: req.url, Status: status, Resource: resource, Operation: op, At: time.Now(), Tab: t.name})
	if op {
		a.takeHeaderLocked(t, id, req, status, resource, h)
	}
	a.notifyLocked()
}

// takeHeaderLocked decides whether a Poppy-Operation header gives the agent
// a reference (§4 "The Personal Agent MUST take a reference only from…").
func (a *Agent) takeHeaderLocked(t *tab, id string, req request, status int, resource string, h network.Headers) {
	if a.seen[id] {
		return
	}
	a.seen[id] = true
	ignore := func(why string) {
		a.ignored = append(a.ignored, why)
		a.step("ignored a Poppy-Operation header on %s %s: %s", req.method, req.url, why)
	}
	// A11: only a response from the Company's own origin.
	if u, err := url.Parse(req.url); err != nil || u.Scheme+"://"+u.Host != a.origin {
		ignore("the response is not from " + a.origin + " (A11)")
		return
	}
	if !a.disc.Operations {
		ignore("the Company does not list operations v3 (A03)")
		return
	}
	sid, ref, err := headers.ParseOperation(strings.Split(headerValue(h, "Poppy-Operation"), "\n"))
	if err != nil {
		ignore("malformed: " + err.Error())
		return
	}
	// A10: sid must name a Session the agent joined this browser to.
	if !a.joined[sid] {
		ignore(fmt.Sprintf("sid %q names no Session this agent joined its browser to (A10)", sid))
		return
	}
	r := &Reference{SID: sid, Ref: ref, Method: req.method, URL: req.url, Body: req.body, Resource: resource, Status: status, At: time.Now(), tab: t}
	a.refs = append(a.refs, r)
	// The ref in full once, here: it can be hundreds of characters, and
	// each later step names it by its start (ShortRef).
	a.step("%s: %d on %s %s with Poppy-Operation: sid %s, ref %s (from the browser's own response, A08)", t.name, status, req.method, req.url, sid, ref)
	a.step("not done yet: the action waits for approval (A16)")
	a.notifyLocked()
}

func (a *Agent) notifyLocked() {
	close(a.wake)
	a.wake = make(chan struct{})
}

// waitChange returns a channel closed at the next reference or response.
func (a *Agent) waitChange() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wake
}

// headerValue returns a CDP header's value, whatever the name's case;
// repeated fields are joined with "\n".
func headerValue(h network.Headers, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return s
		}
	}
	return ""
}

// LastOperationHeader returns the latest reference the agent took, handled
// or not.
func (a *Agent) LastOperationHeader() (Reference, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.refs) == 0 {
		return Reference{}, false
	}
	return *a.refs[len(a.refs)-1], true
}

// References returns every reference the agent took, oldest first.
func (a *Agent) References() []Reference {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Reference, len(a.refs))
	for i, r := range a.refs {
		out[i] = *r
	}
	return out
}

// Ignored returns why each ignored Poppy-Operation header was ignored.
func (a *Agent) Ignored() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ignored...)
}

// Responses returns the responses the agent's browser received.
func (a *Agent) Responses() []Response {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Response(nil), a.responses...)
}

// NextReference waits for a reference the agent has not handled yet and
// returns the latest one; older unhandled ones are superseded by it.
func (a *Agent) NextReference(ctx context.Context) (*Reference, error) {
	for {
		wake := a.waitChange()
		a.mu.Lock()
		var latest *Reference
		for _, r := range a.refs {
			if !r.handled {
				if latest != nil {
					latest.handled = true
				}
				latest = r
			}
		}
		if latest != nil {
			latest.handled = true
		}
		a.mu.Unlock()
		if latest != nil {
			return latest, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("refagent: no Poppy-Operation reference came: %w", ctx.Err())
		case <-wake:
		}
	}
}

// nextReferenceFor waits until a reference for the same action arrives
// after since, or ctx ends.
func (a *Agent) newReferenceSince(since time.Time, action string) *Reference {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.refs) - 1; i >= 0; i-- {
		r := a.refs[i]
		if !r.handled && r.At.After(since) && r.Action() == action {
			r.handled = true
			// Older unhandled ones for the action are superseded.
			for _, o := range a.refs[:i] {
				if o.Action() == action {
					o.handled = true
				}
			}
			return r
		}
	}
	return nil
}

// sentRequest is a request the agent's browser sent: "METHOD URL".
type sentRequest struct {
	action string
	at     time.Time
	tab    *tab
}

// maxSent bounds the requests the agent remembers.
const maxSent = 512

// sentSince reports whether the browser sent action again after since.
func (a *Agent) sentSince(since time.Time, action string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.sent) - 1; i >= 0 && a.sent[i].at.After(since); i-- {
		if a.sent[i].action == action {
			return true
		}
	}
	return false
}

// pageRepeatWait is how long the agent leaves a page's script to repeat
// its own request once the approval is recorded (opsgate.fetch, the kit's
// card.js on an htmx or Turbo page: W93) before it presses the waiting
// card's Continue itself.
const pageRepeatWait = 5 * time.Second

// Repeat has the browser make the reference's request again (A15, A41,
// A48): on a waiting page it presses the page's Continue control (a form
// that sends the same method, URL and body, or a link).
//
// A page script's request (fetch or XHR: opsgate.fetch, htmx, Turbo) is
// the page's to repeat: the agent waits up to pageRepeatWait for the
// browser to send it again. When nothing did, it presses the Continue of
// the waiting card in the page (the kit's card on an htmx or Turbo page,
// whose Continue is the framework's own request, with the page's
// headers), once; with none, the control PressAgain names; else it keeps
// waiting for the page's script.
func (a *Agent) Repeat(ctx context.Context, r *Reference) error {
	return a.repeat(ctx, r, time.Now(), "")
}

func (a *Agent) repeat(ctx context.Context, r *Reference, since time.Time, again string) error {
	if r.Resource == "" || r.Resource == string(network.ResourceTypeDocument) {
		a.step("%s: pressing Continue on the waiting page to repeat %s (A41)", r.tab.name, r.Action())
		return clickContinue(ctx, r.tab.ctx, continueWithin)
	}
	a.step("%s: the page's script (%s) sent %s: leaving it %s to repeat it (W93)", r.tab.name, r.Resource, r.Action(), pageRepeatWait)
	wctx, cancel := context.WithTimeout(ctx, pageRepeatWait)
	for !a.sentSince(since, r.Action()) {
		wake := a.waitChange()
		select {
		case <-wctx.Done():
		case <-wake:
			continue
		}
		break
	}
	cancel()
	if a.sentSince(since, r.Action()) {
		a.step("%s: the page repeated %s itself", r.tab.name, r.Action())
		return nil
	}
	pressed, err := pressCard(ctx, r.tab.ctx)
	switch {
	case err != nil:
		return err
	case pressed:
		a.step("%s: no page script repeated it: pressed Continue on the waiting card in the page, once (A41)", r.tab.name)
	case again != "":
		a.step("%s: no page script repeated it and no waiting card is on the page: pressing %s again, once (A41)", r.tab.name, again)
		pctx, cancel := context.WithTimeout(r.tab.ctx, continueWithin)
		defer cancel()
		if err := chromedp.Do(pctx, chromedp.Click(chromedp.CSS(again), chromedp.NodeVisible)); err != nil {
			return fmt.Errorf("refagent: pressing %s again: %w", again, err)
		}
	default:
		a.step("%s: no waiting card on the page: waiting for the page's script (opsgate.fetch) to repeat it", r.tab.name)
	}
	return nil
}

// cardContinue is the Continue of a waiting card in a page (an htmx or
// Turbo page, package templates' WaitingCard) that has not been pressed:
// a form's submit button, or a link.
const cardContinue = `.opsgate-card[data-opsgate-via]:not([data-opsgate-done]) form[data-opsgate-continue] button, .opsgate-card[data-opsgate-via]:not([data-opsgate-done]) a[data-opsgate-continue]`

// pressCard clicks the Continue of the waiting card in tab, if there is
// one: a real click, as the person's. It reports whether it pressed.
func pressCard(ctx, tab context.Context) (bool, error) {
	qctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	n, err := chromedp.Run(qctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsQuote(cardContinue)+`).length`))
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil // a page being replaced: nothing to press
	}
	if n == 0 {
		return false, nil
	}
	if err := chromedp.Do(qctx, chromedp.Click(chromedp.CSS(cardContinue), chromedp.NodeVisible)); err != nil {
		return false, nil // it went (answered) meanwhile
	}
	return true, nil
}

func jsQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// continueWithin bounds the search for the waiting page's Continue control.
const continueWithin = 10 * time.Second

// clickContinue clicks the waiting page's Continue control in tab, waiting
// up to within for it. A click that loses its node ("No node with given id
// found": the document was updated between finding the control and
// clicking it, as can happen right after a navigation on a busy machine)
// looks for the control again, as internal/browsertest.Text does for a
// read; such a failure comes before any mouse event is sent, so nothing is
// clicked twice. A page without the control still fails once within has
// passed, saying so.
func clickContinue(ctx, tab context.Context, within time.Duration) error {
	const sel = "#opsgate-continue button, a#opsgate-continue"
	deadline := time.Now().Add(within)
	for {
		tctx, cancel := context.WithDeadline(tab, deadline)
		err := chromedp.Do(tctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || tab.Err() != nil || !time.Now().Before(deadline) {
			return fmt.Errorf("refagent: no Continue control on the page within %s: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("refagent: no Continue control on the page: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
