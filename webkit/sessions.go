package webkit

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"
)

// Sessions binds browsers to the Poppy Sessions they were joined to (spec 6
// "browser join"; poppy-core choice 3). The Gate asks SessionOf on every
// gated route, so it must answer quickly and without I/O for a browser that
// was never joined.
type Sessions interface {
	// SessionOf returns the Session r's browser is joined to; false for an
	// ordinary browser, or a binding that is missing, expired or forged.
	SessionOf(r *http.Request) (Session, bool)
	// Bind joins the browser to s: the kit's join endpoint calls it, or the
	// website's own login callback when its identity provider hosts the
	// join. Binding a signed-in Session is "a join with an access token"
	// (§4 W54): call it with Account set only after the token was verified.
	Bind(w http.ResponseWriter, r *http.Request, s Session) error
	// Unbind ends the binding, when the Session ends or signs out.
	Unbind(w http.ResponseWriter, r *http.Request) error
}

// Defaults of CookieSessions.
const (
	JoinCookieName    = "opsgate_join"
	DefaultJoinMaxAge = 12 * time.Hour
)

// CookieSessions keeps a browser's binding in one encrypted and
// authenticated cookie (gorilla/securecookie codecs as gorilla/sessions'
// CookieStore makes them, gorilla/sessions cookie options, JSON inside):
// the Session's sid, agent, User, account, declared extensions and when it
// was joined. The cookie is HttpOnly, SameSite=Lax, Secure unless Insecure
// is set, and lasts MaxAge. Change the fields before serving.
//
// The cookie's value is a credential of the browser's join: the kit never
// logs it.
type CookieSessions struct {
	// Name is the cookie's name; "" is JoinCookieName.
	Name string
	// Path and Domain scope the cookie; "" Path is "/".
	Path, Domain string
	// MaxAge bounds a binding's life; 0 is DefaultJoinMaxAge. It is checked
	// against the join time inside the cookie as well as by the browser.
	MaxAge time.Duration
	// Insecure drops the Secure attribute, for local development over
	// plain http only.
	Insecure bool
	// Clock is the time; nil is time.Now.
	Clock func() time.Time

	codecs []securecookie.Codec
}

// NewCookieSessions returns CookieSessions protected by keys: securecookie
// pairs of a hash key (32 or 64 bytes) and an encryption key (16, 24 or 32
// bytes). The first pair protects new cookies; later pairs are old keys
// still accepted, so keys rotate by putting the new pair first.
func NewCookieSessions(keys ...[]byte) *CookieSessions {
	codecs := securecookie.CodecsFromPairs(keys...)
	for _, codec := range codecs {
		if sc, ok := codec.(*securecookie.SecureCookie); ok {
			// The binding's age is checked against its join time, on the
			// injectable clock, in SessionOf; not here on the wall clock.
			sc.MaxAge(0)
			// JSON, not gob: a gob decoder compiles its types for every
			// cookie, which was most of a joined request's cost.
			sc.SetSerializer(securecookie.JSONEncoder{})
		}
	}
	return &CookieSessions{codecs: codecs}
}

// cookieSession is the binding as the cookie carries it.
type cookieSession struct {
	ID         string            `json:"sid"`
	Agent      string            `json:"agent"`
	User       string            `json:"user"`
	Account    string            `json:"account,omitempty"`
	Extensions map[string]string `json:"ext,omitempty"`
	JoinedAt   int64             `json:"joined"` // Unix seconds
}

// maxJoinCookie bounds the cookie value decoded (securecookie's own limit).
const maxJoinCookie = 4096

func (c *CookieSessions) name() string {
	if c.Name != "" {
		return c.Name
	}
	return JoinCookieName
}

func (c *CookieSessions) maxAge() time.Duration {
	if c.MaxAge > 0 {
		return c.MaxAge
	}
	return DefaultJoinMaxAge
}

func (c *CookieSessions) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}

// options are the cookie's attributes, from the current fields.
func (c *CookieSessions) options() *sessions.Options {
	path := c.Path
	if path == "" {
		path = "/"
	}
	return &sessions.Options{
		Path:     path,
		Domain:   c.Domain,
		MaxAge:   int(c.maxAge() / time.Second),
		Secure:   !c.Insecure,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// hasCookie reports, without allocating, whether r carries a cookie named
// name: an ordinary browser's request costs nothing more (§4 W07).
func hasCookie(r *http.Request, name string) bool {
	for _, line := range r.Header["Cookie"] {
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = strings.TrimLeft(part, " \t")
			if len(part) > len(name) && part[len(name)] == '=' && part[:len(name)] == name {
				return true
			}
		}
	}
	return false
}

// SessionOf returns the Session the browser is joined to. A missing,
// expired, forged or unreadable cookie is simply no binding.
func (c *CookieSessions) SessionOf(r *http.Request) (Session, bool) {
	if c == nil || !hasCookie(r, c.name()) {
		return Session{}, false
	}
	s, joined, ok := c.read(r)
	if !ok {
		return Session{}, false
	}
	// A minute of clock skew between web servers is forgiven.
	if age := c.now().Sub(joined); age < -time.Minute || age > c.maxAge() {
		return Session{}, false
	}
	return s, true
}

// JoinedAt returns when the browser was joined to its Session.
func (c *CookieSessions) JoinedAt(r *http.Request) (time.Time, bool) {
	if c == nil || !hasCookie(r, c.name()) {
		return time.Time{}, false
	}
	_, joined, ok := c.read(r)
	return joined, ok
}

func (c *CookieSessions) read(r *http.Request) (Session, time.Time, bool) {
	ck, err := r.Cookie(c.name())
	if err != nil || len(ck.Value) > maxJoinCookie {
		return Session{}, time.Time{}, false
	}
	var cs cookieSession
	if securecookie.DecodeMulti(c.name(), ck.Value, &cs, c.codecs...) != nil || cs.ID == "" || cs.Agent == "" || cs.User == "" {
		return Session{}, time.Time{}, false
	}
	return Session{
		ID:         cs.ID,
		Agent:      cs.Agent,
		User:       cs.User,
		Account:    cs.Account,
		Extensions: Extensions(cs.Extensions),
	}, time.Unix(cs.JoinedAt, 0), true
}

// Bind joins the browser to s by setting the cookie; the join time is now.
func (c *CookieSessions) Bind(w http.ResponseWriter, r *http.Request, s Session) error {
	switch {
	case s.ID == "":
		return errors.New("webkit: bind: Session.ID (sid) is empty")
	case s.Agent == "":
		return errors.New("webkit: bind: Session.Agent is empty")
	case s.User == "":
		return errors.New("webkit: bind: Session.User is empty")
	}
	value, err := securecookie.EncodeMulti(c.name(), cookieSession{
		ID:         s.ID,
		Agent:      s.Agent,
		User:       s.User,
		Account:    s.Account,
		Extensions: s.Extensions,
		JoinedAt:   c.now().Unix(),
	}, c.codecs...)
	if err != nil {
		return fmt.Errorf("webkit: bind: cookie %s: %w", c.name(), err)
	}
	http.SetCookie(w, sessions.NewCookie(c.name(), value, c.options()))
	return nil
}

// Unbind removes the binding: the cookie expires now.
func (c *CookieSessions) Unbind(w http.ResponseWriter, r *http.Request) error {
	opts := c.options()
	opts.MaxAge = -1
	http.SetCookie(w, sessions.NewCookie(c.name(), "", opts))
	return nil
}
