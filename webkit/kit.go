package webkit

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/securecookie"

	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/store"
)

// Defaults of a Kit's fields.
const (
	DefaultMaxBody    = 1 << 20          // bytes of a gated request body kept for Continue
	DefaultLifetime   = 10 * time.Minute // a revision's lifetime: minutes to read and decide (W39)
	DefaultBasePath   = "/_opsgate/"     // the kit's browser-facing routes
	DefaultRetryAfter = 5 * time.Second  // Retry-After of a 503 (§7 W143)
)

// Kit is a website's configuration of operations on its web pages
// (operations-v3 §4 "Websites", §6 "Websites"). [New] returns one with
// working defaults; change its exported fields before serving. A Kit is
// safe for concurrent use once it serves.
//
// Every instance of a website that shares one Store performs each operation
// at most once (§7); instances must also share the cookie keys given to
// [New], so that each reads the others' join cookies and waiting pages.
type Kit struct {
	// Store keeps operations and approvals. New uses store.NewMemory(),
	// right for one process; every instance of a website behind a load
	// balancer shares one store/redisstore instead.
	Store store.Store
	// Sessions tells the Gate which Session a browser is joined to (§4).
	// New uses a [CookieSessions] with its keys.
	Sessions Sessions
	// OwnLogin reports whether the browser has a login of the website's own
	// that its join did not give it. Such a browser is not handled as the
	// Session and gets the website's own approval flow: the wrapped handler
	// (§4 W56). nil: no browser has one.
	OwnLogin func(r *http.Request, s Session) bool
	// Clock is the time; nil is time.Now. Tests move it instead of sleeping.
	Clock func() time.Time
	// Logger gets the kit's logs; nil is slog.Default(). The kit never logs
	// Poppy-Session, Authorization, the join cookie or a request body.
	Logger *slog.Logger
	// Observer counts what the Gate does; nil observes nothing.
	Observer Observer
	// MaxBody is the longest gated request body the Gate reads, to replay it
	// in Continue and hand it to the handler; longer bodies get 413.
	// 0 is DefaultMaxBody.
	MaxBody int64
	// Lifetime is how long a revision may be approved when the action does
	// not say (W39); 0 is DefaultLifetime.
	Lifetime time.Duration
	// BasePath is where [Kit.Handler] serves its routes (waiting.js,
	// fetch.js, opsgate.css, status); it begins and ends with "/".
	// "" is DefaultBasePath.
	BasePath string
	// RetryAfter is the Retry-After of a 503; 0 is DefaultRetryAfter.
	RetryAfter time.Duration

	// ExtensionRequired answers a gated request from a Session that did not
	// declare operations v3 (§2 W11, W12). nil: 403
	// {"error":"extension_required","extension":"operations"}.
	// FailureReason(r) is ErrExtensionRequired.
	ExtensionRequired http.Handler
	// Waiting answers a gated request that waits for approval (§4). The Gate
	// has already set Poppy-Operation; the handler answers 403 with
	// Cache-Control: no-store (W53, W68) and never puts the operation in the
	// body (W64). [WaitingOf] gives it the Continue control and the status
	// route. nil: the kit's waiting page, or {"error":"approval_required"}
	// for a script that accepts JSON (W65, W66). FailureReason(r) is
	// ErrApprovalRequired.
	Waiting http.Handler
	// Unavailable answers a gated request the kit can't handle now: the
	// store failed (FailureReason: ErrStoreUnavailable) or the operation is
	// being performed (ErrBusy). Nothing was performed. nil: 503 with
	// Retry-After (§7 W143).
	Unavailable http.Handler
	// OwnFlowOnMissingExtension hands a gated request from a Session that
	// did not declare operations v3 to the wrapped handler, the website's
	// own approval flow, instead of refusing it (§2 W12).
	OwnFlowOnMissingExtension bool

	// seal encrypts the waiting page's handle on its ref (W64).
	seal     []securecookie.Codec
	sealOnce sync.Once
}

// Reasons a Gate did not hand a request to the handler, as FailureReason
// reports them; compare with errors.Is.
var (
	ErrExtensionRequired = errors.New("webkit: the Session did not declare operations v3")
	ErrApprovalRequired  = errors.New("webkit: the action waits for approval")
	ErrStoreUnavailable  = errors.New("webkit: the store is unavailable")
	ErrBusy              = errors.New("webkit: the operation is being performed")
	ErrDescribe          = errors.New("webkit: describe could not read the request")
	ErrBodyTooLarge      = errors.New("webkit: request body too large")
)

