package refagent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/network"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// Results of Approve.
const (
	Performed        = "performed"         // the browser's repeated request performed it (§7)
	Approved         = "approved"          // recorded; the caller repeats the request (NoRepeat)
	Declined         = "declined"          // the Company declined the approval (§6)
	NotApproved      = "not_approved"      // the decider did not approve: not performed (A17)
	NotPerformed     = "not_performed"     // the repeated request did not perform it
	AlreadyPerformed = "already_performed" // an earlier operation for the action was performed (A51)
	// EarlierPending: the operation holds an unused approval of an earlier
	// revision for this action, and the Company's endpoint answers the new
	// reference with that status, not with the new terms: nothing can be
	// approved until that approval is used or expires. (opsgate's own
	// endpoint answers with the new terms instead; other Companies may not.)
	EarlierPending = "earlier_approval_pending"
)

// Outcome is how one Approve ended.
type Outcome struct {
	Result      string
	OperationID string
	Revision    string
	Approver    store.Approver
	// Refs are the references handled, in order: more than one when the
	// browser got a new one (expired, A15; new terms; a retry, A49).
	Refs []string
	// Invalid counts invalid_request answers for a reference (A15).
	Invalid int
	// Decline is the Company's decline (§6), its content untrusted (A45).
	Decline *webkit.Decline
	// Asked are the questions put to the Decider.
	Asked []Question
}

// Repeat modes of Approve (A41).
type Option func(*approveOptions)

type approveOptions struct {
	mode  int
	again string // PressAgain's selector
}

const (
	repeatClick = iota // press Continue on the waiting page
	repeatPage         // leave it to the page's script, then wait
	repeatNone         // return once the approval is recorded
)

// LeaveRepeatToPage makes Approve press nothing after the approval: the
// waiting page's script (or opsgate.fetch) repeats the request itself (§6
// "The website MAY make it again itself"), and Approve waits for it.
func LeaveRepeatToPage() Option { return func(o *approveOptions) { o.mode = repeatPage } }

// NoRepeat makes Approve return Approved once the approval is recorded:
// the caller has the browser repeat the request.
func NoRepeat() Option { return func(o *approveOptions) { o.mode = repeatNone } }

// PressAgain names the control (a CSS selector) that made a page
// script's request, such as an htmx button: when, once the approval is
// recorded, no page script repeats the request and no waiting card is on
// the page, Approve presses it again, once (A41). The agent that acts on
// any website (demo/agent -press) uses it.
func PressAgain(selector string) Option { return func(o *approveOptions) { o.again = selector } }

type sentApproval struct {
	ref, action string
	session     *Session
	approval    store.Approval
	performed   bool
	closed      bool // settled: not waiting any more (A49 skips it)
}

// NewTask tells the agent that the user asked for a new action: earlier
// performed approvals no longer stop a new operation for the same URL
// (A51 applies to retries of one action, not to a new request of the user).
func (a *Agent) NewTask() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.approvals {
		s.closed = true
	}
}

