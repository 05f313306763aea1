package shop

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/demo/shop/views"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/webkit"
)

// What the shop saw (issue 37): for each agent and User, its latest
// requests to the shop and to the operations endpoint, with the kit's
// decision (the Observer's Event) and its reason in words (the answer's
// error_description, which the demo's Kit sends: ExplainRefusals). A
// joined browser sees its own agent's and User's on PathSeen, and no
// other's. Nothing here holds a token, a cookie or a body but a ref, by
// its start.

// Bounds of what the shop keeps: the latest maxSeen requests of each of
// the latest maxSeenOwners agents and Users.
const (
	maxSeen       = 100
	maxSeenOwners = 512
	// maxSeenBody bounds the answer's body read for its reason.
	maxSeenBody = 16 << 10
	// maxJoinForm is the join's own bound of its form (webkit).
	maxJoinForm = 64 << 10
)

// seenLog keeps the entries by owner (agentSandbox's key).
type seenLog struct {
	mu     sync.Mutex
	owners map[string]*seenOwner
}

type seenOwner struct {
	agent, user string
	entries     []views.SeenEntry // oldest first
	used        time.Time
}

func (l *seenLog) add(agent, user string, e views.SeenEntry) {
	key := agentSandbox(agent, user)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owners == nil {
		l.owners = map[string]*seenOwner{}
	}
	o := l.owners[key]
	if o == nil {
		if len(l.owners) >= maxSeenOwners { // the least recently used goes
			var oldest string
			for k, v := range l.owners {
				if oldest == "" || v.used.Before(l.owners[oldest].used) {
					oldest = k
				}
			}
			delete(l.owners, oldest)
		}
		o = &seenOwner{agent: agent, user: user}
		l.owners[key] = o
	}
	o.used = e.At
	o.entries = append(o.entries, e)
	if len(o.entries) > maxSeen {
		o.entries = slices.Delete(o.entries, 0, len(o.entries)-maxSeen)
	}
}

// list is the owner's entries, newest first.
func (l *seenLog) list(agent, user string) []views.SeenEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.owners[agentSandbox(agent, user)]
	if o == nil {
		return nil
	}
	out := slices.Clone(o.entries)
	slices.Reverse(out)
	return out
}

// seenCall is what the shop learns of one request while it is answered:
// the Observer's events, through the request's context.
type seenCall struct {
	mu     sync.Mutex
	events []webkit.Event
}

type seenKey struct{}

func callOf(ctx context.Context) *seenCall {
	c, _ := ctx.Value(seenKey{}).(*seenCall)
	return c
}

// seenObserver hands each Event to the request's seenCall, and to the
// Observer behind it (the metrics).
type seenObserver struct{ next webkit.Observer }

func (o seenObserver) Observe(ctx context.Context, e webkit.Event) {
	if c := callOf(ctx); c != nil {
		c.mu.Lock()
		c.events = append(c.events, e)
		c.mu.Unlock()
	}
	if o.next != nil {
		o.next.Observe(ctx, e)
	}
}

func (o seenObserver) StoreStep(ctx context.Context, step string, took time.Duration, err error) {
	if o.next != nil {
		o.next.StoreStep(ctx, step, took, err)
	}
}

// who sent a request, as far as the shop can tell before answering it.
type sender struct {
	agent, user, sid string
	from             string // "browser", "agent" or "join"
	verified         bool
	ref              string          // the endpoint's body ref
	approval         *approvalHeader // the endpoint's Poppy-Approval, when it parses
	session          *webkit.Session // a joined browser's
}

// approvalHeader is what the bench notes of an approval.
type approvalHeader struct {
	operationID, revision, approver string
}

// skipSeen are requests no one needs to see again: the files, the kit's
// status route a waiting page polls, and these pages themselves.
func skipSeen(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasPrefix(p, "/static/") || strings.HasPrefix(p, "/_opsgate/") || p == PathSeen || p == PathBench || p == "/favicon.ico" || p == PathMetrics
}

// senderOf says who sent r: the agent of a Session JWT at the endpoint or
// of a join's assertion (by their claims, verified once the kit accepts
// them), or the joined browser's Session.
func (s *Server) senderOf(r *http.Request) (sender, bool) {
	switch {
	case r.URL.Path == PathOperations:
		c, ok := tokenClaims(r.Header.Get(headers.Session))
		if !ok {
			return sender{}, false
		}
		snd := sender{agent: c.Iss, user: c.Sub, sid: c.Sid, from: "agent"}
		if body, ok := peekBody(r, 4<<10); ok {
			var b struct {
				Ref string `json:"ref"`
			}
			if json.Unmarshal(body, &b) == nil {
				snd.ref = b.Ref
			}
		}
		if a, err := headers.ParseApproval(r.Header.Values(headers.Approval)); err == nil {
			snd.approval = &approvalHeader{operationID: a.OperationID, revision: a.Revision, approver: string(a.Approver)}
		}
		return snd, true
	case r.URL.Path == PathJoin && r.Method == http.MethodPost:
		body, ok := peekBody(r, maxJoinForm)
		if !ok {
			return sender{}, false
		}
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return sender{}, false
		}
		c, ok := tokenClaims(form.Get("assertion"))
		if !ok {
			return sender{}, false
		}
		return sender{agent: c.Iss, user: c.Sub, sid: c.Sid, from: "join"}, true
	}
	sess, joined := s.sessionOf(r)
	if !joined {
		return sender{}, false
	}
	return sender{agent: sess.Agent, user: sess.User, sid: sess.ID, from: "browser", verified: true, session: &sess}, true
}

