package conformance_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/justinas/nosurf"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/opsendpoint"
	"github.com/opsgate/opsgate/internal/siteverify"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storewrap"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/templates"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/identity"
)

// toy is a small website built on the kit, as a website team would build
// one: two exchanges (one per order) gated for any joined browser, and an
// account closure gated for signed-in browsers, whose agent approvals it
// declines. fault breaks one rule on purpose, at one of the kit's seams.
type toy struct {
	url   string
	fault string
	kit   *webkit.Kit
	mount *endpoint.Mount
	ep    *opsendpoint.Endpoint // the toy's endpoint, in front of the Mount's

	issuer *ecdsa.PrivateKey

	mu        sync.Mutex
	performed map[string]int // by action key
	sizes     map[string]string
	lastSess  *webkit.Session // for the "unjoined gets an operation" fault
	firstRev  map[string]string
	claims    map[string]recentClaim
	posts     atomic.Int32 // POSTs to the site's own routes
}

type recentClaim struct {
	claim store.Claim
	at    time.Time
}

// The faults: each breaks the rules one case of the checker proves.
const (
	faultPerformsWithoutApproval = "performs without approval"
	faultOperationInPage         = "puts the operation in the page"
	faultRecordsDeclined         = "records a declined approval"
	faultReusesRevision          = "reuses a revision for new terms"
	faultPerformsTwice           = "performs twice under concurrent repeats"
	faultAcceptsOtherUser        = "accepts another User's approval"
	fault500OnBadHeader          = "answers 500 to a bad Poppy-Approval"
	faultUnjoinedGetsOperation   = "gives an unjoined browser an operation"
	faultUndeclaredGetsOperation = "gives an undeclared browser an operation"
	faultNoStore                 = "caches the 403"
	faultUncheckedJWT            = "does not verify the Session JWT's signature"
	faultNoChallenge             = "answers 401 without WWW-Authenticate"
	faultTermsMissTheSize        = "leaves the size out of the terms"
	faultNoSignInChallenge       = "lets a signed-out Session see an account's operation"
	faultBrowserApproval         = "takes an approval from the browser"
	faultEmptyContinue           = "renders an empty Continue form"
)

// Not faults: websites wired another way, which must pass.
const (
	// nosurf inside the Mount, as webkit/GUIDE.md "CSRF" says: it reads its token from
	// the form before the Gate runs (issue 22).
	variantNosurf = "justinas/nosurf inside the Mount"
	// A middleware inside the Mount that calls r.ParseForm (a logger, a
	// method override): the body is spent before the Gate.
	variantParsesForm = "a middleware that parses the form before the Gate"
)

