package webkit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/securecookie"
	"github.com/gorilla/sessions"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storewrap"
)

// Sessions binds browsers to the Poppy Sessions they were joined to (spec 6
// "browser join"; RULES.md choice 3). The Gate asks SessionOf on every
// gated route, so it must answer quickly and without I/O for a browser that
// was never joined.
type Sessions interface {
	// SessionOf returns the Session r's browser is joined to; false for an
	// ordinary browser, or a binding that is missing, expired, forged or
	// ended by Unbind.
	SessionOf(r *http.Request) (Session, bool)
	// Bind joins the browser to s: the kit's join endpoint calls it, or the
	// website's own login callback when its identity provider hosts the
	// join. Binding a signed-in Session is "a join with an access token"
	// (§4 W54): call it with Account set only after the token was verified.
	Bind(w http.ResponseWriter, r *http.Request, s Session) error
	// Unbind ends the binding, when the Session ends or signs out; the
	// browser's copy of it, replayed later, no longer works.
	Unbind(w http.ResponseWriter, r *http.Request) error
}

// Defaults of CookieSessions.
const (
	joinCookieName    = "opsgate_join"
	defaultJoinMaxAge = 12 * time.Hour
)

// CookieSessions keeps a browser's binding in one encrypted and
// authenticated cookie (gorilla/securecookie codecs as gorilla/sessions'
// CookieStore makes them, gorilla/sessions cookie options, JSON inside):
// the Session's sid, agent, User, account, declared extensions and when it
// was joined. The cookie is HttpOnly, SameSite=Lax, Secure unless Insecure
// is set, and lasts MaxAge. Change the fields before serving.
//
// The cookie's value is a credential of the browser's join: the kit never
// logs it. Unbind leaves a marker in the Kit's Store, until the cookie
// would have expired, so that a copy of an unbound cookie, replayed, is no
// binding; the Gate and the status route check it on a joined browser's
// requests (one store read), never on an ordinary browser's.
type CookieSessions struct {
	// Name is the cookie's name; "" is "opsgate_join". A Secure cookie on
	// Path "/" without Domain gets the __Host- prefix, as the browser then
	// stores it ("__Host-opsgate_join" by default): a website that filters
	// cookies out of its logs or caches filters that name, and the
	// "_bound" marker beside it.
	Name string
	// Path and Domain scope the cookie; "" Path is "/".
	Path, Domain string
	// MaxAge bounds a binding's life; 0 is 12 hours. It is checked
	// against the join time inside the cookie as well as by the browser.
	MaxAge time.Duration
	// Insecure drops the Secure attribute, for local development over
	// plain http only.
	Insecure bool
	// clock is the time: the Kit's Clock (New sets it); nil is time.Now.
	clock func() time.Time
	// store is the Kit's Store, with its deadline (New sets it), where
	// Unbind leaves its markers; nil keeps none.
	store func() storedriver.Store

	codecs  []securecookie.Codec
	decoded decodedCookies
}

// newCookieSessions returns CookieSessions protected by keys: securecookie
// pairs of a hash key (32 or 64 bytes) and an encryption key (16, 24 or 32
// bytes). The first pair protects new cookies; later pairs are old keys
// still accepted, so keys rotate by putting the new pair first.
func newCookieSessions(keys ...[]byte) *CookieSessions {
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
	// Expires is when the binding ends (Unix seconds), decided by the
	// server that joined it: its clock plus MaxAge. A cookie without it
	// (made before it was added) ends MaxAge after JoinedAt.
	Expires int64 `json:"exp,omitempty"`
}

// joinSkew is how long after its expiry, on the clock of the server that
// reads it, a join cookie is still a binding: the clocks of the web
// servers sharing the cookie keys may disagree by that much. A cookie is
// never refused for having been made "in the future" (on a server whose
// clock is ahead). Whatever the skew, a browser whose join cookie a server
// can't accept is never handled as an ordinary browser on a gated route:
// the Gate refuses the request (ErrJoinInvalid), so too large a skew only
// makes an agent join again sooner (webkit/DEPLOYING.md).
const joinSkew = 5 * time.Minute

// maxJoinCookie bounds the cookie value decoded (securecookie's own limit).
const maxJoinCookie = 4096

func (c *CookieSessions) name() string {
	name := c.Name
	if name == "" {
		name = joinCookieName
	}
	if !c.hostOnly() || hasHostPrefix(name) {
		return name
	}
	if name == joinCookieName {
		return hostPrefix + joinCookieName // a constant: no allocation per request
	}
	return hostPrefix + name
}

