package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/webkit"
)

// router decides what becomes of each request that is not the gateway's
// own (the kit's routes are served before it):
//
//   - from an ordinary browser, or one with the website's own login (§4
//     W07, W56): a gated action goes through the Gate, which passes it;
//     anything else is proxied. The gateway refuses nothing of theirs.
//   - from an agent's browser (joined to a Session), a safe request (GET,
//     HEAD, OPTIONS) is proxied; an unsafe one is read whole, its method
//     decided (method override), and then gated when an action matches it,
//     proxied when pass names it, and refused otherwise: the gateway can't
//     tell what an unsafe request it doesn't know does on the website, so
//     it fails closed (§3 "MUST NOT start the action before it receives an
//     approval for it").
type router struct {
	c       *Config
	kit     *webkit.Kit
	logger  *slog.Logger
	proxy   http.Handler
	actions table
	pass    table
	gated   map[*route]http.Handler
	strip   headerStrip
}

func newRouter(c *Config, kit *webkit.Kit, logger *slog.Logger, proxy http.Handler) *router {
	strict := c.routing == routingStrict
	rt := &router{c: c, kit: kit, logger: logger, proxy: proxy, gated: map[*route]http.Handler{},
		actions: table{strict: strict}, pass: table{strict: strict, routes: c.pass},
		strip: newHeaderStrip(c.identityPrefix, c.overrides)}
	return rt
}

// handle gates the requests that a's route matches with h.
func (rt *router) handle(a *action, h http.Handler) {
	rt.actions.routes = append(rt.actions.routes, a.route)
	rt.gated[a.route] = h
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt.strip.clean(r.Header)
	if !rt.agentsBrowser(r) {
		p, _ := cleanPath(r.URL.Path)
		if m, values := rt.actions.lookup(r.Method, p); m != nil {
			setPathValues(r, values)
			rt.gated[m].ServeHTTP(w, r) // the Gate passes it (W07, W56)
			return
		}
		rt.proxy.ServeHTTP(w, r)
		return
	}
	if safeMethod(r.Method) {
		rt.proxy.ServeHTTP(w, r)
		return
	}
	p, ambiguous := cleanPath(r.URL.Path)
	if ambiguous != "" {
		rt.refuse(w, r, http.StatusBadRequest, "ambiguous_path", ambiguous+": websites read such a path in different ways, so an agent's browser may not send it with "+r.Method)
		return
	}
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 0 && !(len(ce) == 1 && strings.EqualFold(strings.TrimSpace(ce[0]), "identity")) {
		rt.refuse(w, r, http.StatusUnsupportedMediaType, "content_encoding", "a compressed request body (Content-Encoding) from an agent's browser is not accepted: the gateway can't read it as the website would")
		return
	}
	body, status, err := rt.readBody(r)
	if err != nil {
		reason := map[int]string{http.StatusRequestTimeout: "body_timeout", http.StatusRequestEntityTooLarge: "body_too_large"}[status]
		if reason == "" {
			reason = "body_unreadable"
		}
		rt.refuse(w, r, status, reason, err.Error())
		return
	}
	method, err := rt.method(r, body)
	if err != nil {
		rt.refuse(w, r, http.StatusBadRequest, "method_override", err.Error())
		return
	}
	if m, values := rt.actions.lookup(method, p); m != nil {
		setPathValues(r, values)
		if a := m.action; a.describe == nil {
			// The terms only from an unambiguous request: checked here
			// too, before the Gate (whose describe reads the same), so
			// that a page gets a page.
			if _, err := readRequest(r, body, a.fields); err != nil {
				rt.refuse(w, r, http.StatusBadRequest, "ambiguous_terms", err.Error())
				return
			}
		}
		rt.gated[m].ServeHTTP(w, r)
		return
	}
	if m, _ := rt.pass.lookup(method, p); m != nil {
		rt.proxy.ServeHTTP(w, r)
		return
	}
	rt.notOpen(w, r, method, p)
}