// Approve handles the latest reference the agent's browser got (waiting
// for one if there is none yet): it fetches the operation, asks d, sends
// the approval and has the browser repeat the request, until the action is
// performed, declined, not approved, or known performed already.
func (a *Agent) Approve(ctx context.Context, d Decider, opts ...Option) (Outcome, error) {
	var o approveOptions
	for _, f := range opts {
		f(&o)
	}
	var out Outcome
	if !a.disc.Operations {
		return out, ErrNotSupported // A03
	}
	if _, ok := ctx.Deadline(); !ok {
		// Every wait is bounded: a misconfigured site must not hold the
		// agent forever.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.StepTimeout)
	r, err := a.NextReference(rctx)
	cancel()
	if err != nil {
		return out, fmt.Errorf("%w (waited %s: the browser's request got no 403 with a Poppy-Operation header for a Session the agent joined; "+
			"is the action gated, did the join declare operations v3, and is the site's origin %s?)", err, a.cfg.StepTimeout, a.origin)
	}
	for round := 0; round < 10; round++ {
		out.Refs = append(out.Refs, r.Ref)
		s := a.session(r.SID)

		// A47, A49–A51: a new reference after an approval for the same
		// action: look up the earlier one before anything else.
		if stop, err := a.checkEarlier(ctx, r, &out); err != nil || stop {
			return out, err
		}

		ans, err := a.Lookup(ctx, r.Ref, s)
		if err != nil {
			return out, err
		}
		var op *store.Operation
		switch {
		case ans.Status == "performed":
			out.Result, out.OperationID = AlreadyPerformed, ans.OperationID
			return out, nil
		case ans.Status == "approved" && !a.approvedRef(r.Ref) && a.hasApproval(r.Action()):
			// The approval the operation holds is the agent's earlier one,
			// for other terms (the browser's request got a new reference).
			// This endpoint shows the status, not the new revision (opsgate's
			// shows the new revision), so there is nothing the agent could
			// show the user or approve (§5).
			a.step("operation %s holds the agent's unused approval of earlier terms; the endpoint shows no new terms until it is used or expires: approving nothing now", ans.OperationID)
			out.Result, out.OperationID = EarlierPending, ans.OperationID
			return out, nil
		case ans.Status != "":
			// Approved (in another Session) or performing: no new
			// approval; see it through.
			out.OperationID = ans.OperationID
		case ans.Error == "invalid_request":
			// A15: unknown or expired: the browser makes the request
			// again for a new reference.
			out.Invalid++
			a.step("the reference is unknown or has expired: having the browser make the request again for a new one (A15)")
			if r, err = a.repeatForNew(ctx, r); err != nil {
				return out, err
			}
			continue
		case ans.Operation != nil:
			op = ans.Operation
		default:
			return out, fmt.Errorf("refagent: unexpected answer from the endpoint: %d %s", ans.HTTPStatus, ans.Error)
		}

		restart := false
		// sentAt is when the approval went: a page's repeat comes after it.
		var sentAt time.Time
		for op != nil && !restart { // decide and send; again when check 3 returns a new revision
			q := a.question(r, *op)
			out.Asked = append(out.Asked, q)
			out.OperationID, out.Revision = op.ID, op.Revision
			a.step("asking %s about operation %s revision %s", deciderName(d), op.ID, op.Revision)
			dec, err := d.Decide(ctx, q)
			if err != nil {
				return out, err
			}
			if !dec.Approve {
				a.step("not approved: the action was not performed (A17)")
				out.Result = NotApproved
				return out, nil
			}
			if dec.Approver == store.ApproverAgent && !q.AgentMayApprove {
				return out, fmt.Errorf("refagent: the decider gave an agent approval where only the user may decide (%s)", q.Why)
			}
			ap := a.approval(*op, dec)
			key := op.ID + "|" + op.Revision + "|" + string(ap.Approver)
			a.mu.Lock()
			declined := a.declined[key]
			a.mu.Unlock()
			if declined { // A42: a declined approval is never sent again
				a.step("this approval was declined before: not sending it again (A42)")
				out.Result = NotApproved
				return out, nil
			}
			if dec.Withdrawn != nil && dec.Withdrawn() { // A30
				a.step("the approval was withdrawn before it was sent: not sending it; the action was not performed (A30)")
				out.Result = NotApproved
				return out, nil
			}
			out.Approver = ap.Approver
			sentAt = time.Now()
			ans, err := a.sendApproval(ctx, r.Ref, s, ap)
			if err != nil {
				return out, err
			}
			op = nil
			switch {
			case ans.HTTPStatus == http.StatusNoContent:
				a.recordApproval(r, s, ap)
			case ans.Decline != nil:
				a.onDecline(r, key, ans.Decline)
				out.Result, out.Decline = Declined, ans.Decline
				return out, nil
			case ans.Status == "performed":
				out.Result = AlreadyPerformed
				return out, nil
			case ans.Status != "":
				// performing: wait for it below.
			case ans.Operation != nil:
				// Check 3 failed: the operation's current revision. A26:
				// after an agent approval, the user decides the new one.
				if ap.Approver == store.ApproverAgent {
					a.caution(r.Action(), "the Company answered the agent approval with a new revision (A26)")
				}
				op = ans.Operation
			case ans.Error == "invalid_request":
				out.Invalid++
				a.step("the revision expired before the approval arrived: having the browser make the request again (A15)")
				if r, err = a.repeatForNew(ctx, r); err != nil {
					return out, err
				}
				restart = true // start over with the new reference
			default:
				return out, fmt.Errorf("refagent: unexpected answer to the approval: %d %s", ans.HTTPStatus, ans.Error)
			}
		}
		if restart {
			continue
		}

		// A41: the browser makes the request again.
		since := time.Now()
		switch o.mode {
		case repeatNone:
			out.Result = Approved
			return out, nil
		case repeatPage:
			a.step("%s: not pressing anything: the page repeats the request itself once the approval is recorded", r.tab.name)
		default:
			if sentAt.IsZero() { // approved before (another Session): from now
				sentAt = since
			}
			if err := a.repeat(ctx, r, sentAt, o.again); err != nil {
				return out, err
			}
		}
		// A48 presses the waiting page's Continue again when the approval
		// stays unused; a page script's request is pressed at most once.
		page := r.Resource == "" || r.Resource == string(network.ResourceTypeDocument)
		result, next, err := a.awaitOutcome(ctx, r, s, since, o.mode == repeatClick && page)
		if err != nil {
			return out, err
		}
		if next != nil {
			a.step("%s: the repeated request got a new reference %s", next.tab.name, ShortRef(next.Ref))
			r = next
			continue
		}
		out.Result = result
		return out, nil
	}
	return out, errors.New("refagent: gave up after too many new references for one action")
}

func deciderName(d Decider) string {
	if n, ok := d.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "the decider"
}

// session returns the agent's Session sid (one it joined the browser to).
func (a *Agent) session(sid string) *Session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[sid]
}

