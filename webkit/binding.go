package webkit

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// hostPrefix is the cookie name prefix that browsers accept only from a
// secure origin, with Secure, Path=/ and no Domain (RFC 6265bis §4.1.3.2):
// a sibling subdomain or a plain-http page can then neither set nor
// overwrite the join cookie.
const hostPrefix = "__Host-"

// hostOnly reports whether the cookies can carry hostPrefix: Secure,
// host-only and on the whole site.
func (c *CookieSessions) hostOnly() bool {
	return !c.Insecure && c.Domain == "" && (c.Path == "" || c.Path == "/")
}

// boundName is the name of the binding marker (see markBound).
func (c *CookieSessions) boundName() string {
	return c.name() + "_bound"
}

// bindingMark is what the marker cookie carries: which agent and User the
// browser is bound to, as a digest, and since when.
type bindingMark struct {
	Digest   string `json:"b"`
	JoinedAt int64  `json:"joined"`
}

func bindingDigest(agent, user string) string {
	sum := sha256.Sum256([]byte(agent + "\n" + user))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// markBound sets the binding marker next to the join cookie. The join
// cookie is SameSite=Lax, so a browser does not send it with a cross-site
// form POST, which is how every join arrives (the agent's page, or a
// hostile one, posts to the join endpoint). The marker is SameSite=None so
// that the join sees, even then, that the browser is already bound, and to
// whom (issue 10: a page must not rebind a joined browser to another
// Session). It authorizes nothing and names no one: an encrypted digest of
// the agent and User. Over plain http (Insecure) browsers refuse
// SameSite=None without Secure, so it is Lax there and conflicts are seen
// on same-site joins only.
func (c *CookieSessions) markBound(w http.ResponseWriter, s Session) error {
	value, err := securecookie.EncodeMulti(c.boundName(), bindingMark{
		Digest:   bindingDigest(s.Agent, s.User),
		JoinedAt: c.now().Unix(),
	}, c.codecs...)
	if err != nil {
		return err
	}
	opts := c.options()
	if !c.Insecure {
		opts.SameSite = http.SameSiteNoneMode
	}
	http.SetCookie(w, sessions.NewCookie(c.boundName(), value, opts))
	return nil
}

// unmarkBound expires the binding marker.
func (c *CookieSessions) unmarkBound(w http.ResponseWriter) {
	opts := c.options()
	opts.MaxAge = -1
	if !c.Insecure {
		opts.SameSite = http.SameSiteNoneMode
	}
	http.SetCookie(w, sessions.NewCookie(c.boundName(), "", opts))
}

// boundTo reports whether r's browser is bound to a Session of another
// agent or User than s, from the join cookie when the request carries it
// (same-site) and from the marker otherwise.
func (c *CookieSessions) boundElsewhere(r *http.Request, s Session) bool {
	if cur, ok := c.SessionOf(r); ok {
		return cur.Agent != s.Agent || cur.User != s.User
	}
	ck, err := r.Cookie(c.boundName())
	if err != nil || len(ck.Value) > maxJoinCookie {
		return false
	}
	var m bindingMark
	if securecookie.DecodeMulti(c.boundName(), ck.Value, &m, c.codecs...) != nil || m.Digest == "" {
		return false
	}
	// As the join cookie's: never refused for a join "in the future" (a
	// server whose clock is ahead made it), kept joinSkew past its end.
	if c.now().After(time.Unix(m.JoinedAt, 0).Add(c.maxAge() + joinSkew)) {
		return false
	}
	return m.Digest != bindingDigest(s.Agent, s.User)
}

// hasHostPrefix reports whether name carries hostPrefix.
func hasHostPrefix(name string) bool { return strings.HasPrefix(name, hostPrefix) }
