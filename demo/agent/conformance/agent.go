package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

// agentServer serves the checker's agents' Client ID Metadata Documents
// and key sets, which the site fetches to verify their Session JWTs.
type agentServer struct {
	ln   net.Listener
	srv  *http.Server
	base string
	mu   sync.Mutex
	keys map[string]*agentside.AgentKeys // by name
}

// agent is one Personal Agent of the checker, with its User ID at the site.
type agent struct {
	name     string
	clientID string
	user     string
	keys     *agentside.AgentKeys
	dlg      *agentside.Delegation

	mu    sync.Mutex
	token string // an access token for the account; a credential, never printed
}

func (c *checker) startAgents() error {
	listen := c.cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("conformance: the agents' server: %w", err)
	}
	s := &c.agents
	s.ln, s.keys = ln, map[string]*agentside.AgentKeys{}
	s.base = "http://" + ln.Addr().String()
	if c.cfg.AgentURL != "" {
		s.base = strings.TrimRight(c.cfg.AgentURL, "/")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /agents/{name}/agent.json", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		k := s.keys[r.PathValue("name")]
		s.mu.Unlock()
		if k == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(k.Metadata(s.base+"/agents/"+r.PathValue("name")+"/jwks.json", "opsgate conformance checker ("+r.PathValue("name")+")"))
	})
	mux.HandleFunc("GET /agents/{name}/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		k := s.keys[r.PathValue("name")]
		s.mu.Unlock()
		if k == nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(k.JWKS())
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	// Fresh names every run: a site caches an agent's keys, and the
	// checker's keys are new every run.
	run := randomID(8)
	if c.a, err = c.newAgent("a" + run); err != nil {
		return err
	}
	if c.b, err = c.newAgent("b" + run); err != nil {
		return err
	}
	return nil
}

func (c *checker) stopAgents() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.agents.srv.Shutdown(ctx)
}

func (c *checker) newAgent(name string) (*agent, error) {
	s := &c.agents
	id := s.base + "/agents/" + name + "/agent.json"
	k, err := agentside.NewAgentKeys(id, "ES256")
	if err != nil {
		return nil, err
	}
	d, err := k.Delegate(time.Hour)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.keys[name] = k
	s.mu.Unlock()
	return &agent{name: name, clientID: id, user: "usr_" + randomID(16), keys: k, dlg: d}, nil
}

// session is one of an agent's Sessions with the site.
type session struct {
	agent    *agent
	user     string // sub: the agent's User, or another User for the "another User" case
	sid      string
	signedIn bool
}

func (a *agent) session(signedIn bool) *session {
	return &session{agent: a, user: a.user, sid: "ses_" + randomID(16), signedIn: signedIn}
}

// otherUser is a Session of the same agent for another User.
func (a *agent) otherUser() *session {
	return &session{agent: a, user: "usr_" + randomID(16), sid: "ses_" + randomID(16)}
}

// jwt signs a Session JWT for one request to the site.
func (c *checker) jwt(s *session, token string, edit func(*agentside.SessionClaims)) (string, error) {
	cl := agentside.SessionClaims{Audience: c.origin, SID: s.sid, User: s.user, AccessToken: token}
	if edit != nil {
		edit(&cl)
	}
	return s.agent.dlg.SessionJWT(cl)
}

// accessToken gets an access token for the account from TokenURL, once
// per agent.
func (c *checker) accessToken(ctx context.Context, a *agent) (string, error) {
	a.mu.Lock()
	tok := a.token
	a.mu.Unlock()
	if tok != "" {
		return tok, nil
	}
	if c.cfg.TokenURL == "" {
		return "", errors.New("no token URL was given")
	}
	form := url.Values{"client_id": {a.clientID}, "account": {c.cfg.Account}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := c.client().Do(req)
	if err != nil {
		return "", fmt.Errorf("token URL: %w", err)
	}
	defer res.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&body)
	if res.StatusCode != http.StatusOK || body.AccessToken == "" {
		return "", fmt.Errorf("token URL answered %s without an access_token", res.Status)
	}
	a.mu.Lock()
	a.token = body.AccessToken
	a.mu.Unlock()
	return body.AccessToken, nil
}

// client is an HTTP client that records every response (for "no 5xx")
// and follows no redirect.
func (c *checker) client() *http.Client {
	base := http.DefaultTransport
	if c.cfg.HTTPClient != nil && c.cfg.HTTPClient.Transport != nil {
		base = c.cfg.HTTPClient.Transport
	}
	return &http.Client{
		Transport:     recorder{c: c, next: base},
		Timeout:       c.cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type recorder struct {
	c    *checker
	next http.RoundTripper
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if err != nil {
		r.c.logf("  %s %s: %v", req.Method, req.URL.Redacted(), err)
	} else {
		r.c.logf("  %s %s → %d", req.Method, req.URL.Redacted(), res.StatusCode)
	}
	if err == nil && !strings.HasPrefix(req.URL.String(), r.c.agents.base) {
		r.c.mu.Lock()
		r.c.responses = append(r.c.responses, seen{what: req.Method + " " + req.URL.Path, status: res.StatusCode, retryAfter: res.Header.Get("Retry-After") != ""})
		r.c.mu.Unlock()
	}
	return res, err
}

// answer is the endpoint's answer.
type answer struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]json.RawMessage // nil when the body isn't a JSON object
	err    error                      // the request failed (no answer)
}