func newToy(t *testing.T, fault string) *toy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &toy{url: "http://" + ln.Addr().String(), fault: fault, performed: map[string]int{}, sizes: map[string]string{},
		firstRev: map[string]string{}, claims: map[string]recentClaim{}}
	s.issuer, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	kit := webkit.New(randomKey(64), randomKey(32))
	kit.Logger = slog.New(slog.DiscardHandler)
	if fault == faultEmptyContinue {
		// The kit's waiting page with its Continue form emptied: what the
		// Gate rendered when a middleware had read the body (issue 22).
		kit.Refused = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v, ok := pages.WaitingOf(r)
			if !ok {
				kit.Refuse(w, r)
				return
			}
			v.Continue.Fields = nil
			pages.Waiting(w, r, v, templates.Chrome{})
		})
	}
	st := memstore.New(memstore.Config{})
	kit.Store = st
	if fault == faultPerformsTwice {
		kit.Store = storedriver.AsStore(&racyStore{Store: st.Steps(), t: s})
	}
	if cs, ok := kit.Sessions.(*webkit.CookieSessions); ok {
		cs.Insecure = true
	}
	kit.Sessions = &toySessions{Sessions: kit.Sessions, t: s}
	s.kit = kit
	tokens := &identity.JWTAccessTokens{Issuer: s.url, Keys: map[string]crypto.PublicKey{"k1": s.issuer.Public()}}
	s.mount, err = endpoint.NewMount(endpoint.Config{
		Origin: s.url, Name: "Toy Shop", Kit: kit, AccessTokens: tokens, AllowLocal: true,
		Decline: s.decline,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The toy's own endpoint, built as the Mount builds its own, with the
	// toy's faults in its Authenticator.
	verifier := &siteverify.Verifier{Origin: s.url, Resolver: &identity.Resolver{AllowLocal: true, Clock: kit.Clock},
		Replay: storewrap.WithTimeout(storedriver.Steps(kit.Store), kit.StoreTimeout), Clock: kit.Clock}
	s.ep = opsendpoint.New(kit, &toyAuth{next: opsendpoint.IdentityAuthenticator{Verifier: verifier, AccessTokens: tokens}, t: s})
	s.ep.Decline = func(ctx context.Context, d opsendpoint.DeclineRequest) *webkit.Decline {
		return s.decline(ctx, endpoint.DeclineRequest(d))
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		page(w, `<a href="/orders/1">Order 1</a> <a href="/orders/2">Order 2</a> <a href="/account">Account</a>
<form method="post" action="/signout"><button>Sign out</button></form>`)
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		s.mu.Lock()
		n, size := s.performed["exchange:"+id], s.sizes[id]
		s.mu.Unlock()
		page(w, fmt.Sprintf(`<h1>Order %s</h1><p>Exchanged %d times; size %s.</p>
<form method="post" action="/orders/%s/exchange"><input type="hidden" name="order" value="%s">%s
<select name="size"><option value="M" selected>M</option><option value="L">L</option><option value="S">S</option></select>
<button>Exchange</button></form>`, id, n, html.EscapeString(size), id, id, s.tokenField(r)))
	})
	mux.Handle("POST /orders/{id}/exchange", s.breakGate(kit.Gate(s.describeExchange)(http.HandlerFunc(s.exchange))))
	// The exchange for a fetch-driven page: a JSON body, and the page
	// script's CSRF header, which the site checks before the Gate.
	mux.Handle("POST /api/orders/{id}/exchange", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-CSRF-Token") != toyCSRFHeader {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":"csrf","description":"the X-CSRF-Token header is missing or wrong"}`)
			return
		}
		kit.Gate(s.describeExchangeJSON)(http.HandlerFunc(s.exchangeJSON)).ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /account", func(w http.ResponseWriter, r *http.Request) {
		page(w, `<form method="post" action="/account/close">`+s.tokenField(r)+`<button>Close the account</button></form>`)
	})
	mux.Handle("POST /account/close", kit.Gate(s.describeClose)(http.HandlerFunc(s.close)))
	mux.HandleFunc("POST /test/token", s.token)

	var inner http.Handler = mux
	switch fault {
	case variantNosurf:
		n := nosurf.New(mux)
		n.ExemptPath("/test/token") // the checker's token URL, not a page's form
		inner = n
	case variantParsesForm:
		inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.ParseForm()
			mux.ServeHTTP(w, r)
		})
	}
	inner = s.countPosts(inner)
	mounted := s.mount.Handler(inner)
	endpointPath := "/poppy/operations"
	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == endpointPath {
			s.ep.ServeHTTP(w, r)
			return
		}
		mounted.ServeHTTP(w, r)
	})
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.breakEndpoint(site)}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

// tokenField is the CSRF token's hidden field for a form, behind nosurf.
func (s *toy) tokenField(r *http.Request) string {
	if s.fault != variantNosurf {
		return ""
	}
	return `<input type="hidden" name="csrf_token" value="` + html.EscapeString(nosurf.Token(r)) + `">`
}

// countPosts counts the POSTs that reach the site's own routes (the
// Mount's routes, such as the join, don't).
func (s *toy) countPosts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path != "/test/token" {
			s.posts.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

func randomKey(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func page(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, "<!doctype html><title>Toy Shop</title>"+body)
}

func (s *toy) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.performed[key]
}

func (s *toy) describeExchange(r *http.Request) (webkit.Action, error) {
	if err := r.ParseForm(); err != nil {
		return webkit.Action{}, webkit.ErrNotGated
	}
	id, size := r.PathValue("id"), r.PostForm.Get("size")
	terms := map[string]any{"order_id": id, "size": size, "price_difference": map[string]string{"amount": "10.00", "currency": "USD"}}
	if s.fault == faultTermsMissTheSize {
		delete(terms, "size")
	}
	return webkit.Action{Key: "exchange:" + id, Terms: terms, Summary: "Exchange the jacket on order " + id + " for size " + size + ", for $10.00 more."}, nil
}

func (s *toy) exchange(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	s.performed["exchange:"+id]++
	s.sizes[id] = r.PostForm.Get("size")
	s.mu.Unlock()
	http.Redirect(w, r, "/orders/"+id, http.StatusSeeOther)
}

// toyCSRFHeader is the value of the toy's page script's CSRF header.
const toyCSRFHeader = "t0ken-for-scripts"

func (s *toy) describeExchangeJSON(r *http.Request) (webkit.Action, error) {
	var req struct{ Size string }
	if json.NewDecoder(r.Body).Decode(&req) != nil || req.Size == "" {
		return webkit.Action{}, webkit.ErrNotGated
	}
	id := r.PathValue("id")
	return webkit.Action{Key: "exchange:" + id, Terms: map[string]any{"order_id": id, "size": req.Size, "price_difference": map[string]string{"amount": "10.00", "currency": "USD"}},
		Summary: "Exchange the jacket on order " + id + " for size " + req.Size + ", for $10.00 more."}, nil
}

func (s *toy) exchangeJSON(w http.ResponseWriter, r *http.Request) {
	var req struct{ Size string }
	if json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
		return
	}
	id := r.PathValue("id")
	s.mu.Lock()
	s.performed["exchange:"+id]++
	s.sizes[id] = req.Size
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"exchanged_for":%q}`, req.Size)
}

