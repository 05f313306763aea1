package webkit

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// New fills its defaults in, so that the godoc's own line works.
func TestNewFillsDefaults(t *testing.T) {
	k := New(testKeys...)
	if k.Store == nil || k.Sessions == nil || k.StoreTimeout != defaultStoreTimeout {
		t.Fatalf("defaults: %T %T %v", k.Store, k.Sessions, k.StoreTimeout)
	}
	mux := http.NewServeMux()
	mux.Handle(k.basePath(), k.handler())
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
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errKeys)) {
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

// A Kit not built by New fails when it is wired, with a message that
// says to use New: Check says why, and Gate and Handler panic with it.
func TestZeroKitFailsClearly(t *testing.T) {
	for name, k := range map[string]*Kit{
		"zero":        {Logger: slog.New(slog.DiscardHandler)},
		"nil":         nil,
		"nil Store":   func() *Kit { k := New(testKeys...); k.Store = nil; return k }(),
		"no Sessions": func() *Kit { k := New(testKeys...); k.Sessions = nil; return k }(),
	} {
		t.Run(name, func(t *testing.T) {
			err := k.Check()
			if err == nil {
				t.Fatal("Check: nil")
			}
			if k == nil || !k.built {
				if !strings.Contains(err.Error(), "webkit.New") {
					t.Errorf("Check: %v does not say to use webkit.New", err)
				}
			}
			// Its routes answer 500, naming nothing of the error.
			rec := httptest.NewRecorder()
			k.ServeHTTP(rec, httptest.NewRequest("GET", "/_opsgate/waiting.js", nil))
			if rec.Code != http.StatusInternalServerError {
				t.Errorf("ServeHTTP: %d, want 500", rec.Code)
			}
			for what, wire := range map[string]func(){
				"Gate": func() { k.Gate(func(*http.Request) (Action, error) { return Action{}, ErrNotGated }) },
			} {
				func() {
					defer func() {
						if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), err.Error()) {
							t.Errorf("%s: recovered %v, want %v", what, r, err)
						}
					}()
					wire()
				}()
			}
		})
	}
}

// handler is the Kit's routes as an http.Handler, for the tests.
func (k *Kit) handler() http.Handler { return k }
