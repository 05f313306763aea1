package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opsgate/opsgate/internal/view"
	"github.com/opsgate/opsgate/pages"
	"github.com/opsgate/opsgate/webkit"
)

// An action with describe: asks the upstream what a gated request asks
// for. The gateway POSTs the describe URL a JSON object:
//
//	{"method": "POST", "path": "/api/bookings", "query": "a=1",
//	 "path_values": {"order": "ord_7"},
//	 "headers": {"Content-Type": ["application/json"], …the allowed ones},
//	 "body": "…the request's body as text…"}   (or "body_base64": "…")
//
// and the upstream answers 200 {"key": …, "terms": {…}, "summary": …,
// "lifetime": seconds} for a gated request, or 204 for one that is not.
// Anything else, or no answer within describe_timeout, is a failure: the
// browser gets 503 and nothing is performed.

// describeRequest is what the gateway sends the describe URL.
type describeRequest struct {
	Method     string              `json:"method"`
	Path       string              `json:"path"`
	Query      string              `json:"query,omitempty"`
	PathValues map[string]string   `json:"path_values,omitempty"`
	Headers    map[string][]string `json:"headers,omitempty"`
	Body       *string             `json:"body,omitempty"`
	Session    describeSession     `json:"session"`
	BodyBase64 string              `json:"body_base64,omitempty"`
}

// describeSession is whom the request is for: the Session the browser is
// joined to (account only when it joined signed in).
type describeSession struct {
	Agent   string `json:"agent"`
	User    string `json:"user"`
	Account string `json:"account,omitempty"`
}

// describeAnswer is the describe URL's answer to a gated request.
type describeAnswer struct {
	Key      string          `json:"key"`
	Terms    json.RawMessage `json:"terms"`
	Summary  string          `json:"summary"`
	Lifetime float64         `json:"lifetime"`
}

// maxDescribeAnswer bounds the describe URL's answer.
const maxDescribeAnswer = 256 << 10

// asker asks the upstream's describe URL before the Gate sees the request.
//
// The call is made in front of the Gate rather than in its describe: a
// describe error is the Gate's 400 invalid_request, and a describe URL that
// fails is not the browser's mistake but the website's outage, answered
// 503 with nothing performed.
type asker struct {
	a        *action
	upstream *url.URL
	client   *http.Client
	logger   *slog.Logger
	kit      *webkit.Kit
	// identity signs the describe request with the Session's identity,
	// as it does the requests to the upstream.
	identity *upstreamIdentity
}

// described is the upstream's answer, handed to the Gate's describe in
// the request's context.
type described struct {
	action   webkit.Action
	notGated bool
}

type describedKey struct{}

// describedByUpstream is the Gate's describe of an action with describe:
// the answer asker put in the context.
func describedByUpstream(r *http.Request) (webkit.Action, error) {
	d, ok := r.Context().Value(describedKey{}).(*described)
	switch {
	case !ok:
		return webkit.Action{}, errors.New("the gateway did not ask the website about this request")
	case d.notGated:
		return webkit.Action{}, webkit.ErrNotGated
	}
	return d.action, nil
}

// wrap returns gated (the Gate around the proxy) with the describe call in
// front of it, for the requests the Gate would describe: from a browser
// joined to a Session, without a login of the website's own (§4 W56). An
// ordinary browser's request never waits on the describe URL (W07).
func (k *asker) wrap(gated http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, joined := k.kit.Sessions.SessionOf(r)
		if !joined || (k.kit.OwnLogin != nil && k.kit.OwnLogin(r, s)) {
			gated.ServeHTTP(w, r)
			return
		}
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
			if err != nil {
				http.Error(w, "the request body could not be read", http.StatusBadRequest)
				return
			}
			if len(b) > maxBody { // the Gate answers 413
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
				gated.ServeHTTP(w, r)
				return
			}
			body = b
		}
		d, err := k.ask(r, body, s)
		if err != nil {
			k.logger.LogAttrs(r.Context(), slog.LevelError, "opsgate-gateway: the describe URL failed; nothing was performed",
				slog.String("path", r.URL.Path), slog.String("describe", k.a.describe.Path), slog.String("error", err.Error()))
			k.unavailable(w, r)
			return
		}
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		gated.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), describedKey{}, d)))
	})
}