func (s *toy) describeClose(r *http.Request) (webkit.Action, error) {
	sess, ok := s.kit.Sessions.SessionOf(r)
	if !ok || !(sess.Account != "") {
		return webkit.Action{}, webkit.ErrNotGated
	}
	return webkit.Action{Key: "close:" + sess.Account, Terms: map[string]string{"account": sess.Account}, Summary: "Close the account " + sess.Account + "."}, nil
}

func (s *toy) close(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.kit.Sessions.SessionOf(r)
	if !ok || !(sess.Account != "") {
		http.Error(w, "sign in first", http.StatusForbidden)
		return
	}
	s.mu.Lock()
	s.performed["close"]++
	s.mu.Unlock()
	http.Redirect(w, r, "/account", http.StatusSeeOther)
}

// decline declines every agent approval of an account closure.
func (s *toy) decline(_ context.Context, d endpoint.DeclineRequest) *webkit.Decline {
	if d.Approval.Approver != store.ApproverAgent || !strings.Contains(string(d.Operation.Terms), `"account"`) {
		return nil
	}
	return &webkit.Decline{OperationID: d.Approval.OperationID, Revision: d.Approval.Revision, Reason: "Only the account holder can close the account."}
}

// token is the test's token endpoint, like the demo's /demo/token.
func (s *toy) token(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	tok, err := agentside.IssueAccessToken(s.issuer, "k1", s.url, r.PostForm.Get("client_id"), "acct_1", time.Hour)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"access_token": tok})
}

// --- the seams where faults go ---

// breakGate wraps the gated exchange route.
func (s *toy) breakGate(gated http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch s.fault {
		case faultBrowserApproval:
			if r.Header.Get(headers.Approval) != "" {
				r.ParseForm()
				s.exchange(w, r)
				return
			}
		case faultPerformsWithoutApproval:
			if _, ok := s.kit.Sessions.SessionOf(r); ok {
				body, _ := io.ReadAll(r.Body)
				r2 := r.Clone(r.Context())
				r2.Body = io.NopCloser(strings.NewReader(string(body)))
				r2.ParseForm()
				s.exchange(httptest.NewRecorder(), r2)
				r.Body = io.NopCloser(strings.NewReader(string(body)))
			}
		case faultOperationInPage, faultNoStore:
			rec := httptest.NewRecorder()
			gated.ServeHTTP(rec, r)
			res := rec.Result()
			for k, v := range res.Header {
				w.Header()[k] = v
			}
			body := rec.Body.Bytes()
			if res.StatusCode == http.StatusForbidden {
				if s.fault == faultNoStore {
					w.Header().Del("Cache-Control")
				} else if _, ref, err := headers.ParseOperation(res.Header.Values("Poppy-Operation")); err == nil {
					op, rev, _ := strings.Cut(ref, ".")
					body = fmt.Appendf(nil, `{"error":"approval_required","operation":{"operation_id":%q,"revision":%q}}`, op, rev)
					w.Header().Set("Content-Type", "application/json")
				}
			}
			w.WriteHeader(res.StatusCode)
			w.Write(body)
			return
		}
		gated.ServeHTTP(w, r)
	})
}

