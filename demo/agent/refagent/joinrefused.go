package refagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors of a refused join (webkit/RULES.md choice 3): the Company's
// browser_session_endpoint answered something other than a 303 to
// return_to, so the browser is not joined to the Session. Every such error
// is a *JoinRefusedError; test it with errors.Is against these, or
// errors.As for the status and the website's words.
var (
	// ErrJoinRefused: any refused join.
	ErrJoinRefused = errors.New("refagent: the website refused to join the browser to the agent's Session")
	// ErrJoinConflict: 409, the browser is already joined to a Session of
	// another agent or another User, and the website does not join it
	// again (webkit's join, reason "conflict").
	ErrJoinConflict = errors.New("refagent: the browser is already joined to another agent's or User's Session (409)")
	// ErrOriginMismatch: the agent was given the website's origin in
	// another spelling than the website's own (localhost for 127.0.0.1,
	// or the reverse), so its join's return_to is on another origin and
	// the website refuses it. The website's own origin is the one its
	// poppy.json names.
	ErrOriginMismatch = errors.New("refagent: the agent's origin for the website is not the website's own")
)

// JoinRefusedError is a refused join: what the website answered, in its
// own words, and what to do about it. A 401 is also ErrSessionRefused (the
// website did not accept the agent's Session), a 409 ErrJoinConflict.
type JoinRefusedError struct {
	// Endpoint is the join's URL (web.browser_session_endpoint).
	Endpoint string
	// Status is the HTTP status of the join's answer; 0 when the browser
	// got none it could show.
	Status int
	// Code is the website's error code: the error parameter of a 401's
	// WWW-Authenticate challenge (invalid_session), or the "error" member
	// of a JSON body; "" when it gave none.
	Code string
	// Description is the website's own words from the body (plain text,
	// on one line, at most maxJoinDescription characters); "" when none.
	Description string
	// Advice says what to do, for a developer.
	Advice string
	// Origin is the website's origin as the agent was given it, and
	// WebsiteOrigin as the website names itself (the origin of its join
	// in poppy.json); OriginMismatch is true when the join was refused
	// because they differ (ErrOriginMismatch).
	Origin, WebsiteOrigin string
	OriginMismatch        bool
}

// maxJoinDescription bounds the website's words kept from a refusal.
const maxJoinDescription = 800 // a website that explains its refusals says up to 600 bytes why

func (e *JoinRefusedError) Error() string {
	var b strings.Builder
	b.WriteString("refagent: the website refused to join the browser to the agent's Session: ")
	b.WriteString(e.answer())
	if e.Code != "" {
		fmt.Fprintf(&b, " (error %s)", e.Code)
	}
	if e.Description != "" {
		fmt.Fprintf(&b, ": %q", e.Description)
	}
	if e.Advice != "" {
		b.WriteString("; ")
		b.WriteString(e.Advice)
	}
	return b.String()
}

// answer says what the join endpoint answered.
func (e *JoinRefusedError) answer() string {
	if e.Status == 0 {
		return e.Endpoint + " gave the browser no answer it could show"
	}
	return fmt.Sprintf("%s answered %d %s", e.Endpoint, e.Status, http.StatusText(e.Status))
}

// Is makes a refused join ErrJoinRefused; a 409 ErrJoinConflict; a 401
// ErrSessionRefused, as the endpoint's 401 is.
func (e *JoinRefusedError) Is(target error) bool {
	switch target {
	case ErrJoinRefused:
		return true
	case ErrJoinConflict:
		return e.Status == http.StatusConflict
	case ErrSessionRefused:
		return e.Status == http.StatusUnauthorized
	case ErrOriginMismatch:
		return e.OriginMismatch
	}
	return false
}

// nextReload reads, from the words of a website that explains its
// refusals, when it will load the agent's key set again.
var nextReload = regexp.MustCompile(`next after (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)`)

// KeysReloadAt is when the website says it will load the agent's key set
// again, for a join refused because the agent's key is not in the key set
// the website cached; ok is false for any other refusal.
func (e *JoinRefusedError) KeysReloadAt() (at time.Time, ok bool) {
	m := nextReload.FindStringSubmatch(e.Description)
	if m == nil {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, m[1])
	return at, err == nil
}

