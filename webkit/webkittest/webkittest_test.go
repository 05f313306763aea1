package webkittest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/webkit/webkittest"
)

// TestJoinRefused: a site that refuses the join gives an error, not a
// browser that looks joined.
func TestJoinRefused(t *testing.T) {
	site := webkittest.New("https://shop.example")
	site.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no joins here", http.StatusUnauthorized)
	})
	if _, err := site.NewAgent().Session("usr_1").Join(); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v, want the 401", err)
	}
}

// TestHandlerPanicIsAnError: a panicking handler gives the test an error,
// as a server dropping the connection would, never a made-up status.
func TestHandlerPanicIsAnError(t *testing.T) {
	site := webkittest.New("https://shop.example")
	site.Handler = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	res := site.Browser().Get("/")
	if res.Err == nil || !strings.Contains(res.Err.Error(), "panicked") {
		t.Fatalf("status %d, err %v", res.StatusCode, res.Err)
	}
}

// TestOtherHostsUnreachable: the Resolver reaches only the harness's
// agents, in-process: nothing leaves the process.
func TestOtherHostsUnreachable(t *testing.T) {
	site := webkittest.New("https://shop.example")
	site.Handler = http.NotFoundHandler()
	if res := site.Browser().Get("/"); res.StatusCode != http.StatusNotFound {
		t.Errorf("the site: %d %v", res.StatusCode, res.Err)
	}
	r := site.Resolver()
	if r.HTTPClient == nil || r.AllowLocal {
		t.Fatalf("the Resolver does not fetch through the harness: %+v", r)
	}
	if res, err := r.HTTPClient.Get("https://agent.example/client"); err == nil {
		res.Body.Close()
		t.Error("the harness fetched an agent it does not have")
	}
	a := site.NewAgent()
	res, err := r.HTTPClient.Get(a.ClientID())
	if err != nil {
		t.Fatalf("the harness's agent: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("the harness's agent: %d", res.StatusCode)
	}
}

// TestAgainWithoutRequest: Again before any request is an error.
func TestAgainWithoutRequest(t *testing.T) {
	site := webkittest.New("https://shop.example")
	if res := site.Browser().Again(); res.Err == nil {
		t.Error("Again with no earlier request did not fail")
	}
}

// TestBrowserHeader: Header goes with every request, so that a site behind
// a CSRF check can be tested: here net/http's CrossOriginProtection
// refuses the cross-site POST a browser would mark so.
func TestBrowserHeader(t *testing.T) {
	site := webkittest.New("https://shop.example")
	site.Handler = http.NewCrossOriginProtection().Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	b := site.Browser()
	if res := b.PostForm("/x", nil); res.StatusCode != 200 {
		t.Fatalf("same-origin POST: %d", res.StatusCode)
	}
	b.Header = http.Header{"Sec-Fetch-Site": {"cross-site"}}
	if res := b.PostForm("/x", nil); res.StatusCode != 403 {
		t.Fatalf("cross-site POST: %d, want 403", res.StatusCode)
	}
}
