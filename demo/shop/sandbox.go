package shop

import (
	"net/http"
	"strings"

	"github.com/opsgate/opsgate/demo/shop/shopdb"
	"github.com/opsgate/opsgate/webkit"
)

// Sandboxes: many agents share one running demo, and each must be able to
// run its flows again and again without meeting another agent's changes.
// So every agent's User (a Session's sub; the same whether its browser is
// joined signed in to the demo account or signed out) gets its own copy of
// the demo data on first visit. Browsers joined to no Session (people
// trying the shop themselves) share one copy. Copies unused for a day are
// forgotten, and their number is capped per agent and overall: an agent at
// its cap loses its own least recently used copy, and beyond the overall
// cap the agent with the most copies gives way first (shopdb.Sandboxes),
// so one agent's thousand joins never flush another agent's sandbox.

// publicSandbox is the key of the copy that browsers joined to no Session
// share; agentSandbox keys can't collide with it (they hold a newline).
const publicSandbox = "public"

func agentSandbox(agent, user string) string { return "agent\n" + agent + "\n" + user }

// sandboxAgent is the group of a sandbox key: its agent (a sub holds no
// newline: visible ASCII), or the shared copy's own.
func sandboxAgent(key string) string {
	if i := strings.LastIndexByte(key, '\n'); i > 0 {
		return key[:i]
	}
	return key
}

// sandboxKey is the key of the data r sees: its browser's Session's agent
// and User when it is joined, the shared copy otherwise.
func (s *Server) sandboxKey(r *http.Request) string {
	if sess, joined := s.sessionOf(r); joined {
		return agentSandbox(sess.Agent, sess.User)
	}
	return publicSandbox
}

// dbOf is the sandbox r sees and changes.
func (s *Server) dbOf(r *http.Request) *shopdb.DB {
	return s.sandboxes.GetFrom(s.sandboxKey(r), s.sourceOf(r), s.now())
}

// reset restores the browser's sandbox to the seeded demo data: the agent
// User's copy for a joined browser, the shared one otherwise. It is a demo
// control with no business effect, so it is not gated.
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	s.sandboxes.ResetFrom(s.sandboxKey(r), s.sourceOf(r), s.now())
	http.Redirect(w, r, "/account?reset=1", http.StatusSeeOther)
}

// sessionOf is the Session r is handled as: an API call's or an MCP tool
// call's, which the Gate verified (webkit.SessionOf; RULES.md choices 7
// and 8), or its browser's join. The same describe and handler serve every
// interface: each sees the agent's own sandbox and account.
func (s *Server) sessionOf(r *http.Request) (webkit.Session, bool) {
	if sess, ok := webkit.SessionOf(r.Context()); ok {
		return sess, true
	}
	return s.kit.Sessions.SessionOf(r)
}
