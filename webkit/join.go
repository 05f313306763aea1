package webkit

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/opsgate/opsgate/webkit/identity"
)

// Join is the kit's browser_session_endpoint (poppy-core choice 3): the
// Personal Agent's browser POSTs a form with `assertion` (a
// poppy-browser+jwt) and, for a signed-in join, `access_token`. Join
// verifies them (1), records the declared extensions (2: "step 2" of §2,
// W10) and binds the browser to the Session (3), then answers 303 to
// return_to.
//
// A website whose identity provider hosts the join does not mount Join: its
// login callback calls Kit.Sessions.Bind with the Session it verified.
type Join struct {
	Kit *Kit
	// URL is this endpoint's own absolute URL, the aud of every assertion.
	URL string
	// Verifier verifies assertions (its Origin is the Company's origin,
	// which return_to must be on).
	Verifier *identity.Verifier
	// AccessTokens verifies the access token of a signed-in join; nil
	// refuses signed-in joins.
	AccessTokens identity.AccessTokens
}

// MaxJoinBody bounds the join form: an assertion and an access token.
const MaxJoinBody = 64 << 10

// ServeHTTP implements the join.
func (j *Join) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		joinError(w, http.StatusMethodNotAllowed, "the join takes a POSTed form")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxJoinBody)
	// A form body only: an assertion never travels in a URL (poppy-core 3).
	if err := r.ParseForm(); err != nil || len(r.URL.Query()) > 0 && r.URL.Query().Has("assertion") {
		joinError(w, http.StatusBadRequest, "send assertion in an application/x-www-form-urlencoded body")
		return
	}
	assertion, token := r.PostForm.Get("assertion"), r.PostForm.Get("access_token")
	if assertion == "" || len(r.PostForm["assertion"]) != 1 || len(r.PostForm["access_token"]) > 1 {
		joinError(w, http.StatusBadRequest, "exactly one assertion is required")
		return
	}
	log := j.Kit.logger()
	// 1. Verify the assertion (aud = this URL, lifetime ≤ 60 s, single-use
	// jti, return_to on our origin) and, signed in, the access token.
	a, err := j.Verifier.VerifyBrowserAssertion(r.Context(), assertion, j.URL, token)
	if err != nil {
		j.refuse(w, log, err)
		return
	}
	s := Session{ID: a.SID, Agent: a.ClientID, User: a.User}
	if token != "" {
		if j.AccessTokens == nil {
			joinError(w, http.StatusUnauthorized, "this website takes no signed-in joins")
			return
		}
		at, err := j.AccessTokens.VerifyAccessToken(r.Context(), token)
		if err == nil {
			err = identity.CheckAccessToken(a.Session, at)
		}
		if err == nil && at.Account == "" {
			err = errors.New("the access token names no account")
		}
		if err != nil {
			j.refuse(w, log, err)
			return
		}
		s.Account = at.Account // W54: signed in through a join with an access token
	}
	// 2. Record the declared extensions (W10). An unreadable declaration
	// declares nothing: the browser then gets no operations (W11).
	if a.Extensions != "" {
		if ext, err := ParseExtensions([]string{a.Extensions}); err == nil {
			s.Extensions = ext
		}
	}
	// 3. Bind the browser to the Session.
	if err := j.Kit.sessions().Bind(w, r, s); err != nil {
		log.Error("opsgate join: cannot bind the browser", "err", err)
		joinError(w, http.StatusInternalServerError, "the join could not be completed")
		return
	}
	log.Info("opsgate join: browser joined", "sid", s.ID, "signed_in", s.SignedIn(), "operations", s.Extensions.Operations())
	http.Redirect(w, r, a.ReturnTo, http.StatusSeeOther)
}

func (j *Join) refuse(w http.ResponseWriter, log *slog.Logger, err error) {
	if errors.Is(err, identity.ErrUnavailable) {
		log.Warn("opsgate join: cannot verify now", "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(j.Kit.retryAfter().Seconds())))
		joinError(w, http.StatusServiceUnavailable, "the join cannot be verified now; try again")
		return
	}
	log.Info("opsgate join: refused", "err", err)
	joinError(w, http.StatusUnauthorized, "the join could not be verified")
}

func joinError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write([]byte(msg + "\n"))
}
