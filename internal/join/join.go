// Package join is the kit's browser_session_endpoint (webkit/RULES.md
// choice 3), as endpoint.Mount serves it at /poppy/join: the Personal
// Agent's browser POSTs a signed assertion, and the join binds the browser
// to the agent's Session through the Kit's Sessions.
package join

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// New returns the kit's browser_session_endpoint (RULES.md choice 3) for
// kit, as endpoint.NewMount mounts it: the Personal Agent's browser POSTs a
// form with `assertion` (a poppy-browser+jwt) and, for a signed-in join,
// `access_token`. It verifies them (1), records the declared extensions
// (2: "step 2" of §2, W10) and binds the browser to the Session (3), then
// answers 303 to return_to.
//
// url is the join's own absolute URL, the aud of every assertion; v, the
// verifier endpoint.NewMount builds, verifies assertions (its Origin is the
// Company's origin, which return_to must be on); tokens verifies the access token of a signed-in join, and
// nil refuses signed-in joins.
//
// A website whose identity provider hosts the join does not mount it: its
// login callback calls Kit.Sessions.Bind with the Session it verified.
func New(kit *webkit.Kit, url string, v *siteverify.Verifier, tokens identity.AccessTokens) http.Handler {
	return &joinEndpoint{Kit: kit, URL: url, Verifier: v, AccessTokens: tokens}
}

// joinEndpoint is the join New returns.
type joinEndpoint struct {
	Kit *webkit.Kit
	// URL is this endpoint's own absolute URL, the aud of every assertion.
	URL string
	// Verifier verifies assertions (its Origin is the Company's origin,
	// which return_to must be on).
	Verifier *siteverify.Verifier
	// AccessTokens verifies the access token of a signed-in join; nil
	// refuses signed-in joins.
	AccessTokens identity.AccessTokens
}

// maxJoinBody bounds the join form: an assertion and an access token.
const maxJoinBody = 64 << 10

// Bounds of what a join stores in the browser's binding (issue 10): with
// them the largest binding fits a cookie (4096 bytes), so no join is
// refused with a 5xx for its size. sid and sub are bounded to 255 bytes by
// the identity package (RULES.md choice 1).
const (
	// maxJoinClientID bounds the agent's client_id; longer is 401.
	maxJoinClientID = 1024
	// maxJoinAccount bounds the account an access token names; longer is
	// 401.
	maxJoinAccount = 255
	// maxJoinVersion bounds the declared operations version kept.
	maxJoinVersion = 32
)

// ServeHTTP implements the join.
func (j *joinEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// For the Observer: what became of the join, and at which step.
	outcome, reason := "refused", "request"
	r, sp := spans.Begin(r, j.Kit.Observer, "opsgate.join", spans.Labels{Route: routeJoin})
	defer sp.End(spans.Labels{}, nil) // after the Event below, which labels it
	defer func() {
		if o := j.Kit.Observer; o != nil {
			o.Observe(r.Context(), webkit.Event{Route: routeJoin, Outcome: outcome, Reason: reason})
		}
	}()
	if err := j.Kit.Check(); err != nil { // not wired by NewMount, which checks
		j.logger().LogAttrs(r.Context(), slog.LevelError, "opsgate: join: unusable Kit", slog.String("error", err.Error()))
		joinError(w, http.StatusInternalServerError, "the join is not configured")
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		joinError(w, http.StatusMethodNotAllowed, "the join takes a POSTed form")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxJoinBody)
	// A form body only: an assertion never travels in a URL (RULES.md 3).
	if err := r.ParseForm(); err != nil || len(r.URL.Query()) > 0 && r.URL.Query().Has("assertion") {
		joinError(w, http.StatusBadRequest, "send assertion in an application/x-www-form-urlencoded body")
		return
	}
	assertion, token := r.PostForm.Get("assertion"), r.PostForm.Get("access_token")
	if assertion == "" || len(r.PostForm["assertion"]) != 1 || len(r.PostForm["access_token"]) > 1 {
		joinError(w, http.StatusBadRequest, "exactly one assertion is required")
		return
	}
	log := j.logger()
	// 1. Verify the assertion (aud = this URL, lifetime ≤ 60 s, return_to
	// on our origin) and, signed in, the access token. Its single-use jti
	// is used up last, once the join can succeed: an assertion refused
	// for another reason (a conflict, an unusable access token) is not
	// spent.
	reason = "assertion"
	a, err := j.Verifier.CheckBrowserAssertion(r.Context(), assertion, j.URL, token)
	if err == nil && len(a.ClientID) > maxJoinClientID {
		err = fmt.Errorf("client_id (iss) is longer than %d bytes", maxJoinClientID)
	}
	if err != nil {
		if errors.Is(err, identity.ErrUnavailable) {
			outcome = "unavailable"
		}
		j.refuse(w, log, err)
		return
	}
	s := webkit.Session{ID: a.SID, Agent: a.ClientID, User: a.User}
	if token != "" {
		reason = "access_token"
		if j.AccessTokens == nil {
			j.refuse(w, log, errors.New("this website takes no signed-in joins: join without access_token"))
			return
		}
		at, err := j.AccessTokens.VerifyAccessToken(r.Context(), token)
		if err == nil {
			err = siteverify.CheckAccessToken(a.Caller, at)
		}
		if err == nil && (at.Account == "" || len(at.Account) > maxJoinAccount) {
			err = fmt.Errorf("the access token names no account of 1–%d bytes", maxJoinAccount)
		}
		if err != nil {
			if errors.Is(err, identity.ErrUnavailable) {
				outcome = "unavailable"
			}
			j.refuse(w, log, err)
			return
		}
		s.Account = at.Account // W54: signed in through a join with an access token
	}
	// 2. Record the declared extensions (W10). Only the one the kit knows
	// is kept, so the binding stays small whatever is declared. An
	// unreadable declaration declares nothing: the browser then gets no
	// operations (W11).
	s.Extensions = knownExtensions(a.Extensions)
	// A browser bound to another agent's or User's Session is not rebound:
	// any page can post a join (login CSRF), and the browser's next gated
	// action would belong to the other Session. The same agent and User
	// may replace their Session.
	ss := j.Kit.Sessions
	if cur, ok := ss.SessionOf(r); ok && (cur.Agent != s.Agent || cur.User != s.User) {
		conflict(w, log, &reason)
		return
	}
	// 3. Bind the browser to the Session: the cookies are made first, the
	// jti is used up next, and only then are the cookies sent. Sessions
	// that see the browser bound elsewhere (CookieSessions' binding
	// marker, sent even with a cross-site POST) refuse to rebind it.
	held := &heldHeader{h: http.Header{}}
	if err := ss.Bind(held, r, s); errors.Is(err, webkit.ErrBoundElsewhere) {
		conflict(w, log, &reason)
		return
	} else if err != nil {
		log.Error("opsgate join: cannot bind the browser", "err", err)
		outcome, reason = "unavailable", "bind"
		joinError(w, http.StatusInternalServerError, "the join could not be completed")
		return
	}
	reason = "assertion"
	if err := j.Verifier.UseBrowserAssertion(r.Context(), a); err != nil {
		if errors.Is(err, identity.ErrUnavailable) {
			outcome = "unavailable"
		}
		j.refuse(w, log, err)
		return
	}
	for _, v := range held.h.Values("Set-Cookie") {
		w.Header().Add("Set-Cookie", v)
	}
	log.Info("opsgate join: browser joined", "sid", s.ID, "signed_in", (s.Account != ""), "operations", headers.DeclaresOperations(s.Extensions))
	outcome, reason = "joined", "signed_out"
	if s.Account != "" {
		reason = "signed_in"
	}
	http.Redirect(w, r, a.ReturnTo, http.StatusSeeOther)
}