// New returns a Kit with working defaults: the in-memory store, join
// cookies (CookieSessions) and waiting-page handles protected by keys, a
// 10-minute revision lifetime, 1 MiB bodies, routes under /_opsgate/.
//
// keys are securecookie pairs: a hash key (32 or 64 bytes) and an encryption
// key (16, 24 or 32 bytes), then older pairs still accepted, for rotation.
// With no keys New generates random ones: joins and waiting pages then last
// only as long as the process, and instances don't understand each other's,
// so give every instance of a website the same keys.
func New(keys ...[]byte) *Kit {
	if len(keys) == 0 {
		keys = [][]byte{randomKey(64), randomKey(32)}
	}
	return &Kit{
		Store:    store.NewMemory(),
		Sessions: NewCookieSessions(keys...),
		seal:     sealCodecs(keys),
	}
}

func randomKey(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

func sealCodecs(keys [][]byte) []securecookie.Codec {
	codecs := securecookie.CodecsFromPairs(keys...)
	for _, c := range codecs {
		if sc, ok := c.(*securecookie.SecureCookie); ok {
			sc.MaxAge(int(maxWait / time.Second))
			sc.SetSerializer(securecookie.JSONEncoder{})
		}
	}
	return codecs
}

// maxWait bounds how long a waiting page's handle works.
const maxWait = 24 * time.Hour

// defaultStore is the store of a Kit built without New.
var (
	defaultStoreOnce sync.Once
	defaultStore     store.Store
)

func (k *Kit) store() store.Store {
	if k.Store != nil {
		return k.Store
	}
	defaultStoreOnce.Do(func() { defaultStore = store.NewMemory() })
	return defaultStore
}

func (k *Kit) sessions() Sessions {
	if k.Sessions != nil {
		return k.Sessions
	}
	return noSessions{}
}

func (k *Kit) now() time.Time {
	if k.Clock != nil {
		return k.Clock()
	}
	return time.Now()
}

func (k *Kit) logger() *slog.Logger {
	if k.Logger != nil {
		return k.Logger
	}
	return slog.Default()
}

func (k *Kit) observer() Observer {
	if k.Observer != nil {
		return k.Observer
	}
	return NopObserver{}
}

func (k *Kit) maxBody() int64 {
	if k.MaxBody > 0 {
		return k.MaxBody
	}
	return DefaultMaxBody
}

func (k *Kit) lifetime() time.Duration {
	if k.Lifetime > 0 {
		return k.Lifetime
	}
	return DefaultLifetime
}

func (k *Kit) retryAfter() time.Duration {
	if k.RetryAfter > 0 {
		return k.RetryAfter
	}
	return DefaultRetryAfter
}

func (k *Kit) basePath() string {
	p := k.BasePath
	if p == "" {
		return DefaultBasePath
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

func (k *Kit) sealCodecs() []securecookie.Codec {
	k.sealOnce.Do(func() {
		if k.seal == nil {
			k.seal = sealCodecs([][]byte{randomKey(64), randomKey(32)})
		}
	})
	return k.seal
}

// noSessions is the Sessions of a Kit built without New: no browser is
// joined, so every request passes through.
type noSessions struct{}

func (noSessions) SessionOf(*http.Request) (Session, bool) { return Session{}, false }
func (noSessions) Bind(http.ResponseWriter, *http.Request, Session) error {
	return errors.New("webkit: Kit.Sessions is not set")
}
func (noSessions) Unbind(http.ResponseWriter, *http.Request) error { return nil }

// failure is the context value that carries why the Gate refused.
type failureKey struct{}

// FailureReason returns why the Gate handed r to one of the Kit's replaceable
// handlers (ExtensionRequired, Waiting, Unavailable), or nil. Compare it
// with errors.Is against ErrExtensionRequired, ErrApprovalRequired,
// ErrStoreUnavailable and ErrBusy.
func FailureReason(r *http.Request) error {
	err, _ := r.Context().Value(failureKey{}).(error)
	return err
}

func withFailure(r *http.Request, err error) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), failureKey{}, err))
}

// The default replaceable handlers.

func (k *Kit) extensionRequired(w http.ResponseWriter, r *http.Request) {
	if k.ExtensionRequired != nil {
		k.ExtensionRequired.ServeHTTP(w, r)
		return
	}
	pages.WriteExtensionRequired(w)
}

func (k *Kit) unavailable(w http.ResponseWriter, r *http.Request) {
	if k.Unavailable != nil {
		k.Unavailable.ServeHTTP(w, r)
		return
	}
	pages.WriteUnavailable(w, r, k.retryAfter(), k.basePath()+"opsgate.css")
}

func (k *Kit) waiting(w http.ResponseWriter, r *http.Request) {
	if k.Waiting != nil {
		k.Waiting.ServeHTTP(w, r)
		return
	}
	v, _ := WaitingOf(r)
	pages.WriteWaiting(w, r, v)
}
