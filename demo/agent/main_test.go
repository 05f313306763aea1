package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/agent/refagent"
	"github.com/opsgate/opsgate/demo/shop"
)

// The exit status of `agent check`: 0 only when nothing fails, 1 when a
// case fails, 2 when the checker can't run.
func TestCheckExitStatus(t *testing.T) {
	nothing := httptest.NewServer(http.NotFoundHandler()) // no poppy.json: the discovery case fails
	defer nothing.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stdout := os.Stdout
	os.Stdout = devnull
	defer func() { os.Stdout = stdout }()
	if got := check([]string{"-site", nothing.URL}); got != 1 {
		t.Errorf("a site without poppy.json: exit %d, want 1", got)
	}
	if got := check([]string{"-site", "ftp://nowhere"}); got != 2 {
		t.Errorf("a bad -site: exit %d, want 2", got)
	}
	if got := check([]string{"-site", nothing.URL, "-action", "POST nopath"}); got != 2 {
		t.Errorf("a bad -action: exit %d, want 2", got)
	}
	stderr := os.Stderr
	os.Stderr = devnull
	defer func() { os.Stderr = stderr }()
	for _, args := range [][]string{
		{"-site", nothing.URL, "-header", "X-CSRF-Token: abc"},                                 // without -action
		{"-site", nothing.URL, "-action", "POST /x {}", "-header", "no colon"},                 // not Name: value
		{"-site", nothing.URL, "-action", "POST /x {}", "-header", "Bad Name: v"},              // not a token
		{"-site", nothing.URL, "-action", "POST /x {}", "-header", "Poppy-Session: forged"},    // the checker's own
		{"-site", nothing.URL, "-action", "POST /x {}", "-header", "X-CSRF-Token: a", "stray"}, // a stray argument
	} {
		if got := check(args); got != 2 {
			t.Errorf("check %q: exit %d, want 2", args, got)
		}
	}
}