// knownExtensions parses a join's extensions claim and keeps what the kit
// knows: the operations declaration, when its version is short enough to
// mean something.
func knownExtensions(claim string) map[string]string {
	if claim == "" {
		return nil
	}
	ext, err := headers.ParseExtensions([]string{claim})
	if err != nil {
		return nil
	}
	v, ok := ext[headers.OperationsExtension]
	if !ok || len(v) > maxJoinVersion {
		return nil
	}
	return map[string]string{headers.OperationsExtension: v}
}

// heldHeader is a ResponseWriter that only collects headers: Bind's
// cookies are held until the join can succeed.
type heldHeader struct{ h http.Header }

func (w *heldHeader) Header() http.Header         { return w.h }
func (w *heldHeader) Write(b []byte) (int, error) { return len(b), nil }
func (w *heldHeader) WriteHeader(int)             {}

func (j *joinEndpoint) refuse(w http.ResponseWriter, log *slog.Logger, err error) {
	if errors.Is(err, identity.ErrUnavailable) {
		log.Warn("opsgate join: cannot verify now", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter.Seconds())))
		joinError(w, http.StatusServiceUnavailable, "the join cannot be verified now; try again")
		return
	}
	log.Info("opsgate join: refused", "err", err)
	// Every 401 carries a challenge (RFC 9110 §15.5.2; RULES.md choice 5).
	w.Header().Set("WWW-Authenticate", `Poppy-Session error="invalid_session"`)
	msg := "the join could not be verified"
	if j.Kit.ExplainRefusals {
		// The check that failed, for the agent's developer: the same
		// words the operations endpoint sends in error_description.
		msg += " (invalid_session): " + explain.Reason(err)
	}
	joinError(w, http.StatusUnauthorized, msg)
}

// conflict refuses a join into a browser bound to another agent's or
// User's Session: any page can post a join (login CSRF), and the
// browser's next gated action would belong to the other Session (issue
// 10). The same agent and User may replace their Session.
func conflict(w http.ResponseWriter, log *slog.Logger, reason *string) {
	*reason = "conflict"
	log.Info("opsgate join: refused, the browser is bound to another Session")
	joinConflict(w)
}

// joinConflict is the short page of a join into a browser bound to another
// Session.
func joinConflict(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'")
	w.WriteHeader(http.StatusConflict)
	w.Write([]byte(conflictPage))
}

const conflictPage = `<!doctype html>
<html lang="en"><meta charset="utf-8"><title>Already joined</title>
<h1>This browser is already joined to another session</h1>
<p>It was not joined again. End the other session first, or use another browser profile.</p>
</html>
`

func joinError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write([]byte(msg + "\n"))
}

// routeJoin is the join's route in the Observer's events.
const routeJoin = "join"

// retryAfter is the Retry-After of a join that can't be verified now (§7
// W143), as the Gate's.
const retryAfter = 5 * time.Second

func (j *joinEndpoint) logger() *slog.Logger {
	if j.Kit.Logger != nil {
		return j.Kit.Logger
	}
	return slog.Default()
}