// approval builds the Poppy-Approval (§6): approver, approved_at, and
// input_type only with user (A33–A35, A39); a fresh random reference that
// no other Company ever gets (A36–A38).
func (a *Agent) approval(op store.Operation, dec Decision) store.Approval {
	at := dec.At
	if at.IsZero() {
		at = a.now()
	}
	ap := store.Approval{
		OperationID: op.ID,
		Revision:    op.Revision,
		Approver:    dec.Approver,
		ApprovedAt:  at.Truncate(time.Second),
	}
	if ap.Approver == store.ApproverUser {
		ap.InputType = dec.InputType
		if ap.InputType == "" {
			ap.InputType = "typed"
		}
	}
	a.mu.Lock()
	for {
		ref := "apr_" + rand.Text()
		if !a.refsUsed[ref] {
			a.refsUsed[ref] = true
			ap.Reference = ref
			break
		}
	}
	a.mu.Unlock()
	return ap
}

// approvedRef reports whether the agent's approval was recorded for ref.
func (a *Agent) approvedRef(ref string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.approvals {
		if s.ref == ref {
			return true
		}
	}
	return false
}

// hasApproval reports whether the agent has an unsettled recorded approval
// for action.
func (a *Agent) hasApproval(action string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.approvals {
		if s.action == action && !s.closed && !s.performed {
			return true
		}
	}
	return false
}

func (a *Agent) recordApproval(r *Reference, s *Session, ap store.Approval) {
	a.mu.Lock()
	a.approvals = append(a.approvals, &sentApproval{ref: r.Ref, action: r.Action(), session: s, approval: ap})
	a.mu.Unlock()
	if ap.Approver == store.ApproverAgent {
		// A26: a new operation or revision for this action is not
		// approved on the same instruction.
		a.caution(r.Action(), "an agent approval was already given for this action; a new revision or operation needs the user (A26)")
	}
}

func (a *Agent) caution(action, why string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.cautious[action]; !ok {
		a.cautious[action] = why
	}
}