func (c *CookieSessions) maxAge() time.Duration {
	if c.MaxAge > 0 {
		return c.MaxAge
	}
	return defaultJoinMaxAge
}

func (c *CookieSessions) now() time.Time {
	if c.clock != nil {
		return c.clock()
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
// expired, forged or unreadable cookie is simply no binding, and so is one
// Unbind ended: for a cookie that reads as a binding it asks the Kit's
// Store (in r's context) whether Unbind left its marker, and a store that
// fails to answer makes it no binding too. (The Gate and the status route
// answer 503 instead when the store fails, and the Gate refuses a gated
// request whose join cookie is there but can't be accepted: ErrJoinInvalid.)
func (c *CookieSessions) SessionOf(r *http.Request) (Session, bool) {
	b, st := c.current(r)
	if st != bindOK {
		return Session{}, false
	}
	if ended, err := c.ended(r.Context(), b); err != nil || ended {
		return Session{}, false
	}
	return b.session, true
}

// bindState is what a request's join cookie is.
type bindState uint8

const (
	bindNone     bindState = iota // no join cookie: an ordinary browser
	bindOK                        // a binding that has not expired
	bindUnusable                  // a join cookie this server can't accept
)

// current returns the binding r's cookie carries when it is one that has
// not expired, without asking whether Unbind ended it (ended does); and
// bindUnusable for a join cookie that is there but is no binding here:
// undecodable (forged, changed, or made with keys this server doesn't
// have), incomplete, too long, or past its expiry by more than joinSkew.
// Such a browser was joined to a Session, so it must not be handled as an
// ordinary one on a gated route (the Gate refuses it: ErrJoinInvalid).
func (c *CookieSessions) current(r *http.Request) (binding, bindState) {
	if c == nil || !hasCookie(r, c.name()) {
		return binding{}, bindNone
	}
	b, ok := c.read(r)
	if !ok {
		return binding{}, bindUnusable
	}
	// The expiry is the joining server's; this server's clock may be behind
	// or ahead of it by up to joinSkew (never refused for a join time "in
	// the future").
	if c.now().After(b.expires.Add(joinSkew)) {
		return binding{}, bindUnusable
	}
	return b, bindOK
}

// ended reports whether Unbind ended b: whether its marker is in the
// Kit's Store. One read, and none without a store.
func (c *CookieSessions) ended(ctx context.Context, b binding) (bool, error) {
	if c.store == nil {
		return false, nil
	}
	return storewrap.Marked(ctx, c.store(), b.unbound, c.now())
}

// joinedAt returns when the browser was joined to its Session.
func (c *CookieSessions) joinedAt(r *http.Request) (time.Time, bool) {
	if c == nil || !hasCookie(r, c.name()) {
		return time.Time{}, false
	}
	b, ok := c.read(r)
	return b.joined, ok
}

func (c *CookieSessions) read(r *http.Request) (binding, bool) {
	value, ok := cookieValue(r, c.name())
	if !ok || len(value) > maxJoinCookie {
		return binding{}, false
	}
	// Decoding (HMAC, AES, JSON) was a joined request's largest cost; the
	// same browser sends the same value on every request.
	if b, ok := c.decoded.get(value); ok {
		return b, true
	}
	var cs cookieSession
	if securecookie.DecodeMulti(c.name(), value, &cs, c.codecs...) != nil || cs.ID == "" || cs.Agent == "" || cs.User == "" {
		return binding{}, false
	}
	joined := time.Unix(cs.JoinedAt, 0)
	expires := joined.Add(c.maxAge()) // a cookie made before it carried its expiry
	if cs.Expires != 0 {
		expires = time.Unix(cs.Expires, 0)
	}
	b := binding{session: Session{
		ID:         cs.ID,
		Agent:      cs.Agent,
		User:       cs.User,
		Account:    cs.Account,
		Extensions: cs.Extensions,
	}, joined: joined, expires: expires, unbound: unboundKey(cs.Agent, cs.User, value)}
	c.decoded.put(value, b)
	return b, true
}

// unboundKey is the single-use key (storedriver.Store.UseOnce) of the marker
// Unbind leaves for the cookie value: a digest of the value, which is
// different for every Bind (securecookie encrypts with a random IV and
// stamps the time), so it names this one binding and can't be made
// without the cookie. It is a key of the binding's owner
// (storekit.OnceKey): with the owner's records (on Redis, in their
// Cluster slot), so that the Gate's Take checks it in the same step
// (storekit.MarkedInTake). The "unbound:" prefix keeps it apart from the
// other single-use keys the kit makes (a jti's: "jti:").
func unboundKey(agent, user, value string) string {
	sum := sha256.Sum256([]byte(value))
	return storekit.OnceKey(agent, user, "unbound:"+base64.RawURLEncoding.EncodeToString(sum[:16]))
}

// cookieValue returns the value of r's first cookie named name, without
// parsing the others (r.Cookie allocates for every cookie of the site's).
// A quoted value is unquoted as net/http does.
func cookieValue(r *http.Request, name string) (string, bool) {
	for _, line := range r.Header["Cookie"] {
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = strings.TrimSpace(part)
			if len(part) > len(name) && part[len(name)] == '=' && part[:len(name)] == name {
				v := part[len(name)+1:]
				if len(v) > 1 && v[0] == '"' && v[len(v)-1] == '"' {
					v = v[1 : len(v)-1]
				}
				return v, true
			}
		}
	}
	return "", false
}

// binding is a decoded join cookie.
type binding struct {
	session Session
	joined  time.Time
	expires time.Time // decided by the server that joined it
	unbound string    // the key of the marker Unbind leaves (unboundKey)
}

// decodedCookies remembers decoded join cookies by their exact value, in
// two generations of at most decodedPerGeneration each: bounded memory,
// and a cookie in use stays. Only cookies that decoded and verified are
// kept, so a forged value is checked every time; the binding's age is
// still checked on every request (SessionOf).
type decodedCookies struct {
	mu        sync.Mutex
	cur, prev map[string]binding
}

const decodedPerGeneration = 4096

func (d *decodedCookies) get(value string) (binding, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.cur[value]; ok {
		return b, true
	}
	b, ok := d.prev[value]
	if ok {
		d.putLocked(value, b)
	}
	return b, ok
}

func (d *decodedCookies) put(value string, b binding) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.putLocked(value, b)
}