// agentsBrowser reports whether r comes from a browser joined to a
// Session and handled as it: not one with the website's own login (§4
// W56).
func (rt *router) agentsBrowser(r *http.Request) bool {
	s, joined := rt.kit.Sessions.SessionOf(r)
	return joined && (rt.kit.OwnLogin == nil || !rt.kit.OwnLogin(r, s))
}

func setPathValues(r *http.Request, values map[string]string) {
	for k, v := range values {
		r.SetPathValue(k, v)
	}
}

// readBody reads r's whole body, at most maxBody bytes, within the
// body timeout (set on the connection when the request came in), and
// puts it back for the Gate and the upstream. It returns the status of
// a refusal with the error.
func (rt *router) readBody(r *http.Request) ([]byte, int, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	if r.ContentLength > maxBody {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is over %d bytes", maxBody)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case isTimeout(err):
		return nil, http.StatusRequestTimeout, fmt.Errorf("the request body did not arrive within %s (timeouts.body)", rt.c.timeouts.body)
	case err != nil:
		return nil, http.StatusBadRequest, errors.New("the request body could not be read")
	case len(body) > maxBody:
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is over %d bytes", maxBody)
	}
	r.Body.Close()
	r.ContentLength = int64(len(body))
	if len(body) == 0 {
		r.Body = http.NoBody
	} else {
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return body, 0, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// method returns the method the upstream acts on: r's own, or, for a
// POST, the one a method-override convention the upstream honours
// (method_override) names. It refuses what a website may read as another
// method than the gateway: _method in the query (Symfony and Laravel read
// it, Rack does not), _method in the body when the config does not say
// the upstream honours it (Rack, Rails and Laravel do by default), two
// overrides, an override that is no method. Override headers the
// upstream does not honour were removed (headerStrip).
func (rt *router) method(r *http.Request, body []byte) (string, error) {
	for _, k := range lenientKeys(r.URL.RawQuery) {
		if isOverrideField(k) {
			return "", fmt.Errorf("the query string holds %s, which some websites read as the request's method: an agent's browser may not send it", overrideField)
		}
	}
	fields, err := overrideFields(r, body)
	if err != nil {
		return "", err
	}
	honoursField := slices.Contains(rt.c.overrides, overrideField)
	if len(fields) > 0 && !honoursField {
		return "", fmt.Errorf("the body holds %s, which websites such as Rails and Laravel read as the request's method; the gateway's config does not say this website does (method_override), so an agent's browser may not send it", overrideField)
	}
	var over []string
	for _, h := range rt.c.overrides {
		if h != overrideField {
			over = append(over, r.Header.Values(h)...)
		}
	}
	over = append(over, fields...)
	switch {
	case len(over) == 0:
		return r.Method, nil
	case r.Method != http.MethodPost:
		// Rack, Symfony and Express override a POST alone, Hono any
		// method but GET: websites disagree.
		return "", fmt.Errorf("a %s that names another method (method override): websites read it in different ways", r.Method)
	case len(over) > 1:
		return "", errors.New("the request names its method more than once (method override)")
	}
	m := strings.ToUpper(strings.TrimSpace(over[0]))
	if m == "" || !validHeaderName(m) {
		return "", fmt.Errorf("the method override %q is not a method", over[0])
	}
	return m, nil
}

// isOverrideField reports whether a form key is read as _method (as
// itself, or as PHP and Rack read _method[] or _method.x).
func isOverrideField(k string) bool {
	n := phpName(k)
	return n == overrideField || strings.HasPrefix(n, overrideField+"[")
}

// overrideFields returns the values of _method in r's body: a form field
// (a body with no Content-Type is read as a form too, as Rack does), or a
// top-level member of a JSON body (Laravel). A multipart or JSON body
// that doesn't parse is refused: the gateway can't say what it holds.
func overrideFields(r *http.Request, body []byte) ([]string, error) {
	if len(body) == 0 {
		return nil, nil
	}
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 {
		return nil, errors.New("the request has more than one Content-Type")
	}
	var mt string
	var params map[string]string
	if len(cts) == 1 {
		var err error
		if mt, params, err = mime.ParseMediaType(cts[0]); err != nil {
			return nil, fmt.Errorf("the Content-Type %q could not be read", cts[0])
		}
	}
	var out []string
	switch {
	case mt == "" || mt == formURLEncoded:
		for _, kv := range lenientPairs(string(body)) {
			if isOverrideField(kv[0]) {
				out = append(out, kv[1])
			}
		}
	case mt == formMultipart:
		v, err := multipartValues(body, params["boundary"])
		if err != nil {
			return nil, fmt.Errorf("the multipart form body could not be read: %v", err)
		}
		for k, vs := range v {
			if isOverrideField(k) {
				out = append(out, vs...)
			}
		}
	case strings.Contains(mt, "json"): // Laravel takes any …/json and …+json as JSON
		v, err := strictJSON(body)
		if err != nil {
			return nil, fmt.Errorf("the JSON body could not be read: %v", err)
		}
		if m, ok := v.(map[string]any); ok {
			for k, mv := range m {
				if isOverrideField(k) {
					s, ok := mv.(string)
					if !ok {
						return nil, fmt.Errorf("the JSON body's %s is not a string", overrideField)
					}
					out = append(out, s)
				}
			}
		}
	}
	return out, nil
}

// lenientPairs splits a query or form as the most lenient website does:
// on & and ;, each key and value decoded where it decodes, as it is
// where it doesn't.
func lenientPairs(s string) [][2]string {
	var out [][2]string
	for _, piece := range strings.FieldsFunc(s, func(c rune) bool { return c == '&' || c == ';' }) {
		k, v, _ := strings.Cut(piece, "=")
		out = append(out, [2]string{lenientUnescape(k), lenientUnescape(v)})
	}
	return out
}

func lenientKeys(s string) []string {
	var out []string
	for _, kv := range lenientPairs(s) {
		out = append(out, kv[0])
	}
	return out
}

func lenientUnescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return strings.ReplaceAll(s, "+", " ")
}

// notOpen refuses an unsafe request of an agent's browser that no action
// gates and pass does not name: 403, a page or JSON, an Observer event,
// and a log line with the config line that would let it through.
func (rt *router) notOpen(w http.ResponseWriter, r *http.Request, method string, p requestPath) {
	line := fmt.Sprintf("pass: [%q]", method+" "+p.String())
	rt.logger.LogAttrs(r.Context(), slog.LevelWarn,
		"opsgate-gateway: refused an unsafe request from an agent's browser that no action gates; if it needs no approval, add it to the config's pass list",
		slog.String("method", method), slog.String("path", p.String()), slog.String("config", rt.c.file), slog.String("add", line))
	rt.kit.Observer.Observe(r.Context(), webkit.Event{Route: "gate", Outcome: "refused", Reason: "not_open_to_agents"})
	pages.Refuse(w, r, http.StatusForbidden, "forbidden", view.Notice{
		Title: "Not available from an agent's browser", Heading: "Not available from an agent's browser",
		Text: []string{"This website does not allow this action from a browser an agent joined, so nothing was done."},
	}, rt.kit.Chrome)
}

// refuse answers a request of an agent's browser that the gateway can't
// read as the website would: nothing is performed and no operation is
// issued.
func (rt *router) refuse(w http.ResponseWriter, r *http.Request, status int, reason, detail string) {
	rt.logger.LogAttrs(r.Context(), slog.LevelInfo, "opsgate-gateway: refused a request from an agent's browser",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status), slog.String("reason", reason), slog.String("detail", detail))
	rt.kit.Observer.Observe(r.Context(), webkit.Event{Route: "gate", Outcome: "invalid_request", Reason: reason})
	pages.Refuse(w, r, status, "invalid_request", view.Notice{
		Title: "This request can't be sent", Heading: "This request can't be sent",
		Text: []string{detail + ". Nothing was done."},
	}, rt.kit.Chrome)
}

// bodyDeadline bounds how long r's body may take to arrive (timeouts.body),
// on the connection; the deadline is lifted once the body has been read,
// so that it never ends a connection waiting on the upstream's answer.
func bodyDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return // not a server's connection (a test's recorder)
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
}

// deadlineBody lifts the read deadline when its body ends.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
