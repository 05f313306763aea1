package webkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
)

// ---- describe, body, and the status route ----

func TestGateDescribe(t *testing.T) {
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	cookie := joinCookie(t, e.kit, sesIn)
	var runs atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	tests := []struct {
		name     string
		describe Describe
		body     string
		status   int
	}{
		{"ErrNotGated passes through with the body", func(r *http.Request) (Action, error) { io.ReadAll(r.Body); return Action{}, ErrNotGated }, "hello", 200},
		{"wrapped ErrNotGated passes through", func(r *http.Request) (Action, error) { return Action{}, fmt.Errorf("GET: %w", ErrNotGated) }, "", 200},
		{"other error → 400", func(r *http.Request) (Action, error) { return Action{}, errors.New(`field "size" is required`) }, "", 400},
		{"empty key → 400", func(r *http.Request) (Action, error) { return Action{Terms: map[string]int{}}, nil }, "", 400},
		{"W16 terms not an object → 400", func(r *http.Request) (Action, error) { return Action{Key: "k", Terms: []int{1}}, nil }, "", 400},
		{"nil terms → 400", func(r *http.Request) (Action, error) { return Action{Key: "k"}, nil }, "", 400},
		{"raw JSON terms → 403", func(r *http.Request) (Action, error) {
			return Action{Key: "k", Terms: json.RawMessage(`{"b":1,"a":2}`)}, nil
		}, "", 403},
		{"too large body → 413", func(r *http.Request) (Action, error) { return Action{Key: "k", Terms: map[string]int{}}, nil }, strings.Repeat("x", defaultMaxBody+1), 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs.Store(0)
			r := httptest.NewRequest("POST", "/x", strings.NewReader(tt.body))
			r.AddCookie(cookie)
			rec := httptest.NewRecorder()
			e.kit.Gate(tt.describe)(next).ServeHTTP(rec, r)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.status == 200 && rec.Body.String() != tt.body {
				t.Errorf("handler read %q, want the body restored", rec.Body)
			}
			if tt.status == 400 && !strings.Contains(rec.Body.String(), "invalid_request") {
				t.Errorf("body %s", rec.Body)
			}
			if tt.status != 200 && runs.Load() != 0 {
				t.Errorf("handler ran")
			}
		})
	}
}

func TestStatusRoute(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "redis" {
				sharedRedis(t)
			}
			e := newGateEnv(t, be.make(t), newClock())
			status := e.kit.handler()
			rec := e.do(e.request(joinedIn, formM, "text/html"))
			_, ref := refOf(t, rec)
			statusURL := statusURLOf(t, rec)
			if !strings.HasPrefix(statusURL, defaultBasePath+"status?w=") {
				t.Fatalf("status URL %q", statusURL)
			}
			ask := func(target string, s *Session) (int, string) {
				r := httptest.NewRequest("GET", target, nil)
				if s != nil {
					r.AddCookie(joinCookie(t, e.kit, *s))
				}
				rec := httptest.NewRecorder()
				status.ServeHTTP(rec, r)
				var body struct{ Status string }
				json.Unmarshal(rec.Body.Bytes(), &body)
				if rec.Header().Get("Cache-Control") != "no-store" {
					t.Errorf("status route Cache-Control %q", rec.Header().Get("Cache-Control"))
				}
				return rec.Code, body.Status
			}
			byRef := defaultBasePath + "status?ref=" + ref
			for _, c := range []struct {
				name   string
				target string
				s      *Session
				code   int
				status string
			}{
				{"page handle → waiting", statusURL, &sesIn, 200, "waiting"},
				{"ref → waiting", byRef, &sesIn, 200, "waiting"},
				{"not joined → 404", statusURL, nil, 404, ""},
				{"W77 another account → 404", byRef, &sesOther, 404, ""},
				{"W44 signed out → 404", byRef, &sesOut, 404, ""},
				{"forged handle → 404", defaultBasePath + "status?w=abc", &sesIn, 404, ""},
				{"bad ref → 404", defaultBasePath + "status?ref=%3Cx%3E", &sesIn, 404, ""},
			} {
				if code, st := ask(c.target, c.s); code != c.code || st != c.status {
					t.Errorf("%s: %d %q, want %d %q", c.name, code, st, c.code, c.status)
				}
			}
			rr := e.lookup(sesIn, ref)
			e.record(sesIn, storedriver.TakeResult{Operation: rr.Current, Ref: ref})
			if code, st := ask(statusURL, &sesIn); code != 200 || st != "approved" { // W106
				t.Errorf("after approval: %d %s", code, st)
			}
			e.do(e.request(joinedIn, formM, "text/html"))
			if code, st := ask(statusURL, &sesIn); code != 200 || st != "performed" { // W108
				t.Errorf("after Continue: %d %s", code, st)
			}
			for _, f := range []string{"waiting.js", "fetch.js", "card.js", "opsgate.css"} {
				r := httptest.NewRequest("GET", defaultBasePath+f, nil)
				rec := httptest.NewRecorder()
				status.ServeHTTP(rec, r)
				if rec.Code != 200 || rec.Body.Len() == 0 || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s: %d", f, rec.Code)
				}
			}
		})
	}
}