// ask POSTs the request to the describe URL and reads its answer.
func (k *asker) ask(r *http.Request, body []byte, s webkit.Session) (*described, error) {
	dr := describeRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Headers: map[string][]string{},
		Session: describeSession{Agent: s.Agent, User: s.User, Account: s.Account}}
	for w := range k.a.route.wildcards() {
		if v := r.PathValue(w); v != "" {
			if dr.PathValues == nil {
				dr.PathValues = map[string]string{}
			}
			dr.PathValues[w] = v
		}
	}
	for _, h := range append([]string{"Content-Type"}, k.a.describeHeaders...) {
		if n := strings.ToLower(strings.ReplaceAll(h, "_", "-")); strings.HasPrefix(n, strings.ToLower(k.identity.prefix)) {
			continue // a client's: forged; the Session is in "session"
		}
		if vs := r.Header.Values(h); len(vs) > 0 {
			if h == "Cookie" {
				c := http.Header{"Cookie": vs}
				dropGatewayCookies(c)
				if vs = c.Values("Cookie"); len(vs) == 0 {
					continue
				}
			}
			dr.Headers[h] = vs
		}
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			s := string(body)
			dr.Body = &s
		} else {
			dr.BodyBase64 = base64.StdEncoding.EncodeToString(body)
		}
	}
	payload, err := json.Marshal(dr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), k.a.describeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.url(), bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	k.identity.set(req, s.Owner(), true)
	res, err := k.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("no answer within %s (describe_timeout)", k.a.describeTimeout)
		}
		return nil, err
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusNoContent:
		return &described{notGated: true}, nil
	case http.StatusOK:
	default:
		return nil, fmt.Errorf("the describe URL answered %s; want 200 with the action or 204 for not gated", res.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxDescribeAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxDescribeAnswer {
		return nil, fmt.Errorf("the describe URL's answer is over %d bytes", maxDescribeAnswer)
	}
	var ans describeAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, fmt.Errorf("the describe URL's answer is not {key, terms, summary, lifetime}: %v", err)
	}
	switch t := bytes.TrimSpace(ans.Terms); {
	case ans.Key == "":
		return nil, errors.New("the describe URL's answer has no key")
	case ans.Summary == "":
		return nil, errors.New("the describe URL's answer has no summary")
	case len(t) == 0 || t[0] != '{':
		return nil, errors.New("the describe URL's answer has no terms object")
	case ans.Lifetime < 0:
		return nil, errors.New("the describe URL's answer has a negative lifetime")
	}
	return &described{action: webkit.Action{
		Key:      ans.Key,
		Terms:    ans.Terms,
		Summary:  ans.Summary,
		Lifetime: time.Duration(ans.Lifetime * float64(time.Second)),
		Kind:     k.a.kind,
	}}, nil
}

// url is the describe URL: a path is on the upstream (after its own path,
// if it has one).
func (k *asker) url() string {
	if k.a.describe.IsAbs() {
		return k.a.describe.String()
	}
	u := *k.upstream
	u.Path = strings.TrimRight(u.Path, "/") + k.a.describe.Path
	u.RawPath = ""
	u.RawQuery = k.a.describe.RawQuery
	return u.String()
}

// unavailable answers 503 with Retry-After: nothing was performed (§7
// W143), in the site's chrome for a page, {"error":
// "temporarily_unavailable"} for a script, as the Gate answers a store
// that is down.
func (k *asker) unavailable(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "5")
	pages.Refuse(w, r, http.StatusServiceUnavailable, "temporarily_unavailable", view.Notice{
		Title: "Not available right now", Heading: "Not available right now",
		Text: []string{"The website could not check this request just now, so nothing was done. Try again in a moment."},
	}, k.kit.Chrome)
}
