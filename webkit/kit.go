package webkit

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/respond"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/templates"
)

// Defaults New fills in.
const (
	// defaultMaxBody is the longest gated request body the Gate reads, to
	// repeat it in Continue and hand it to the handler; longer ones get
	// 413. A gated action is a small form or JSON body: Continue can't
	// send files again.
	defaultMaxBody = 1 << 20
	// defaultLifetime is how long a revision may be approved when the
	// Action doesn't say: minutes to read and decide (W39).
	defaultLifetime = 10 * time.Minute
	// defaultBasePath is where the Mount serves the kit's browser-facing
	// routes (waiting.js, fetch.js, card.js, opsgate.css, status).
	defaultBasePath = respond.BasePath
	// defaultRetryAfter is the Retry-After of a 503 or a 429 (§7 W143).
	defaultRetryAfter = 5 * time.Second
)

// Kit is a website's configuration of operations on its web pages
// (§4 "Websites", §6 "Websites"; see RULES.md). Build it with [New], the
// only way: New fills in working defaults; change its exported fields
// before serving. A Kit is safe for concurrent use once it serves. The
// Gate, and the endpoint and join that endpoint.NewMount builds, read
// Store, StoreTimeout, Clock, Logger and Observer from the Kit whenever
// they use them: one Kit, whether a field is set before or after
// NewMount.
//
// A Kit that can't work fails loudly when the website is wired, before
// any request is served: endpoint.NewMount returns why (keys New refused,
// a Kit not built by New, a nil Store or Sessions), and Gate panics with
// it.
//
// Every instance of a website that shares one Store performs each operation
// at most once (§7); instances must also share the cookie keys given to
// [New], so that each reads the others' join cookies and waiting pages.
type Kit struct {
	// Store keeps operations and approvals. New uses memstore.New(memstore.Config{}),
	// right for one process; every instance of a website behind a load
	// balancer shares one store/redisstore instead.
	Store store.Store
	// Sessions tells the Gate which Session a browser is joined to (§4).
	// New uses a [CookieSessions] with its keys.
	Sessions Sessions
	// OwnLogin reports whether the browser has a login of the website's own
	// that its join did not give it. Such a browser is not handled as the
	// Session: it gets the website's own approval flow (§4 W56). nil: no
	// browser has one.
	//
	// By default the Gate never calls the handler for a gated request of
	// such a browser, as if a person had clicked: it hands the request to
	// Kit.Refused with FailureReason ErrOwnLogin, whose default answer (403)
	// tells the person to confirm the action on the website itself. A
	// website answers ErrOwnLogin with its own approval flow (a
	// confirmation page that asks the person), or says that its gated
	// handlers are that flow with OwnFlowInHandler.
	OwnLogin func(r *http.Request, s Session) bool
	// OwnFlowInHandler says that the gated handlers themselves are the
	// website's own approval flow for a browser with its own login
	// (OwnLogin): they never perform a gated action for that login without
	// the person's confirmation on the website, such as a confirmation
	// page that asks for the password again (webkit/SECURITY.md). The Gate
	// then hands such requests straight to the handler (W56). false, the
	// default: the Gate refuses them with ErrOwnLogin.
	OwnFlowInHandler bool
	// Clock is the time, of the Gate and of the join cookies; nil is
	// time.Now. Tests move it instead of sleeping.
	Clock func() time.Time
	// Logger gets the kit's logs; nil is slog.Default(). The kit never logs
	// Poppy-Session, Authorization, the join cookie or a request body.
	Logger *slog.Logger
	// Observer sees what the Gate, the status route, the endpoint and the
	// join do, and each store step's latency; nil observes nothing. See
	// webkit/metrics/prometheus and webkit/metrics/otel; for spans,
	// webkit/tracing/otel, an Observer with the metrics one behind it.
	Observer Observer
	// Chrome is the website's own frame around every page the kit writes
	// (waiting, try again, not known yet, too many waiting): its name, a
	// way back, its stylesheets, its own header and footer as templ
	// components. The zero Chrome is the kit's plain card. It never shows
	// the operation (W64).
	Chrome templates.Chrome
	// StoreTimeout is the deadline of each store call the kit makes (the
	// Gate, the status route, and the endpoint endpoint.NewMount builds):
	// with the store stalled, a gated request performs nothing and gets
	// 503 with Retry-After within about StoreTimeout, and requests the
	// Gate doesn't gate never wait on the store. New sets 1 second.
	StoreTimeout time.Duration
	// ExplainRefusals, for a test or staging website, has every refusal
	// the kit makes to an agent or its browser say why in words beside
	// the spec's error: an "error_description" member in JSON (§4 allows
	// other members), the reason on the join's refusal and on the kit's
	// pages. It names which claim of which token failed (Session JWT,
	// join assertion, delegation, access token) and why, which check of
	// the join failed, and why a ref can't be used (altered, another
	// agent's or User's, expired, stale), so that an agent's developer
	// learns what went wrong without reading the website's log. It never
	// shows a token, a key, or another agent's, User's or account's data,
	// but it tells anyone what the website checks and expects: leave it
	// off in production (the default), where a refusal says only its
	// error code.
	ExplainRefusals bool

	// Refused answers every gated request the Gate does not hand to the
	// handler: nil is the kit's own answers ([Kit.Refuse]). It reads why
	// from [FailureReason]; a replacement answers the reasons it cares
	// about and hands the others to kit.Refuse. Before it runs the Gate
	// has set Cache-Control: no-store (W68), Poppy-Operation when approval
	// is required (W53) and Retry-After when the answer is a 503 or a 429
	// (W143); it writes the status of its reason and a body that never
	// names the operation (W64):
	//
	//	ErrApprovalRequired   403, the waiting page (W65) or, for a script,
	//	                      {"error":"approval_required"} (W66); kit.Refuse
	//	                      writes the kit's, whose Continue repeats the
	//	                      request (W62), in Chrome
	//	ErrExtensionRequired  403 {"error":"extension_required",
	//	                      "extension":"operations"} (§2 W11, W12)
	//	ErrStoreUnavailable   503: nothing was performed (§7 W143)
	//	ErrBusy               503: the operation is being performed (W145)
	//	ErrOutcomeUnknown     503: the handler failed or panicked while
	//	                      performing; never say the action failed (W142)
	//	ErrRateLimited        429: too many operations wait for approval
	//	                      (RULES.md "Bounded work")
	//	ErrJoinInvalid        403: the browser's join cookie can't be
	//	                      accepted (expired, or made with other keys);
	//	                      the page says to join again. Nothing was done.
	//	ErrOwnLogin           403: the browser has the website's own login
	//	                      (OwnLogin): the website's own approval flow
	//	                      answers; the kit's page says to confirm the
	//	                      action on the website. Nothing was done (W56).
	Refused http.Handler

	// maxBodyBytes, when set (by tests), replaces defaultMaxBody.
	maxBodyBytes int64
	// seal encrypts the waiting page's handle on its ref (W64).
	seal handleSeal
	// wrapped is the store the kit calls (see store()).
	wrapped storewrap.Cached
	// retries are the Releases and Finishes that failed, tried again
	// until they land (retry.go).
	retries retries
	// built says New made the Kit; err is what it found wrong with its
	// keys (Check).
	built bool
	err   error
}

