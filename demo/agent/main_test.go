package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
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
