package shop

import (
	"net/http"
	"time"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/internal/agentside"
)

// TokenLifetime is how long a demo access token lasts.
const TokenLifetime = time.Hour

// issueToken is the demo authorization server, DEMO ONLY: it hands an RFC
// 9068 access token for the demo account to any agent that asks, with no
// sign-in at all, so that an agent can make a signed-in join
// (access_token in the join form) and send the token to the operations
// endpoint. A real shop issues tokens only after the person signs in and
// consents, through its identity provider.
//
//	POST /demo/token
//	Content-Type: application/x-www-form-urlencoded
//
//	client_id=<the agent's client_id URL>&account=acct_demo
//
// answers {"access_token": "…", "token_type": "Bearer", "expires_in": 3600,
// "account": "acct_demo"}.
func (s *Server) issueToken(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid_request", Message: "Send a form: client_id and account."})
		return
	}
	clientID, account := r.PostForm.Get("client_id"), r.PostForm.Get("account")
	if clientID == "" || len(clientID) > 2048 {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid_request", Message: "client_id is missing: the agent's client_id URL."})
		return
	}
	if account == "" {
		account = shopdb.DemoAccount
	}
	if account != shopdb.DemoAccount {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "invalid_grant", Message: "The demo issues tokens for acct_demo only."})
		return
	}
	token, err := s.IssueAccessToken(clientID, account)
	if err != nil {
		s.cfg.Logger.Error("demo token: cannot sign", "err", err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "server_error", Message: "The token could not be issued."})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"access_token": token,
		"token_type":   "Bearer",
		"expires_in":   int(TokenLifetime.Seconds()),
		"account":      account,
	})
}

// IssueAccessToken signs a demo access token for clientID and account, as
// POST /demo/token does (for tests and the reference agent in-process).
func (s *Server) IssueAccessToken(clientID, account string) (string, error) {
	return agentside.IssueAccessTokenAt(s.issuer, s.issuerID, s.origin, clientID, account, s.cfg.Clock(), TokenLifetime)
}