// Reasons a Gate did not hand a request to the handler, as FailureReason
// reports them; compare with errors.Is.
var (
	ErrExtensionRequired = errors.New("webkit: the Session did not declare operations v3")
	ErrApprovalRequired  = errors.New("webkit: the action waits for approval")
	ErrStoreUnavailable  = errors.New("webkit: the store is unavailable")
	ErrBusy              = errors.New("webkit: the operation is being performed")
	ErrOutcomeUnknown    = errors.New("webkit: the action's outcome is not known yet")
	ErrRateLimited       = errors.New("webkit: too many operations wait for approval")
	// ErrJoinInvalid: the browser carries a join cookie that this server
	// can't accept (expired, or made with keys it doesn't have). It was
	// joined to a Session, so its gated request is neither an ordinary
	// browser's nor performed: it must join again.
	ErrJoinInvalid = errors.New("webkit: the browser's join can't be accepted: join again")
	// ErrOwnLogin: the browser has a login of the website's own
	// (Kit.OwnLogin), so it gets the website's own approval flow, not an
	// operation (§4 W56), and the Gate does not perform the action for it.
	ErrOwnLogin = errors.New("webkit: the browser has the website's own login: confirm on the website")
)

// ErrBoundElsewhere is returned by Sessions.Bind for a browser bound to a
// Session of another agent or User: it is not rebound (login CSRF, issue
// 10). The join answers it 409.
var ErrBoundElsewhere = errors.New("webkit: the browser is bound to another agent's or User's Session")