func (a answer) str(member string) string {
	var s string
	_ = json.Unmarshal(a.body[member], &s)
	return s
}

func (a answer) errorCode() string { return a.str("error") }

// operation returns the operation in an approval_required answer.
func (a answer) operation() (store.Operation, bool) {
	raw, ok := a.body["operation"]
	if !ok {
		return store.Operation{}, false
	}
	var op store.Operation
	if json.Unmarshal(raw, &op) != nil {
		return store.Operation{}, false
	}
	return op, true
}

func (a answer) String() string {
	if a.err != nil {
		return "no answer: " + a.err.Error()
	}
	s := fmt.Sprintf("%d", a.status)
	if e := a.errorCode(); e != "" {
		s += " " + e
	}
	if st := a.str("status"); st != "" {
		s += " status " + st
	}
	return s
}

// post options: what a request to the endpoint carries.
type post struct {
	ref         string
	body        []byte // instead of {"ref": ref}
	approval    string // Poppy-Approval; "" for none
	noSession   bool   // no Poppy-Session at all
	jwt         string // this Poppy-Session instead of a fresh one
	noExtension bool   // no Poppy-Extensions
	token       string // Authorization: Bearer; signed-in Sessions send theirs
	noToken     bool   // a signed-in Session without its token
	cookies     *browser
}

// endpoint sends one request to the operations endpoint in Session s. A
// 503 with Retry-After (the site can't answer now, §7) is retried a few
// times, as an agent would, with a fresh Session JWT each time; a request
// with a given JWT is sent once.
func (c *checker) endpoint(ctx context.Context, s *session, p post) answer {
	var a answer
	for attempt := range 4 {
		if attempt > 0 {
			if !retryLater(ctx, a.header) {
				break
			}
		}
		a = c.endpointOnce(ctx, s, p)
		if a.err != nil || a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || p.jwt != "" {
			break
		}
	}
	return a
}

// retryLater waits as Retry-After says, at most a second (the checker
// keeps moving; the site is allowed its 503), and reports whether to retry.
func retryLater(ctx context.Context, h http.Header) bool {
	d := time.Second
	if n, err := strconv.Atoi(h.Get("Retry-After")); err == nil && n >= 0 && time.Duration(n)*time.Second < d {
		d = time.Duration(n) * time.Second
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (c *checker) endpointOnce(ctx context.Context, s *session, p post) answer {
	body := p.body
	if body == nil {
		body, _ = json.Marshal(map[string]string{"ref": p.ref})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.disc.endpoint, bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set(headers.Version, "1.0")
	if !p.noExtension {
		h.Set(headers.Extensions, `"operations";v="3"`)
	}
	token := p.token
	if s != nil && s.signedIn && token == "" && !p.noToken {
		token, err = c.accessToken(ctx, s.agent)
		if err != nil {
			return answer{err: err}
		}
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if !p.noSession {
		jwt := p.jwt
		if jwt == "" && s != nil {
			if jwt, err = c.jwt(s, token, nil); err != nil {
				return answer{err: err}
			}
		}
		h.Set(headers.Session, jwt)
	}
	if p.approval != "" {
		h.Set(headers.Approval, p.approval)
	}
	if p.cookies != nil {
		for _, ck := range p.cookies.jar.Cookies(req.URL) {
			req.AddCookie(ck)
		}
	}
	res, err := c.client().Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	a := answer{status: res.StatusCode, header: res.Header, raw: raw}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		a.body = m
	}
	return a
}

// approval builds a Poppy-Approval value by hand, so that the checker can
// also send what the kit's own codec would refuse to write.
func approval(opID, revision, approver string, extra ...string) string {
	v := fmt.Sprintf("operation_id=%q, revision=%q, approver=%q", opID, revision, approver)
	for _, e := range extra {
		v += ", " + e
	}
	return v
}

// randomID returns n random characters of the spec 8.2 ID alphabet.
func randomID(n int) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// noneJWT rewrites a Session JWT's header to alg "none" and drops its
// signature: the oldest JWT attack.
func noneJWT(jwt string) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return jwt
	}
	hdr, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return jwt
	}
	var h map[string]any
	if json.Unmarshal(hdr, &h) != nil {
		return jwt
	}
	h["alg"] = "none"
	b, _ := json.Marshal(h)
	return base64.RawURLEncoding.EncodeToString(b) + "." + parts[1] + "."
}

// tamper changes one character in the middle of the JWT's signature.
func tamper(jwt string) string {
	i := strings.LastIndexByte(jwt, '.')
	if i < 0 || len(jwt)-i < 8 {
		return jwt + "x"
	}
	j := i + (len(jwt)-i)/2
	c := byte('A')
	if jwt[j] == 'A' {
		c = 'B'
	}
	return jwt[:j] + string(c) + jwt[j+1:]
}
