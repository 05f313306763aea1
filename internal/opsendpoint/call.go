package opsendpoint

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/opsgate/opsgate/internal/apigate"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// Calls is the endpoint as the verifier of requests that carry their
// Session on themselves (apigate.Verifier): endpoint.Mount.Handler puts
// it in their context, for the Gate and the MCP adapter.
func (e *Endpoint) Calls() apigate.Verifier { return calls{e} }

// calls is Calls' Verifier.
type calls struct{ e *Endpoint }

// Verify verifies the Session a request carries on itself, an API
// request or an HTTP request of an MCP session (RULES.md choices 7 and
// 8), as the endpoint verifies its own (§4: "as an API does"; W70): its
// Poppy-Version, its Session JWT (used once) and, signed in, its access
// token. Its declared extensions are its own Poppy-Extensions. When it
// can't be verified, the request gets the error an API gives and no
// operation (P64, M64): 400 invalid_request for its Poppy-Version, 401
// invalid_session or invalid_token, 503 with Retry-After when the
// agent's keys can't be fetched now.
func (c calls) Verify(w http.ResponseWriter, r *http.Request) (apigate.Caller, bool) {
	e := c.e
	if err := checkVersion(r.Header.Values(headers.Version)); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return apigate.Caller{}, false
	}
	s, err := e.Auth.Authenticate(r.Context(), r)
	switch {
	case errors.Is(err, ErrUnavailable):
		e.log().Warn("opsgate: cannot verify an API request's Session now", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		writeError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the Session cannot be verified now; try again")
		return apigate.Caller{}, false
	case errors.Is(err, ErrInvalidToken):
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		why := "the access token is not valid for this Session"
		if e.explaining() {
			why = e.why(err)
		}
		writeError(w, http.StatusUnauthorized, "invalid_token", why)
		return apigate.Caller{}, false
	case err != nil:
		writeInvalidSession(w, e.why(err))
		return apigate.Caller{}, false
	}
	ext, err := headers.ParseExtensions(r.Header.Values(headers.Extensions))
	if err != nil {
		ext = nil // declares nothing (§2)
	}
	return apigate.Caller{SID: s.ID, Agent: s.Agent, User: s.User, Account: s.Account, Extensions: ext}, true
}

// Decline asks the website's decline hook about an approval an API
// request or an MCP tool call carries, once checks 1–3 pass (§6
// "Declining an approval"; P77, M77): the same hook as the endpoint's.
func (c calls) Decline(ctx context.Context, op store.Operation, a store.Approval, caller apigate.Caller) *apigate.Decline {
	if c.e.Decline == nil {
		return nil
	}
	s := webkit.Session{ID: caller.SID, Agent: caller.Agent, User: caller.User, Account: caller.Account, Extensions: caller.Extensions}
	d := c.e.Decline(ctx, DeclineRequest{Operation: op, Approval: a, Session: s})
	if d == nil {
		return nil
	}
	// The approval's operation_id and revision, whatever the hook set
	// (P82, M82), in a copy: the hook may return a Decline it shares.
	body := *d
	body.OperationID, body.Revision = a.OperationID, a.Revision
	return &apigate.Decline{Reason: body.Reason, Body: &body}
}

// Explain reports whether refusals say why (Explain, or the Kit's
// ExplainRefusals).
func (c calls) Explain() bool { return c.e.explaining() }