// errBodyTooLarge is a gated request body over defaultMaxBody: 413.
var errBodyTooLarge = errors.New("webkit: request body too large")

// New returns a Kit with working defaults, filled in so that they can be
// read: the in-memory store, join cookies (CookieSessions) and waiting-page
// handles protected by keys, a 10-minute revision lifetime, 1 MiB bodies,
// the kit's routes under /_opsgate/ (served by endpoint.Mount).
//
// keys are securecookie pairs: a hash key (32 or 64 bytes) and an encryption
// key (16, 24 or 32 bytes), then older pairs still accepted, for rotation.
// Keys of other lengths, or a hash key without its encryption key, are an
// error that endpoint.NewMount returns (and Gate panics with): a short
// key would protect the join cookie far less than it seems to.
// With no keys New generates random ones: joins and waiting pages then last
// only as long as the process, and instances don't understand each other's,
// so give every instance of a website the same keys.
func New(keys ...[]byte) *Kit {
	if len(keys) == 0 {
		keys = [][]byte{randomKey(64), randomKey(32)}
	}
	k := &Kit{
		Store:        memstore.New(memstore.Config{}),
		StoreTimeout: defaultStoreTimeout,
		built:        true,
	}
	if k.err = checkKeys(keys...); k.err != nil {
		return k
	}
	cs := newCookieSessions(keys...)
	cs.clock = k.now   // the join cookies read Kit.Clock
	cs.store = k.store // and keep Unbind's markers in Kit.Store
	k.Sessions = cs
	k.seal = newHandleSeal(keys)
	return k
}

// errKeys is wrapped by the error of keys that can't protect the kit's
// cookies.
var errKeys = errors.New("webkit: cookie keys")

// checkKeys reports whether keys are securecookie pairs New can use: each
// pair a hash key of 32 or 64 bytes and an encryption key of 16, 24 or 32.
func checkKeys(keys ...[]byte) error {
	if len(keys) == 0 || len(keys)%2 != 0 {
		return fmt.Errorf("%w: want pairs of a hash key and an encryption key, got %d keys", errKeys, len(keys))
	}
	for i := 0; i < len(keys); i += 2 {
		if n := len(keys[i]); n != 32 && n != 64 {
			return fmt.Errorf("%w: pair %d: hash key is %d bytes, want 32 or 64", errKeys, i/2+1, n)
		}
		if n := len(keys[i+1]); n != 16 && n != 24 && n != 32 {
			return fmt.Errorf("%w: pair %d: encryption key is %d bytes, want 16, 24 or 32", errKeys, i/2+1, n)
		}
	}
	return nil
}

// Check reports what makes the Kit unusable: keys New refused, a Kit not
// built by New, or a Store or Sessions set to nil. endpoint.NewMount
// returns its error, and Gate panics with it, so that a website stops
// while it is wired, before it serves.
func (k *Kit) Check() error {
	switch {
	case k == nil:
		return errors.New("webkit: Kit is nil: build one with webkit.New")
	case !k.built:
		return errors.New("webkit: Kit not built by webkit.New: build it with webkit.New(keys...)")
	case k.err != nil:
		return k.err
	case k.Store == nil:
		return errors.New("webkit: Kit.Store is nil")
	case !isKitStore(k.Store):
		return fmt.Errorf("webkit: Kit.Store is a %T: set the Kit's default in-memory store or store/redisstore's", k.Store)
	case k.Sessions == nil:
		return errors.New("webkit: Kit.Sessions is nil")
	}
	return nil
}

// mustCheck panics with check's error: Gate is called while the website
// is wired, so a bad Kit stops it before it serves.
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

// store is Kit.Store with each call's deadline (StoreTimeout), so that
// failing closed takes bounded time, and each step seen by the Observer.
func (k *Kit) store() storedriver.Store {
	var o storewrap.StepObserver
	if k.Observer != nil {
		o = k.Observer
	}
	d, _ := storedriver.Of(k.Store) // Check refused any other
	return k.wrapped.Wrap(d, k.storeTimeout(), o)
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
	if k.maxBodyBytes > 0 { // tests
		return k.maxBodyBytes
	}
	return defaultMaxBody
}

func (k *Kit) lifetime() time.Duration {
	return defaultLifetime
}

func (k *Kit) retryAfter() time.Duration {
	return defaultRetryAfter
}

func (k *Kit) basePath() string { return defaultBasePath }

func isKitStore(s store.Store) bool {
	_, ok := storedriver.Of(s)
	return ok
}
