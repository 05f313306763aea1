package webkit

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// New fills its defaults in, so that the godoc's own line works.
func TestNewFillsDefaults(t *testing.T) {
	k := New(testKeys...)
	if k.BasePath != DefaultBasePath || k.MaxBody != DefaultMaxBody || k.Lifetime != DefaultLifetime || k.RetryAfter != DefaultRetryAfter {
		t.Fatalf("defaults: %q %d %v %v", k.BasePath, k.MaxBody, k.Lifetime, k.RetryAfter)
	}
	mux := http.NewServeMux()
	mux.Handle(k.BasePath, k.Handler()) // panicked with "" before
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/_opsgate/fetch.js", nil))
	if w.Code != 200 {
		t.Fatalf("fetch.js: %d", w.Code)
	}
}

// Keys of the wrong lengths are an error at construction, and the Kit
// refuses to be wired.
func TestNewChecksKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys [][]byte
		ok   bool
	}{
		{"short hash key", [][]byte{[]byte("short")}, false},
		{"hash key alone", [][]byte{make([]byte, 32)}, false},
		{"short encryption key", [][]byte{make([]byte, 32), make([]byte, 8)}, false},
		{"33-byte hash key", [][]byte{make([]byte, 33), make([]byte, 32)}, false},
		{"bad old pair", [][]byte{make([]byte, 64), make([]byte, 32), make([]byte, 64), make([]byte, 7)}, false},
		{"64+16", [][]byte{make([]byte, 64), make([]byte, 16)}, true},
		{"32+24 then 64+32", [][]byte{make([]byte, 32), make([]byte, 24), make([]byte, 64), make([]byte, 32)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := New(tc.keys...)
			err := k.Check()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrKeys)) {
				t.Fatalf("Check: %v", err)
			}
			if tc.ok {
				return
			}
			defer func() {
				if recover() == nil {
					t.Fatal("Gate of a Kit with refused keys did not panic")
				}
			}()
			k.Gate(func(*http.Request) (Action, error) { return Action{}, ErrNotGated })
		})
	}
}

// A zero Kit works safely: a join binds and the Gate then asks for approval
// (W52), rather than letting every joined request through unasked.
func TestZeroKitWorks(t *testing.T) {
	var logs strings.Builder
	k := &Kit{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	if err := k.Check(); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s := Session{ID: "ses_1", Agent: "https://agent.example/c", User: "usr_1", Extensions: Extensions{"operations": "3"}}
	if err := k.sessions().Bind(w, httptest.NewRequest("POST", "/poppy/join", nil), s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "without webkit.New") {
		t.Fatalf("no warning logged: %q", logs.String())
	}
	h := k.Gate(func(r *http.Request) (Action, error) {
		return Action{Key: "exchange:1", Terms: map[string]string{"size": "L"}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("W52: performed without approval") }))
	r := httptest.NewRequest("POST", "/exchange", nil)
	for _, c := range w.Result().Cookies() {
		r.AddCookie(c)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden || w.Header().Get(HeaderOperation) == "" {
		t.Fatalf("zero Kit, joined browser: %d %q", w.Code, w.Header().Get(HeaderOperation))
	}
}