// -list prints the forms the check would submit, and those it never does,
// submitting none, and exits 0.
func TestCheckList(t *testing.T) {
	var posts int
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts++
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<form method="post" action="/orders/1/exchange"><input type="hidden" name="csrf_token" value="s3cret"><input name="size" value="M"></form>
<form method="post" action="/logout"></form>`)
	}))
	defer site.Close()
	out := captureStdout(t, func() {
		if got := check([]string{"-site", site.URL, "-list"}); got != 0 {
			t.Errorf("-list: exit %d, want 0", got)
		}
	})
	for _, want := range []string{"1. POST " + site.URL + "/orders/1/exchange csrf_token=…&size=M", "never submitted:\n  POST " + site.URL + "/logout"} {
		if !strings.Contains(out, want) {
			t.Errorf("-list printed:\n%s\nlacks %q", out, want)
		}
	}
	if posts != 0 || strings.Contains(out, "s3cret") {
		t.Errorf("-list submitted %d forms, or printed the token:\n%s", posts, out)
	}
}

func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = f, f
	fn()
	os.Stdout, os.Stderr = stdout, stderr
	b, _ := os.ReadFile(f.Name())
	return string(b)
}

// A refused join is printed in words: the status, the website's words and
// what to do, one per line; the error is still the refusal to errors.Is.
func TestJoinRefusedPrinted(t *testing.T) {
	refused := &refagent.JoinRefusedError{
		Endpoint:    "http://localhost:8080/poppy/join",
		Status:      http.StatusConflict,
		Description: "This browser is already joined to another session.",
		Advice:      "clear the browser's cookies for http://localhost:8080 or use a fresh browser profile",
	}
	err := joinFailed(fmt.Errorf("wrapped: %w", refused))
	got := "agent: " + err.Error()
	for _, want := range []string{
		"agent: the website refused to join the browser to the agent's Session.\n",
		"join:        http://localhost:8080/poppy/join answered 409 Conflict\n",
		`website:     "This browser is already joined to another session."`,
		"what to do:  clear the browser's cookies",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("printed:\n%s\nlacks %q", got, want)
		}
	}
	if !errors.Is(err, refagent.ErrJoinConflict) || !errors.Is(err, refagent.ErrJoinRefused) {
		t.Errorf("errors.Is lost the refusal: %v", err)
	}
	other := errors.New("refagent: join page: timeout")
	if joinFailed(other) != other {
		t.Error("another error was reworded")
	}
}

// The agent's exit status: 0 performed (now or before), 2 not approved,
// 3 declined, 1 any error (and a result that is neither).
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		result string
		err    error
		want   int
	}{
		{refagent.Performed, nil, 0},
		{refagent.AlreadyPerformed, nil, 0},
		{refagent.NotApproved, nil, 2},
		{refagent.Declined, nil, 3},
		{refagent.NotPerformed, nil, 1},
		{refagent.EarlierPending, nil, 1},
		{refagent.Approved, nil, 1},
		{"", errors.New("the browser could not do it"), 1},
		{refagent.Performed, errors.New("an error wins"), 1},
		{"", flag.ErrHelp, 0},
	} {
		if got := exitStatus(tc.result, tc.err); got != tc.want {
			t.Errorf("exitStatus(%q, %v) = %d, want %d", tc.result, tc.err, got, tc.want)
		}
	}
	// Every status is in -h.
	var usage strings.Builder
	if got := agent([]string{"-h"}, io.Discard, &usage); got != 0 {
		t.Errorf("-h: exit %d, want 0", got)
	}
	for _, want := range []string{"Exit status: 0 the action was performed", "2 not\napproved", "3 the shop\ndeclined the approval (approval_declined); 1 any error"} {
		if !strings.Contains(usage.String(), want) {
			t.Errorf("-h lacks %q:\n%s", want, usage.String())
		}
	}
}

// Bad flags are errors (1, never 2: 2 is not approved), found before
// Chromium starts, and say what to write.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"-approver", "robot"}, `-approver "robot": choose user or agent`},
		{[]string{"-do", "refund"}, `-do "refund": choose exchange, delivery or cancel`},
		{[]string{"-do", "cancel"}, "-do cancel needs -signed-in"},
		{[]string{"-do", "delivery", "-date", "2026-13-01"}, `-date "2026-13-01": write a day YYYY-MM-DD`},
		{[]string{"-user", "alice smith"}, "-user: refagent: a User ID is visible ASCII"},
		{[]string{"-listen", "nowhere"}, `-listen "nowhere": write host:port`},
		{[]string{"-approve", "exchange<100USD"}, "write kind<=amountCURRENCY"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-via", "fax"}, `-via "fax": choose web, api or mcp`},
		{[]string{"-via", "api", "-do", "cancel", "-signed-in"}, "-do cancel is offered on the shop's website only"},
	} {
		var stderr strings.Builder
		if got := agent(tc.args, io.Discard, &stderr); got != 1 {
			t.Errorf("%v: exit %d, want 1", tc.args, got)
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), tc.want)
		}
	}
}

// -user picks the User and keeps the agent's address, so that its
// client_id, and with it the demo's copy of the data, is the same on every
// run; -listen still says where.
func TestUserFlag(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		user, listen string
		same         bool
	}{
		{nil, "", "127.0.0.1:0", false},
		{[]string{"-user", "alice"}, "alice", userListen, true},
		{[]string{"-user", "alice", "-listen", "127.0.0.1:9001"}, "alice", "127.0.0.1:9001", true},
		{[]string{"-listen", "127.0.0.1:9002"}, "", "127.0.0.1:9002", true},
		{[]string{"-user", "bob", "-listen", "127.0.0.1:0"}, "bob", "127.0.0.1:0", false},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if o.user != tc.user || o.listen != tc.listen || o.sameClientID != tc.same {
			t.Errorf("%v: user %q listen %q same client_id %v; want %q %q %v", tc.args, o.user, o.listen, o.sameClientID, tc.user, tc.listen, tc.same)
		}
	}
}

// -via api and -via mcp: the agent performs the exchange and the delivery
// change through the demo shop's JSON API and MCP server, without a
// browser, each once (P03, M03).
func TestViaAPIAndMCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	s, err := shop.NewServer(shop.Config{BaseURL: base, AllowLocal: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: s.Handler()}}
	srv.Start()
	t.Cleanup(srv.Close)
	for _, via := range []string{"api", "mcp"} {
		for _, do := range []string{"exchange", "delivery"} {
			var out strings.Builder
			result, err := run([]string{"-shop", base, "-via", via, "-do", do, "-approver", "agent"}, &out, io.Discard)
			if err != nil || result != refagent.Performed {
				t.Fatalf("-via %s -do %s: %q, %v\n%s", via, do, result, err, out.String())
			}
			if !strings.Contains(out.String(), "_"+via+",") && !strings.Contains(out.String(), "_"+via+" ") {
				t.Errorf("-via %s -do %s: the approved revision is not the %s's:\n%s", via, do, via, out.String())
			}
		}
	}
}
