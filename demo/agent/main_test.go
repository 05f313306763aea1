package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/demo/agent/refagent"
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