// breakEndpoint wraps the whole site, for faults in the endpoint's answers.
func (s *toy) breakEndpoint(site http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if endpointPath := "/poppy/operations"; r.URL.Path != endpointPath {
			site.ServeHTTP(w, r)
			return
		}
		switch s.fault {
		case fault500OnBadHeader:
			if v := r.Header.Values(headers.Approval); len(v) > 0 {
				if _, err := headers.ParseApproval(v); err != nil {
					http.Error(w, "internal error", http.StatusInternalServerError)
					return
				}
			}
		case faultRecordsDeclined, faultReusesRevision, faultNoChallenge:
		default:
			site.ServeHTTP(w, r)
			return
		}
		if s.fault == faultRecordsDeclined {
			s.ep.Decline = nil // accept, then say it was declined
		}
		rec := httptest.NewRecorder()
		site.ServeHTTP(rec, r)
		res := rec.Result()
		body := rec.Body.Bytes()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		status := res.StatusCode
		switch s.fault {
		case faultRecordsDeclined:
			if ap, err := headers.ParseApproval(r.Header.Values(headers.Approval)); err == nil && status == http.StatusNoContent && ap.Approver == headers.ApproverAgent {
				status = http.StatusForbidden
				w.Header().Set("Content-Type", "application/json")
				body = fmt.Appendf(nil, `{"error":"approval_declined","operation_id":%q,"revision":%q}`, ap.OperationID, ap.Revision)
			}
		case faultReusesRevision:
			var m map[string]any
			if json.Unmarshal(body, &m) == nil {
				if op, ok := m["operation"].(map[string]any); ok {
					id, _ := op["operation_id"].(string)
					s.mu.Lock()
					if first, ok := s.firstRev[id]; ok {
						op["revision"] = first
					} else {
						s.firstRev[id], _ = op["revision"].(string)
					}
					s.mu.Unlock()
					body, _ = json.Marshal(m)
				}
			}
		case faultNoChallenge:
			w.Header().Del("WWW-Authenticate")
		}
		w.WriteHeader(status)
		w.Write(body)
	})
}

// toySessions wraps the kit's Sessions for the faults that mistake which
// browser is joined to what.
type toySessions struct {
	webkit.Sessions
	t *toy
}

func (s *toySessions) SessionOf(r *http.Request) (webkit.Session, bool) {
	sess, ok := s.Sessions.SessionOf(r)
	t := s.t
	switch {
	case ok && t.fault == faultUndeclaredGetsOperation:
		sess.Extensions = map[string]string{"operations": "3"}
	case ok && t.fault == faultAcceptsOtherUser:
		sess.User = "everyone"
	case ok && t.fault == faultUnjoinedGetsOperation:
		t.mu.Lock()
		t.lastSess = &sess
		t.mu.Unlock()
	case !ok && t.fault == faultUnjoinedGetsOperation:
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.lastSess != nil {
			return *t.lastSess, true
		}
	}
	return sess, ok
}

// toyAuth wraps the endpoint's Authenticator.
type toyAuth struct {
	next opsendpoint.Authenticator
	t    *toy
}

func (a *toyAuth) Authenticate(ctx context.Context, r *http.Request) (webkit.Session, error) {
	s, err := a.next.Authenticate(ctx, r)
	switch a.t.fault {
	case faultAcceptsOtherUser:
		s.User = "everyone"
	case faultNoSignInChallenge:
		s.Account = "acct_1" // every Session of the agent counts as signed in
	case faultUncheckedJWT:
		if err != nil {
			// Reads the claims without checking the signature, the
			// expiry or the audience.
			parts := strings.Split(r.Header.Get(headers.Session), ".")
			if len(parts) == 3 {
				raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
				var cl struct{ Iss, Sub, Sid string }
				if json.Unmarshal(raw, &cl) == nil && cl.Iss != "" {
					return webkit.Session{ID: cl.Sid, Agent: cl.Iss, User: cl.Sub}, nil
				}
			}
		}
	}
	return s, err
}

// racyStore hands the same claim to repeats that arrive close together,
// like a store whose take is not atomic.
type racyStore struct {
	storedriver.Store
	t *toy
}

func (s *racyStore) Take(ctx context.Context, owner store.Owner, action storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	res, err := s.Store.Take(ctx, owner, action, now)
	key := owner.Agent + "|" + owner.User + "|" + action.Key
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if err == nil && res.Claim != nil {
		s.t.claims[key] = recentClaim{claim: *res.Claim, at: time.Now()}
	} else if c, ok := s.t.claims[key]; ok && time.Since(c.at) < 2*time.Second {
		cl := c.claim
		return storedriver.TakeResult{Claim: &cl}, nil
	}
	return res, err
}
