package kit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/e2e/internal/browsertest"
	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/testenv"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

var (
	testKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")}
	// sesIn is the Session the test's browser is joined to.
	sesIn = webkit.Session{ID: "ses_in", Agent: "https://agent.example/client", User: "usr_1", Account: "acct_1", Extensions: map[string]string{"operations": "3"}}
)

// needChromium skips the test without Debian's Chromium (or fails it when
// OPSGATE_REQUIRE names chromium), and under -short.
func needChromium(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: real Chromium")
	}
	if _, err := os.Stat(browsertest.ChromiumPath); err != nil {
		testenv.Missing(t, "chromium", err.Error())
	}
}

// kitSite is a website on loopback built only from the kit's public API:
// a Kit, its Mount in front of mux, /join binding the browser to sesIn as
// a website's own join would, and each 403's Poppy-Operation ref kept, so
// that the test can approve it in the store as the endpoint would.
type kitSite struct {
	t   *testing.T
	Kit *webkit.Kit
	Mux *http.ServeMux
	URL string

	mu   sync.Mutex
	refs []string
}

// newKitSite serves the site; wrap, when set, goes around everything (a
// Content-Security-Policy, say).
func newKitSite(t *testing.T, wrap func(http.Handler) http.Handler) *kitSite {
	t.Helper()
	k := webkit.New(testKeys...)
	k.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	k.Sessions.(*webkit.CookieSessions).Insecure = true // plain http on loopback
	s := &kitSite{t: t, Kit: k, Mux: http.NewServeMux()}
	s.Mux.HandleFunc("/join", func(w http.ResponseWriter, r *http.Request) {
		if err := k.Sessions.Bind(w, r, sesIn); err != nil {
			t.Error(err)
		}
		fmt.Fprint(w, `<!doctype html><title>joined</title><p id="joined">joined</p>`)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mount().ServeHTTP(&refWriter{ResponseWriter: w, site: s}, r)
	})
	if wrap != nil {
		h = wrap(h)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

var mountOnce sync.Map // *kitSite → http.Handler

// mount builds the Mount at the first request, once the test has set the
// Kit's fields.
func (s *kitSite) mount() http.Handler {
	if h, ok := mountOnce.Load(s); ok {
		return h.(http.Handler)
	}
	m, err := endpoint.NewMount(endpoint.Config{Origin: s.URL, Kit: s.Kit, AllowLocal: true})
	if err != nil {
		s.t.Fatal(err)
	}
	h, _ := mountOnce.LoadOrStore(s, m.Handler(s.Mux))
	return h.(http.Handler)
}

// lastRef is the ref of the latest 403.
func (s *kitSite) lastRef() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refs) == 0 {
		s.t.Fatal("no 403 carried a ref yet")
	}
	return s.refs[len(s.refs)-1]
}

// approve records the User's approval of exactly the revision ref names,
// as the endpoint does once its checks pass.
func (s *kitSite) approve(ref string) {
	s.t.Helper()
	id, rev, ok := storekit.SplitRef(ref)
	if !ok {
		s.t.Fatalf("ref %q", ref)
	}
	rep, err := storedriver.Steps(s.Kit.Store).Record(context.Background(), sesIn.Owner(), ref,
		store.Approval{OperationID: id, Revision: rev, Approver: store.ApproverUser}, s.now(), storedriver.RecordOptions{})
	if err != nil || rep.Result != storedriver.Recorded {
		s.t.Fatalf("Record %s: %v %v", ref, rep.Result, err)
	}
}

func (s *kitSite) now() time.Time {
	if s.Kit.Clock != nil {
		return s.Kit.Clock()
	}
	return time.Now()
}

type refWriter struct {
	http.ResponseWriter
	site *kitSite
	done bool
}

func (w *refWriter) WriteHeader(code int) {
	if !w.done {
		w.done = true
		if v := w.Header().Values(headers.Operation); len(v) > 0 {
			if _, ref, err := headers.ParseOperation(v); err == nil {
				w.site.mu.Lock()
				w.site.refs = append(w.site.refs, ref)
				w.site.mu.Unlock()
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *refWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *refWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// refusingStore refuses the actions named unavailable (the store is down)
// and ratelimited (too many open operations), so that the kit's own
// refusal pages can be seen in a browser.
type refusingStore struct{ storedriver.Store }

func (s refusingStore) Take(ctx context.Context, o store.Owner, a storedriver.TakeRequest, now time.Time) (storedriver.TakeResult, error) {
	switch a.Key {
	case "unavailable":
		return storedriver.TakeResult{}, errors.New("the store is down")
	case "ratelimited":
		return storedriver.TakeResult{}, fmt.Errorf("take: %w", storedriver.ErrRateLimited)
	}
	return s.Store.Take(ctx, o, a, now)
}
