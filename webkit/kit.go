package webkit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// (§4 "Websites", §6 "Websites"; see RULES.md). [New] returns one with
// working defaults; change its exported fields before serving. A Kit is
// safe for concurrent use once it serves.
//
// A zero Kit works safely, as one process: at first use it takes an
// in-memory store and join cookies under random keys, and logs a warning
// once, since joins then end with the process and other instances can't
// read them. A Kit from New with unusable keys fails loudly: [Kit.Check]
// returns the error, and Gate and Handler panic with it when the website
// is wired, before any request is served.
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
	// Observer sees what the Gate, the status route and (through
	// Kit.Observe) the endpoint and the join do, and each store step's
	// latency; nil observes nothing. Set it before endpoint.NewMount,
	// which hands it to the endpoint. See
	// webkit/metrics/prometheus and webkit/metrics/otel.
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
	// Chrome is the website's own frame around the kit's pages (waiting,
	// try again, not known yet): its name, a way back, its stylesheets, its
	// own header and footer as templ components. The zero Chrome is the
	// kit's plain card. It never shows the operation (W64).
	Chrome pages.Chrome
	// StoreTimeout is the deadline of each store call the kit makes (the
	// Gate, the status route, and the endpoint endpoint.NewMount builds): with
	// the store stalled, a gated request performs nothing and gets 503
	// with Retry-After within about StoreTimeout, and requests the Gate
	// doesn't gate never wait on the store. 0 is DefaultStoreTimeout. See
	// WithStoreTimeout.
	StoreTimeout time.Duration

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
	// OutcomeUnknown answers a performed request whose outcome is unknown:
	// the handler answered 5xx or panicked before writing anything (§7
	// W142, W143). The operation stays performing; the browser must not be
	// told the action failed. nil: 503 with Retry-After and the kit's "not
	// known yet" page, or {"error":"outcome_unknown"} for a script that
	// accepts JSON. FailureReason(r) is ErrOutcomeUnknown.
	OutcomeUnknown http.Handler
	// OwnFlowOnMissingExtension hands a gated request from a Session that
	// did not declare operations v3 to the wrapped handler, the website's
	// own approval flow, instead of refusing it (§2 W12).
	OwnFlowOnMissingExtension bool

	// seal encrypts the waiting page's handle on its ref (W64).
	seal     handleSeal
	sealOnce sync.Once
	// wrapped is the store the kit calls (see store()).
	wrapped atomic.Pointer[wrappedStore]
	// err is what New found wrong with its keys (Check).
	err error
	// zeroSessions are the join cookies of a Kit built without New.
	zeroOnce     sync.Once
	zeroSessions Sessions
}

// Reasons a Gate did not hand a request to the handler, as FailureReason
// reports them; compare with errors.Is.
var (
	ErrExtensionRequired = errors.New("webkit: the Session did not declare operations v3")
	ErrApprovalRequired  = errors.New("webkit: the action waits for approval")
	ErrStoreUnavailable  = errors.New("webkit: the store is unavailable")
	ErrBusy              = errors.New("webkit: the operation is being performed")
	ErrOutcomeUnknown    = errors.New("webkit: the action's outcome is not known yet")
	ErrDescribe          = errors.New("webkit: describe could not read the request")
	ErrBodyTooLarge      = errors.New("webkit: request body too large")
)

// New returns a Kit with working defaults, filled in so that they can be
// read: the in-memory store, join cookies (CookieSessions) and waiting-page
// handles protected by keys, a 10-minute revision lifetime, 1 MiB bodies,
// routes under BasePath /_opsgate/.
//
// keys are securecookie pairs: a hash key (32 or 64 bytes) and an encryption
// key (16, 24 or 32 bytes), then older pairs still accepted, for rotation.
// Keys of other lengths, or a hash key without its encryption key, are an
// error that [Kit.Check] returns (and Gate and Handler panic with): a short
// key would protect the join cookie far less than it seems to.
// With no keys New generates random ones: joins and waiting pages then last
// only as long as the process, and instances don't understand each other's,
// so give every instance of a website the same keys.
func New(keys ...[]byte) *Kit {
	if len(keys) == 0 {
		keys = [][]byte{randomKey(64), randomKey(32)}
	}
	k := &Kit{
		Store:      store.NewMemory(),
		MaxBody:    DefaultMaxBody,
		Lifetime:   DefaultLifetime,
		BasePath:   DefaultBasePath,
		RetryAfter: DefaultRetryAfter,
	}
	if k.err = CheckKeys(keys...); k.err != nil {
		return k
	}
	k.Sessions = NewCookieSessions(keys...)
	k.seal = newHandleSeal(keys)
	return k
}