// onDecline: the approval is never sent again (A42), a new revision for
// the action needs the user (A43), and the user hears that nothing was
// performed (A44), with the Company's reason and alternative as its
// content, never followed (A45).
func (a *Agent) onDecline(r *Reference, key string, d *webkit.Decline) {
	a.mu.Lock()
	a.declined[key] = true
	a.mu.Unlock()
	a.caution(r.Action(), "the Company declined an approval for this action; only the user can approve again (A43)")
	a.step("DECLINED by the Company: the action was NOT performed (A44)")
	hiddenN := HiddenChars(d.Reason)
	if d.Reason != "" {
		a.step("  the Company says (its words, not an instruction): %s", PlainText(d.Reason))
	}
	if d.Alternative != nil {
		hiddenN += HiddenChars(d.Alternative.Instructions)
		if d.Alternative.Instructions != "" {
			a.step("  alternative (from the Company): %s", PlainText(d.Alternative.Instructions))
		}
		for _, ref := range d.Alternative.References {
			hiddenN += HiddenChars(ref.Type) + HiddenChars(ref.URL)
			a.step("  alternative %s: %s (not opened, A45)", PlainText(ref.Type), PlainText(ref.URL))
		}
	}
	if hiddenN > 0 {
		a.step("  WARNING: %s", hiddenWarning("the Company's reason and alternative", hiddenN))
	}
}

// checkEarlier looks up the earlier references of approvals for the same
// action before a new one is approved or the user is asked (A47, A49):
// while one is performing the agent waits (A50); when one was performed
// it doesn't approve the new operation (A51).
func (a *Agent) checkEarlier(ctx context.Context, r *Reference, out *Outcome) (stop bool, err error) {
	a.mu.Lock()
	var earlier []*sentApproval
	for _, s := range a.approvals {
		if s.action == r.Action() && s.ref != r.Ref && !s.closed {
			earlier = append(earlier, s)
		}
	}
	a.mu.Unlock()
	for _, e := range earlier {
		if e.performed {
			a.step("operation %s for %s was already performed: not approving the new reference (A51)", e.approval.OperationID, r.Action())
			out.Result, out.OperationID = AlreadyPerformed, e.approval.OperationID
			return true, nil
		}
		a.step("a new reference for %s after an approval: looking up the earlier reference %s first (A49)", r.Action(), ShortRef(e.ref))
		for {
			ans, err := a.Lookup(ctx, e.ref, e.session)
			if err != nil {
				return true, err
			}
			if ans.Status == "performing" { // A50
				a.step("the earlier operation is being performed: waiting (A50)")
				select {
				case <-ctx.Done():
					return true, ctx.Err()
				case <-time.After(time.Second):
				}
				continue
			}
			a.mu.Lock()
			switch ans.Status {
			case "performed":
				e.performed = true
			case "approved":
				// Its approval is recorded and unused: the new request
				// asks for something else (new terms).
			default:
				e.closed = true
			}
			a.mu.Unlock()
			if ans.Status == "performed" {
				a.step("the earlier operation %s was performed: not approving the new one (A51)", ans.OperationID)
				out.Result, out.OperationID = AlreadyPerformed, ans.OperationID
				return true, nil
			}
			if ans.Status == "approved" {
				a.step("the earlier approval is recorded but unused: the new request asks for other terms")
			}
			break
		}
	}
	return false, nil
}

// repeatForNew has the browser repeat r's request and waits for the new
// reference it gets (A15).
func (a *Agent) repeatForNew(ctx context.Context, r *Reference) (*Reference, error) {
	since := time.Now()
	if r.Resource != "" && r.Resource != "Document" {
		return nil, errors.New("refagent: a page script's request can't be repeated by the agent; ask the page again")
	}
	if err := a.Repeat(ctx, r); err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		wake := a.waitChange()
		if n := a.newReferenceSince(since, r.Action()); n != nil {
			return n, nil
		}
		select {
		case <-tctx.Done():
			return nil, errors.New("refagent: the repeated request got no new reference")
		case <-wake:
		}
	}
}