func (d *decodedCookies) putLocked(value string, b binding) {
	if d.cur == nil || len(d.cur) >= decodedPerGeneration {
		d.prev, d.cur = d.cur, make(map[string]binding, 64)
	}
	d.cur[value] = b
}

// Bind joins the browser to s by setting the cookie; the join time is now.
// A browser bound to a Session of another agent or User is not rebound
// (ErrBoundElsewhere): any page can post a join (login CSRF), and its next
// gated action would belong to the other Session; Unbind it first. The
// same agent and User may replace their Session.
func (c *CookieSessions) Bind(w http.ResponseWriter, r *http.Request, s Session) error {
	switch {
	case s.ID == "":
		return errors.New("webkit: bind: Session.ID (sid) is empty")
	case s.Agent == "":
		return errors.New("webkit: bind: Session.Agent is empty")
	case s.User == "":
		return errors.New("webkit: bind: Session.User is empty")
	}
	if c.boundElsewhere(r, s) {
		return ErrBoundElsewhere
	}
	now := c.now()
	value, err := securecookie.EncodeMulti(c.name(), cookieSession{
		ID:         s.ID,
		Agent:      s.Agent,
		User:       s.User,
		Account:    s.Account,
		Extensions: s.Extensions,
		JoinedAt:   now.Unix(),
		Expires:    now.Add(c.maxAge()).Unix(),
	}, c.codecs...)
	if err != nil {
		return fmt.Errorf("webkit: bind: cookie %s: %w", c.name(), err)
	}
	http.SetCookie(w, sessions.NewCookie(c.name(), value, c.options()))
	return c.markBound(w, s)
}

// Unbind removes the binding: the cookie and the kit join's binding
// marker expire now, and, when r carries a join cookie that is a binding,
// a marker in the Kit's Store says it ended, until any server would
// refuse the cookie (its expiry plus joinSkew): a copy of the cookie
// replayed later is no binding. It returns an error when the store could not keep the marker;
// the browser's cookies are expired all the same.
func (c *CookieSessions) Unbind(w http.ResponseWriter, r *http.Request) error {
	opts := c.options()
	opts.MaxAge = -1
	http.SetCookie(w, sessions.NewCookie(c.name(), "", opts))
	c.unmarkBound(w)
	b, st := c.current(r)
	if st != bindOK || c.store == nil {
		return nil
	}
	// Kept as long as any server may still accept the cookie.
	if _, err := c.store().UseOnce(r.Context(), b.unbound, b.expires.Add(joinSkew), c.now()); err != nil {
		return fmt.Errorf("webkit: unbind: the store kept no marker, so a copy of the cookie still works until it expires: %w", err)
	}
	return nil
}