// tokenClaims reads iss, sub and sid of a compact JWT without verifying
// it: only to file the request under the agent and User it claims.
func tokenClaims(tok string) (c struct{ Iss, Sub, Sid string }, ok bool) {
	parts := strings.Split(tok, ".")
	if len(tok) > 16<<10 || len(parts) != 3 {
		return c, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(raw, &c) != nil || c.Iss == "" || c.Sub == "" || len(c.Iss) > 1024 || len(c.Sub) > 255 || len(c.Sid) > 255 {
		return c, false
	}
	return c, true
}

// peekBody reads up to limit bytes of r's body and puts them back; false
// when it is longer (then r's body is as it was: what was read, then the
// rest).
func peekBody(r *http.Request, limit int64) ([]byte, bool) {
	if r.Body == nil {
		return nil, true
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	return b, err == nil && int64(len(b)) <= limit
}

// record keeps what the shop saw of each request an agent or its browser
// sent (and lets the bench misbehave, bench.go).
func (s *Server) record(next http.Handler) http.Handler {
	s.inner = next
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skipSeen(r) {
			next.ServeHTTP(w, r)
			return
		}
		snd, ok := s.senderOf(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		s.recordOne(w, r, snd, next)
	})
}

// recordOne serves r, from snd, with next, and keeps what the shop saw.
func (s *Server) recordOne(w http.ResponseWriter, r *http.Request, snd sender, next http.Handler) {
	call := &seenCall{}
	r = r.WithContext(context.WithValue(r.Context(), seenKey{}, call))
	sw := &seenWriter{ResponseWriter: w}
	start := s.now()
	if !s.bench.before(sw, r, snd) {
		s.bench.serve(sw, r, snd, next)
	}
	e := s.seenEntry(start, r, snd, call, sw)
	s.seen.add(snd.agent, snd.user, e)
	s.bench.after(snd, r, call, sw)
}

// events are the Observer's Events of the call, in order.
func (c *seenCall) all() []webkit.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

var whyLine = regexp.MustCompile(`<p class="opsgate-why"><small>Why: (.*?)</small></p>`)

// seenEntry is what the page shows of one answered request.
func (s *Server) seenEntry(at time.Time, r *http.Request, snd sender, call *seenCall, sw *seenWriter) views.SeenEntry {
	e := views.SeenEntry{At: at, From: snd.from, SID: snd.sid, Method: r.Method, Path: r.URL.Path, Status: sw.code(), Unverified: !snd.verified}
	var decisions []string
	for _, ev := range call.all() {
		d := ev.Route + " " + ev.Outcome
		if ev.Reason != "" {
			d += " (" + ev.Reason + ")"
		}
		decisions = append(decisions, d)
		if (ev.Route == "endpoint" && ev.Outcome != "unauthenticated") || (ev.Route == "join" && ev.Outcome == "joined") {
			e.Unverified = false
		}
	}
	e.Decision = strings.Join(decisions, "; ")
	if snd.ref != "" {
		e.Ref = shortRef(snd.ref)
	}
	if _, ref, err := headers.ParseOperation(sw.Header().Values(headers.Operation)); err == nil {
		e.Ref = shortRef(ref)
	}
	e.Why = answerWhy(sw)
	if e.Why == "" && e.Ref != "" && sw.code() == http.StatusForbidden {
		e.Why = "the action waits for approval: the browser got a ref in Poppy-Operation, for the agent to look up at the operations endpoint"
	}
	return e
}

// answerWhy is the reason an answer gave in words: error_description of
// JSON, the join's text, or the Why line of a kit page.
func answerWhy(sw *seenWriter) string {
	body := sw.body.Bytes()
	ct := sw.Header().Get("Content-Type")
	switch {
	case len(body) == 0:
		return ""
	case strings.HasPrefix(ct, "application/json"):
		var b struct {
			Description string `json:"error_description"`
			Message     string `json:"message"`
			Reason      string `json:"reason"`
		}
		if json.Unmarshal(body, &b) != nil {
			return ""
		}
		switch {
		case b.Description != "":
			return b.Description
		case b.Reason != "":
			return "declined: " + b.Reason
		}
		return b.Message
	case strings.HasPrefix(ct, "text/plain"):
		return strings.TrimSpace(string(body))
	case strings.HasPrefix(ct, "text/html"):
		if m := whyLine.FindSubmatch(body); m != nil {
			return html.UnescapeString(string(m[1]))
		}
	}
	return ""
}

// shortRef names a ref by its start, as the agent's own steps do.
func shortRef(ref string) string {
	if len(ref) <= 32 {
		return ref
	}
	return ref[:24] + "…"
}

// seenWriter is the answer as the shop writes it: its status, and the
// first maxSeenBody bytes of a refusal's body, for its reason.
type seenWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *seenWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *seenWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && w.body.Len() < maxSeenBody {
		w.body.Write(b[:min(len(b), maxSeenBody-w.body.Len())])
	}
	return w.ResponseWriter.Write(b)
}

func (w *seenWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *seenWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// seenPage (GET PathSeen) shows a joined browser what the shop saw of its
// agent and User; JSON for a script (Accept: application/json).
func (s *Server) seenPage(w http.ResponseWriter, r *http.Request) {
	v := s.viewerOf(r)
	sv := views.SeenView{Joined: v.Joined}
	if v.Joined {
		sv.Agent, sv.User = v.Session.Agent, v.Session.User
		sv.Entries = s.seen.list(v.Session.Agent, v.Session.User)
	}
	w.Header().Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		if sv.Entries == nil {
			sv.Entries = []views.SeenEntry{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"joined": sv.Joined, "entries": sv.Entries})
		return
	}
	render(w, r, http.StatusOK, views.SeenPage(s.chrome(r, v, "What the shop saw", "account"), sv))
}

// wantsJSON: the demo's pages for agents answer JSON to Accept:
// application/json, or to ?format=json.
func wantsJSON(r *http.Request) bool {
	return r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json")
}