// awaitOutcome waits, after the browser repeated the request, until the
// endpoint reports the operation performed, the repeated request got a
// new reference (returned), or the approval was used up without
// performing it.
func (a *Agent) awaitOutcome(ctx context.Context, r *Reference, s *Session, since time.Time, clicked bool) (string, *Reference, error) {
	tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	last := ""
	repeated := time.Now()
	for {
		wake := a.waitChange()
		if n := a.newReferenceSince(since, r.Action()); n != nil {
			return "", n, nil
		}
		ans, err := a.post(tctx, r.Ref, s, nil, true)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return "", nil, err
		}
		status := ans.Status
		if status == "" && ans.Operation != nil {
			status = "waiting"
		}
		if status != last && status != "" {
			a.step("operation status at the endpoint: %s", status)
			last = status
		}
		switch status {
		case "performed":
			a.mu.Lock()
			for _, e := range a.approvals {
				if e.ref == r.Ref || e.approval.OperationID == ans.OperationID {
					e.performed = true
				}
			}
			a.mu.Unlock()
			a.step("PERFORMED: the Company did the action, once (§7)")
			return Performed, nil, nil
		case "waiting":
			// The approval was used up and the handler did not perform
			// the action (§7 W98), or a new reference is on its way.
			time.Sleep(300 * time.Millisecond)
			if n := a.newReferenceSince(since, r.Action()); n != nil {
				return "", n, nil
			}
			a.step("NOT PERFORMED: the repeated request did not perform the action")
			return NotPerformed, nil, nil
		case "approved":
			// A48: the repeated request failed or never came: again.
			if clicked && time.Since(repeated) > 8*time.Second {
				a.step("the approval is still unused: having the browser repeat the request again (A48)")
				if err := a.Repeat(ctx, r); err == nil {
					repeated = time.Now()
				}
			}
		}
		select {
		case <-tctx.Done():
			return "", nil, fmt.Errorf("refagent: the action was not performed in time (last status %q)", last)
		case <-wake:
		case <-time.After(400 * time.Millisecond):
		}
	}
}

// --- Showing and checking the terms (§3 "Formatting", §5, §8.2) ---

// Question is what the Decider decides: the operation as the user sees it
// and the agent's checks.
type Question struct {
	Company   string // the Company's name (A18)
	Operation store.Operation
	// Summary is the summary as plain text: links, images and HTML are
	// shown as the text they are, never rendered or fetched (A07); its
	// emphasis and lists too, which the spec allows rendering (A06). Like
	// the terms it is untrusted content from the Company: instructions in
	// it are never followed (A52).
	Summary string
	// Action is what the agent's browser did: "METHOD URL" (§8.2).
	Action string
	// Differences are what the agent found between the terms and the
	// action it took (A27) or the summary (A28), to point out to the user.
	Differences []string
	// CSRFFields are the names of the request's fields the agent treated
	// as CSRF tokens (IsCSRFField): not compared with the terms, and their
	// values never shown.
	CSRFFields []string
	// AgentMayApprove is false when only the user may decide: after an
	// agent approval of this action (A26), or after a decline (A43). Every
	// new revision is a new Question: one approval covers one revision (A29).
	AgentMayApprove bool
	// Why says why AgentMayApprove is false.
	Why string
}

func (a *Agent) question(r *Reference, op store.Operation) Question {
	q := Question{
		Company:         a.disc.Name,
		Operation:       op,
		Summary:         PlainText(op.Summary),
		Action:          r.Action(),
		AgentMayApprove: true,
	}
	a.mu.Lock()
	if why, ok := a.cautious[r.Action()]; ok {
		q.AgentMayApprove, q.Why = false, why
	}
	a.mu.Unlock()
	diffs, tokens := checkAction(r, op.Terms)
	q.Differences = append(diffs, checkSummary(op.Summary, op.Terms)...)
	// Text that reorders or hides itself is shown made visible (PlainText)
	// and said: the user decides, never a standing instruction.
	if n := HiddenChars(op.Summary); n > 0 {
		q.Differences = append(q.Differences, hiddenWarning("the summary", n))
	}
	termsHidden := 0
	for _, kv := range flatten("", op.Terms) {
		termsHidden += HiddenChars(kv[0]) + HiddenChars(kv[1])
	}
	if termsHidden > 0 {
		q.Differences = append(q.Differences, hiddenWarning("the terms", termsHidden))
	}
	for i, d := range q.Differences { // they quote the terms and the request
		q.Differences[i] = PlainText(d)
	}
	q.CSRFFields = tokens
	if len(tokens) > 0 {
		a.step("not comparing %s with the terms: CSRF token field(s), values not shown", strings.Join(tokens, ", "))
	}
	// The terms are shown once, by whoever decides: the Prompt shows them
	// to the user, Standing prints them when it decides itself.
	a.step("got operation %s revision %s (%d difference(s) to point out)", op.ID, op.Revision, len(q.Differences))
	return q
}