// ErrKeys is wrapped by the error of keys that can't protect the kit's
// cookies.
var ErrKeys = errors.New("webkit: cookie keys")

// CheckKeys reports whether keys are securecookie pairs New can use: each
// pair a hash key of 32 or 64 bytes and an encryption key of 16, 24 or 32.
func CheckKeys(keys ...[]byte) error {
	if len(keys) == 0 || len(keys)%2 != 0 {
		return fmt.Errorf("%w: want pairs of a hash key and an encryption key, got %d keys", ErrKeys, len(keys))
	}
	for i := 0; i < len(keys); i += 2 {
		if n := len(keys[i]); n != 32 && n != 64 {
			return fmt.Errorf("%w: pair %d: hash key is %d bytes, want 32 or 64", ErrKeys, i/2+1, n)
		}
		if n := len(keys[i+1]); n != 16 && n != 24 && n != 32 {
			return fmt.Errorf("%w: pair %d: encryption key is %d bytes, want 16, 24 or 32", ErrKeys, i/2+1, n)
		}
	}
	return nil
}

// Check reports what makes the Kit unusable: keys New refused. A zero Kit
// checks out (it uses random keys; see Kit).
func (k *Kit) Check() error {
	if k == nil {
		return errors.New("webkit: Kit is nil")
	}
	return k.err
}

// mustCheck panics with Check's error: Gate and Handler are called while
// the website is wired, so a bad Kit stops it before it serves.
func (k *Kit) mustCheck() {
	if err := k.Check(); err != nil {
		panic(err)
	}
}

func randomKey(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

// maxWait bounds how long a waiting page's handle works.
const maxWait = 24 * time.Hour

// defaultStore is the store of a Kit built without New.
var (
	defaultStoreOnce sync.Once
	defaultStore     store.Store
)

func (k *Kit) store() store.Store {
	s := k.Store
	if s == nil {
		defaultStoreOnce.Do(func() { defaultStore = store.NewMemory() })
		s = defaultStore
	}
	d, o := k.storeTimeout(), k.Observer
	// The wrapped store is kept while the fields it was made of stay the
	// same: wrapping on every call cost allocations on every request.
	if w := k.wrapped.Load(); w != nil && w.d == d && same(w.base, s) && same(w.o, o) {
		return w.s
	}
	w := &wrappedStore{base: s, d: d, o: o}
	// Each call has its own deadline, so failing closed takes bounded time.
	w.s = WithStoreTimeout(s, d)
	if o != nil { // each step's latency and errors
		w.s = observedStore{Store: w.s, s: w.s, o: o}
	}
	k.wrapped.Store(w)
	return w.s
}

// wrappedStore is Kit.Store with the kit's deadline and Observer, and what
// it was made of.
type wrappedStore struct {
	base store.Store
	d    time.Duration
	o    Observer
	s    store.Store
}

// same reports whether a and b are the same value, without panicking on
// values of types that can't be compared.
func same(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

func (k *Kit) sessions() Sessions {
	if k.Sessions != nil {
		return k.Sessions
	}
	if k.err != nil { // New refused the keys: nobody is joined
		return noSessions{}
	}
	// A zero Kit: join cookies under random keys, for this process only.
	k.zeroOnce.Do(func() {
		k.logger().Warn("opsgate: Kit built without webkit.New: join cookies use random keys and last only as long as this process; use New with keys shared by every instance")
		k.zeroSessions = NewCookieSessions(randomKey(64), randomKey(32))
	})
	return k.zeroSessions
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

func (k *Kit) handleSeal() handleSeal {
	k.sealOnce.Do(func() {
		if k.seal.aeads == nil {
			k.seal = newHandleSeal([][]byte{randomKey(64), randomKey(32)})
		}
	})
	return k.seal
}

// noSessions is the Sessions of a Kit whose keys New refused: no browser
// is joined, and a join fails.
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
	pages.WriteUnavailable(w, r, k.retryAfter(), pages.Unavailable{StyleURL: k.basePath() + "opsgate.css", Chrome: k.Chrome})
}

func (k *Kit) outcomeUnknown(w http.ResponseWriter, r *http.Request) {
	if k.OutcomeUnknown != nil {
		k.OutcomeUnknown.ServeHTTP(w, r)
		return
	}
	pages.WriteOutcomeUnknown(w, r, k.retryAfter(), pages.Unavailable{StyleURL: k.basePath() + "opsgate.css", Chrome: k.Chrome})
}

func (k *Kit) waiting(w http.ResponseWriter, r *http.Request) {
	if k.Waiting != nil {
		k.Waiting.ServeHTTP(w, r)
		return
	}
	v, _ := WaitingOf(r)
	pages.WriteWaiting(w, r, v)
}
