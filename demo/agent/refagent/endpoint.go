package refagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// Answer is the endpoint's answer to a lookup or an approval (§4, §6, §7).
type Answer struct {
	HTTPStatus int
	// Error is the body's error: approval_required, approval_declined,
	// invalid_request, sign_in_required, invalid_session, …; "" for 200/204.
	Error string
	// Operation is the operation of approval_required (§4).
	Operation *store.Operation
	// Status is the operation's state in a 200 answer: approved,
	// performing or performed (§6 "Looking up an approved operation").
	Status      string
	OperationID string
	// Decline is the Company's decline of an approval (§6).
	Decline *webkit.Decline
	// Description is the body's error_description: why, in words, from a
	// website that explains its refusals (the demo does); "" for none.
	// Content from the Company: shown as plain text, never followed.
	Description string
}

// Errors of the endpoint the caller may want to tell apart.
var (
	// ErrSignInRequired: the Session is signed out and the operation
	// belongs to an account (§3, the sign-in challenge).
	ErrSignInRequired = errors.New("refagent: the operation belongs to an account: sign in (sign_in_required)")
	// ErrSessionRefused: the Company refused the agent's Session (401).
	// The usual cause while developing is a key change: a verifier
	// reloads an agent's keys at most every 30 s, so a rerun with new keys
	// under the same client_id is refused until then.
	ErrSessionRefused = errors.New("the site did not accept the agent's Session (401 invalid_session); " +
		"if the agent's keys changed in the last 30 s (a rerun on the same -listen address makes new keys), wait and retry: " +
		"the site reloads an agent's keys at most every 30 s")
)

// Lookup sends ref to the Company's endpoint in Session s, without an
// approval (§4, A13, A14): the operation, its status, or an error answer.
func (a *Agent) Lookup(ctx context.Context, ref string, s *Session) (Answer, error) {
	return a.post(ctx, ref, s, nil, false)
}

// post is the one request the agent makes to the endpoint: POST {"ref"}
// with a fresh Session JWT, the access token when signed in, the declared
// extension (A01) and, to approve, Poppy-Approval (A40: same body).
func (a *Agent) post(ctx context.Context, ref string, s *Session, ap *store.Approval, quiet bool) (Answer, error) {
	if !a.disc.Operations {
		return Answer{}, ErrNotSupported // A03: never call the endpoint
	}
	token := ""
	if s.SignedIn {
		var err error
		if token, err = a.accessToken(ctx); err != nil {
			return Answer{}, err
		}
	}
	jwt, err := a.sessionHeader(s, token)
	if err != nil {
		return Answer{}, err
	}
	body, _ := json.Marshal(map[string]string{"ref": ref})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.disc.Endpoint, bytes.NewReader(body))
	if err != nil {
		return Answer{}, err
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set(headers.Session, jwt) // a credential: never printed
	h.Set(headers.Version, "1.0")
	h.Set(headers.Extensions, headers.FormatExtensions(map[string]string{"operations": "3"})) // A01
	if token != "" {
		h.Set("Authorization", "Bearer "+token) // A14
	}
	what := "lookup"
	if ap != nil {
		v, err := headers.FormatApproval(*ap)
		if err != nil {
			return Answer{}, err
		}
		h.Set(headers.Approval, v) // A31: to the endpoint only, never through the browser
		what = "approval"
	}
	if !quiet {
		a.step("→ POST %s {\"ref\": %s} (%s, Session %s, signed in: %v)", a.disc.Endpoint, ShortRef(ref), what, s.SID, s.SignedIn)
	}
	if ap != nil {
		v, _ := headers.FormatApproval(*ap)
		a.step("  Poppy-Approval: %s", v)
	}
	res, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("refagent: endpoint %s did not answer: %w", a.disc.Endpoint, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 256<<10))
	ans := Answer{HTTPStatus: res.StatusCode}
	var b struct {
		Error       string              `json:"error"`
		Operation   *store.Operation    `json:"operation"`
		Status      string              `json:"status"`
		OperationID string              `json:"operation_id"`
		Revision    string              `json:"revision"`
		Reason      string              `json:"reason"`
		Alternative *webkit.Alternative `json:"alternative"`
		Description string              `json:"error_description"`
	}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &b)
	}
	ans.Error, ans.Status, ans.OperationID, ans.Description = b.Error, b.Status, b.OperationID, oneLine(b.Description, maxJoinDescription)
	if b.Operation != nil {
		if err := headers.ValidateOperation(*b.Operation); err != nil {
			return ans, fmt.Errorf("refagent: the endpoint returned a bad operation: %w", err)
		}
		ans.Operation = b.Operation
	}
	if b.Error == "approval_declined" {
		ans.Decline = &webkit.Decline{OperationID: b.OperationID, Revision: b.Revision, Reason: b.Reason, Alternative: b.Alternative}
	}
	switch {
	case quiet:
	case res.StatusCode == http.StatusNoContent:
		a.step("← 204: the approval is recorded; nothing is performed yet")
	case ans.Status != "":
		a.step("← %d: operation %s is %s", res.StatusCode, ans.OperationID, ans.Status)
	case ans.Operation != nil:
		a.step("← %d %s: operation %s, revision %s, expires %s", res.StatusCode, ans.Error, ans.Operation.ID, ans.Operation.Revision, ans.Operation.ExpiresAt.Format(time.RFC3339))
	default:
		a.step("← %d %s", res.StatusCode, ans.Error)
	}
	if !quiet && ans.Description != "" {
		a.step("  the website says why: %s", ans.Description)
	}
	if ans.Error == "sign_in_required" {
		return ans, ErrSignInRequired
	}
	if res.StatusCode == http.StatusUnauthorized {
		if ans.Description != "" {
			return ans, fmt.Errorf("refagent: endpoint %s refused the agent's Session (401 %s): %w", a.disc.Endpoint, ans.Error, sessionRefused{ans.Description})
		}
		return ans, fmt.Errorf("refagent: endpoint %s: %w", a.disc.Endpoint, ErrSessionRefused)
	}
	return ans, nil
}

// sendApproval sends one approval, again with the same header when the
// request fails or the Company is unavailable (A46), a few times.
func (a *Agent) sendApproval(ctx context.Context, ref string, s *Session, ap store.Approval) (Answer, error) {
	var last error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			a.step("the approval request failed (%v); sending the same approval again (A46)", last)
			select {
			case <-ctx.Done():
				return Answer{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			}
		}
		ans, err := a.post(ctx, ref, s, &ap, false)
		if err == nil && ans.HTTPStatus != http.StatusServiceUnavailable {
			return ans, nil
		}
		if errors.Is(err, ErrSignInRequired) || errors.Is(err, ErrNotSupported) {
			return ans, err
		}
		last = err
		if err == nil {
			last = errors.New("503")
		}
	}
	return Answer{}, fmt.Errorf("refagent: the approval could not be sent: %w", last)
}

// sessionRefused is a 401 in the website's own words: ErrSessionRefused
// to errors.Is, without its guess at the cause.
type sessionRefused struct{ why string }

func (e sessionRefused) Error() string        { return e.why }
func (e sessionRefused) Is(target error) bool { return target == ErrSessionRefused }