// Text is the question as plain text for a person: the Company's name,
// the summary, the terms' values, the action taken and any difference
// (A05, A18, A19, A22).
func (q Question) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s asks for approval of this action:\n\n", PlainText(q.Company))
	if q.Summary != "" {
		fmt.Fprintf(&b, "  %s\n\n", strings.ReplaceAll(q.Summary, "\n", "\n  "))
	}
	fmt.Fprintf(&b, "Terms (operation %s, revision %s):\n", q.Operation.ID, q.Operation.Revision)
	for _, kv := range flatten("", q.Operation.Terms) {
		fmt.Fprintf(&b, "  %s: %s\n", PlainText(kv[0]), PlainText(kv[1]))
	}
	fmt.Fprintf(&b, "Approve by: %s\n", q.Operation.ExpiresAt.Format("Mon 2 Jan 2006 15:04:05 MST"))
	fmt.Fprintf(&b, "Your browser's request: %s\n", q.Action)
	if len(q.CSRFFields) > 0 {
		fmt.Fprintf(&b, "Not compared with the terms: %s (CSRF token, value not shown)\n", strings.Join(q.CSRFFields, ", "))
	}
	for _, d := range q.Differences {
		fmt.Fprintf(&b, "WARNING: %s\n", d)
	}
	if !q.AgentMayApprove {
		fmt.Fprintf(&b, "Only you can approve this: %s\n", q.Why)
	}
	return b.String()
}

// PlainText returns s to show as plain text (§3 "Formatting", A07): every
// character as it is, so a Markdown link, an image or HTML reads as its
// text and nothing is rendered or fetched, except control characters
// (terminal escape sequences, C0 and C1), which are dropped, and
// characters that reorder or hide text, which are made visible as
// [U+XXXX]: the bidi embeddings, overrides and isolates (U+202A–202E,
// U+2066–2069), the zero-width and direction marks (U+200B–200F), the
// invisible operators (U+2060–2064), U+FEFF and every other format
// character (Unicode category Cf), and the line and paragraph separators
// (U+2028, U+2029). So "Refund $\u202e00.07" can't show as "$70.00": it
// reads "Refund $[U+202E]00.07". HiddenChars counts them, for the agent to
// say so.
func PlainText(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == unicode.ReplacementChar || unicode.IsControl(r) || hidden(r) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
			// dropped
		case hidden(r):
			fmt.Fprintf(&b, "[U+%04X]", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hidden reports whether r reorders or hides the text around it: a format
// character (Cf: bidi controls, zero-width characters, U+FEFF, invisible
// operators, …) or a line or paragraph separator.
func hidden(r rune) bool {
	return unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// HiddenChars is how many characters of s PlainText makes visible as
// [U+XXXX] because they reorder or hide text.
func HiddenChars(s string) int {
	n := 0
	for _, r := range s {
		if hidden(r) {
			n++
		}
	}
	return n
}

// hiddenWarning is what the agent says about n such characters in what.
func hiddenWarning(what string, n int) string {
	return fmt.Sprintf("%s: %d character(s) that reorder or hide text (bidi, format or zero-width), shown as [U+XXXX]; read it with care", what, n)
}

// flatten returns the terms' leaf values as "path", "value" pairs, sorted.
func flatten(prefix string, raw json.RawMessage) [][2]string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	var out [][2]string
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				np := k
				if p != "" {
					np = p + "." + k
				}
				walk(np, v[k])
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", p, i), e)
			}
		case string:
			out = append(out, [2]string{p, v})
		case nil:
			out = append(out, [2]string{p, "null"})
		default:
			b, _ := json.Marshal(v)
			out = append(out, [2]string{p, string(b)})
		}
	}
	walk(prefix, v)
	return out
}