// Explain is the refusal on several lines, for a terminal: the status, the
// website's error and words, and what to do.
func (e *JoinRefusedError) Explain() string {
	var b strings.Builder
	b.WriteString("the website refused to join the browser to the agent's Session.\n")
	fmt.Fprintf(&b, "  join:        %s\n", e.answer())
	if e.Code != "" {
		fmt.Fprintf(&b, "  error:       %s\n", e.Code)
	}
	if e.Description != "" {
		fmt.Fprintf(&b, "  website:     %q\n", e.Description)
	}
	if e.Advice != "" {
		fmt.Fprintf(&b, "  what to do:  %s\n", e.Advice)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// challengeError is the error parameter of a WWW-Authenticate challenge.
var challengeError = regexp.MustCompile(`\berror="?([A-Za-z0-9_.\-]{1,64})"?`)

// joinRefusal reads a refused join's answer: its status, headers and the
// text of its body as the browser shows it. It never keeps a header but
// WWW-Authenticate's error code, nor more of the body than
// maxJoinDescription characters.
func (a *Agent) joinRefusal(status int, header http.Header, body string, signedIn bool) *JoinRefusedError {
	e := &JoinRefusedError{Endpoint: a.disc.Join, Status: status}
	if m := challengeError.FindStringSubmatch(header.Get("WWW-Authenticate")); m != nil {
		e.Code = m[1]
	}
	body = strings.TrimSpace(body)
	// A JSON body, as the operations endpoint answers: {"error", and
	// "error_description" or "detail"}.
	var j struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
		Detail      string `json:"detail"`
	}
	if strings.HasPrefix(body, "{") && json.Unmarshal([]byte(body), &j) == nil && j.Error != "" {
		if e.Code == "" {
			e.Code = j.Error
		}
		body = j.Description
		if body == "" {
			body = j.Detail
		}
	}
	e.Description = oneLine(body, maxJoinDescription)
	e.Origin, e.WebsiteOrigin = a.origin, originOf(a.disc.Join)
	// The join lands on return_to, on the origin the agent was given: a
	// website whose own origin is spelt otherwise refuses it. Its words
	// say so when it explains; otherwise the two origins do.
	if status == http.StatusUnauthorized && e.WebsiteOrigin != "" && e.WebsiteOrigin != e.Origin {
		d := strings.ToLower(e.Description)
		e.OriginMismatch = strings.Contains(d, "return_to") || !strings.Contains(d, ":")
	}
	e.Advice = joinAdvice(e, signedIn)
	return e
}

// originOf is the origin of u, "" when it has none.
func originOf(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return ""
	}
	return strings.ToLower(p.Scheme + "://" + p.Host)
}

// joinAdvice says what a developer can do about a refused join.
func joinAdvice(e *JoinRefusedError, signedIn bool) string {
	status, description, origin := e.Status, e.Description, e.Origin
	d := strings.ToLower(description)
	switch {
	case e.OriginMismatch:
		return fmt.Sprintf("the website's own origin is %s (its poppy.json names its join there), and the agent was given %s: "+
			"the join's return_to is on the origin the agent was given, and the website accepts only its own "+
			"(localhost, 127.0.0.1 and [::1] are different origins): run the agent with -shop %s", e.WebsiteOrigin, origin, e.WebsiteOrigin)
	case status == http.StatusUnauthorized && strings.Contains(d, "is not in the key set"):
		at, _ := e.KeysReloadAt()
		advice := "the website still has this agent's earlier key set: this run signs with a key it has not loaded (a new key under the same client_id). " +
			"Keep the agent's key across runs (-user keeps it in a key file), or wait"
		if !at.IsZero() {
			advice += " until " + at.Format(time.RFC3339) + ", when the website loads the key set again"
		}
		return advice
	case status == http.StatusUnauthorized && (strings.Contains(d, "has passed") || strings.Contains(d, "in the future")):
		return "the agent's and the website's clocks disagree (the website's words above give both): bring them in sync (an assertion is valid for at most 60 s)"
	case status == http.StatusUnauthorized && strings.Contains(d, "could not be verified ("):
		return "the website says which check failed (above): fix that in the agent's join assertion or access token"
	case status == http.StatusConflict:
		return "this browser is already joined to another agent's (or another User's) Session, and the website does not join it again; " +
			"clear the browser's cookies for " + origin + " or use a fresh browser profile (a new browser context), then join again"
	case status == http.StatusUnauthorized:
		advice := "the website could not verify the join assertion; check that " +
			"the agent's keys did not change in the last 30 s (a rerun on the same -listen address makes new keys, and the website reloads an agent's keys at most every 30 s: wait and retry), " +
			"that the website accepts this agent's client_id (the demo shop accepts agents on localhost or 127.0.0.1 over http in demo mode only), " +
			"and that the agent's and the website's clocks agree (an assertion is valid for at most 60 s)"
		if signedIn {
			advice += ", and that the access token is the website's, for this client_id, and not expired"
		}
		return advice
	case status == http.StatusForbidden && strings.Contains(strings.ToLower(description), "cross-site"):
		return "the website's CSRF protection refused the join before opsgate saw it: the website must exempt its join route (endpoint.Mount.Bypass)"
	case status == http.StatusServiceUnavailable:
		return "the website can't verify the join now (it could not fetch the agent's keys, or its store is unavailable); retry in a moment"
	case status == http.StatusBadRequest:
		return "the website could not read the join form: the browser must POST assertion (and, signed in, access_token) as application/x-www-form-urlencoded"
	case status == 0:
		return "check that the browser reaches " + origin
	case status >= 200 && status < 400:
		return "the join did not land on the website's return_to page on " + origin + "; check web.browser_session_endpoint in its poppy.json"
	}
	return ""
}

// oneLine is s as plain text (A07) on one line, at most limit characters:
// its lines become sentences ("Already joined" and "Use another profile."
// become "Already joined. Use another profile.").
func oneLine(s string, limit int) string {
	var lines []string
	for line := range strings.Lines(PlainText(s)) {
		line = strings.Join(strings.Fields(line), " ")
		if line == "" {
			continue
		}
		if n := len(lines); n > 0 && !strings.ContainsAny(lines[n-1][len(lines[n-1])-1:], ".!?:;,") {
			lines[n-1] += "."
		}
		lines = append(lines, line)
	}
	s = strings.Join(lines, " ")
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	r := []rune(s)
	return string(r[:limit-1]) + "…"
}
