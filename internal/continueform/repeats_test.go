package continueform

import (
	"errors"
	"strings"
	"testing"
)

// W62: a Continue repeats the request. Only a CSRF library's token may
// come back with another value; any other field that changed, even one
// whose name says it is secret (so its value is never shown), is a
// difference.
func TestRepeatsLetsOnlyCSRFTokensChange(t *testing.T) {
	form := func(fields ...Field) *Control {
		return &Control{Method: "POST", URL: "https://shop.example/x", Enctype: "application/x-www-form-urlencoded", Fields: fields}
	}
	const ct = "application/x-www-form-urlencoded"
	if err := form(Field{"csrf_token", "new"}, Field{"size", "L"}).Repeats("POST", "https://shop.example/x", ct, []byte("csrf_token=old&size=L")); err != nil {
		t.Errorf("a fresh CSRF token: %v", err)
	}
	err := form(Field{"access_token", "new"}, Field{"size", "L"}).Repeats("POST", "https://shop.example/x", ct, []byte("access_token=old&size=L"))
	var d *DiffError
	if !errors.As(err, &d) || len(d.Changed) != 1 || d.Changed[0] != "access_token" {
		t.Fatalf("a changed access_token: %v", err)
	}
	if strings.Contains(err.Error(), "old") || strings.Contains(err.Error(), "new") {
		t.Errorf("a secret's value is shown: %v", err)
	}
}