// checkAction compares the terms with what the browser asked for (A27,
// §8.2): every ID in the request's path (a segment with "_" or a digit)
// and every value of its form or JSON body should appear among the terms'
// values. A script on the page could have sent another request in the
// Session; a difference is pointed out to the user. Fields that are CSRF
// tokens (IsCSRFField) are left out; tokens are their names, for the
// user to see which, never their values.
func checkAction(r *Reference, terms json.RawMessage) (diffs, tokens []string) {
	values := map[string]bool{}
	for _, kv := range flatten("", terms) {
		values[kv[1]] = true
	}
	var asked [][2]string
	if u, err := url.Parse(r.URL); err == nil {
		for _, seg := range strings.Split(u.Path, "/") {
			if strings.ContainsAny(seg, "_0123456789") {
				asked = append(asked, [2]string{"path", seg})
			}
		}
	}
	body := strings.TrimSpace(string(r.Body))
	if strings.HasPrefix(body, "{") {
		asked = append(asked, flatten("", json.RawMessage(body))...)
	} else if form, err := url.ParseQuery(body); err == nil {
		for k, vs := range form {
			for _, v := range vs {
				asked = append(asked, [2]string{k, v})
			}
		}
	}
	tokens, asked = csrfNames(asked)
	for _, kv := range asked {
		if kv[1] != "" && !values[kv[1]] {
			diffs = append(diffs, fmt.Sprintf("your browser asked for %s = %q, which the terms don't contain: the operation may be for another action (A27)", kv[0], kv[1]))
		}
	}
	slices.Sort(diffs)
	return diffs, tokens
}

// checkSummary compares the summary with the terms (A28): each amount of
// money and each date in the terms should appear in the summary.
func checkSummary(summary string, terms json.RawMessage) []string {
	if summary == "" {
		return nil
	}
	var diffs []string
	pairs := flatten("", terms)
	for _, kv := range pairs {
		key, v := kv[0], kv[1]
		switch {
		case strings.HasSuffix(key, ".amount") || key == "amount":
			amt := strings.TrimPrefix(v, "-")
			if !strings.Contains(summary, amt) && !(isZero(amt) && saysNoCost(summary)) {
				diffs = append(diffs, fmt.Sprintf("the terms say %s = %s, the summary doesn't mention that amount (A28)", key, v))
			}
		case len(v) == 10 && v[4] == '-' && v[7] == '-':
			day, err := time.Parse("2006-01-02", v)
			if err != nil {
				continue
			}
			if !strings.Contains(summary, v) && !strings.Contains(summary, day.Format("2 January 2006")) && !strings.Contains(summary, day.Format("January 2, 2006")) {
				diffs = append(diffs, fmt.Sprintf("the terms say %s = %s, the summary doesn't mention that date (A28)", key, v))
			}
		}
	}
	return diffs
}

// isZero reports whether a decimal amount is zero ("0", "0.00").
func isZero(amount string) bool {
	r, ok := new(big.Rat).SetString(amount)
	return ok && r.Sign() == 0
}

// noCost are the ways a summary says that an amount is zero without
// writing it, as the demo's same-price exchange does ("at no extra cost").
var noCost = []string{"no extra cost", "no additional cost", "no cost", "no fee", "no charge", "free of charge", "$0 ", "$0."}

// saysNoCost reports whether summary says in words that nothing is charged
// or refunded, which agrees with a zero amount in the terms (A28).
func saysNoCost(summary string) bool {
	l := strings.ToLower(summary) + " "
	for _, p := range noCost {
		if strings.Contains(l, p) {
			return true
		}
	}
	return false
}

func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
