package webkit

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// discardWriter is a ResponseWriter that costs nothing, so the benchmarks
// measure the Gate, not httptest.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

func (w *discardWriter) reset() {
	clear(w.h)
	w.status = 0
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// benchRequest is a request as an ordinary browser sends it: cookies of
// the website's own, none of the kit's.
func benchRequest() *http.Request {
	r := httptest.NewRequest("POST", "/exchange", strings.NewReader(formM))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Cookie", "site_session=abc123; theme=dark; _ga=GA1.2.3")
	r.Header.Set("Accept", "text/html")
	return r
}

// BenchmarkGateOrdinaryBrowser: W07, an ordinary browser passes straight
// through (target: < 1 µs and ≤ 2 allocs over the bare handler).
func BenchmarkGateOrdinaryBrowser(b *testing.B) {
	k := New(testKeys...)
	gated := k.Gate(exchangeDescribe)(okHandler)
	for _, bb := range []struct {
		name string
		h    http.Handler
	}{{"bare", okHandler}, {"gated", gated}} {
		b.Run(bb.name, func(b *testing.B) {
			r := benchRequest()
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				bb.h.ServeHTTP(w, r)
			}
		})
	}
}

type benchBackend struct {
	name string
	make func(b *testing.B) store.Store
}

func benchBackends() []benchBackend {
	return []benchBackend{
		// The approved-repeat benchmark opens one operation per request
		// for one owner and agent, beyond the default caps of open
		// operations (b.N can pass the agent's 10,000).
		{"memory", func(*testing.B) store.Store {
			m := memstore.New(memstore.Config{MaxOpenPerOwner: -1, MaxOpenPerAgent: -1})
			return m
		}},
		{"redis", func(b *testing.B) store.Store {
			return redisstore.New(sharedRedis(b).Client(b), redisstore.Options{Prefix: fmt.Sprintf("gb%d:", prefixes.Add(1)), MaxOpenPerOwner: -1, MaxOpenPerAgent: -1})
		}},
	}
}

func benchEnv(b *testing.B, st store.Store) (*gateEnv, *countingStore) {
	cs := &countingStore{Store: storedriver.Steps(st)}
	e := newGateEnv(b, storedriver.AsStore(cs), newClock())
	e.kit.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return e, cs
}

// BenchmarkGateFirstRequest: a joined browser's request with no approval,
// the 403 path: one store round trip (Take issues or reuses).
func BenchmarkGateFirstRequest(b *testing.B) {
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			e, cs := benchEnv(b, be.make(b))
			cookie := joinCookie(b, e.kit, sesIn)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/exchange", strings.NewReader(formM))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.Header.Set("Accept", "text/html")
				r.AddCookie(cookie)
				w.reset()
				e.h.ServeHTTP(w, r)
				if w.status != 403 {
					b.Fatalf("status %d", w.status)
				}
			}
			b.ReportMetric(float64(cs.calls.Load()+cs.marks.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkGateApprovedRepeat: the approved repeat, take + perform +
// finish: two store round trips.
func BenchmarkGateApprovedRepeat(b *testing.B) {
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			e, cs := benchEnv(b, be.make(b))
			cookie := joinCookie(b, e.kit, sesIn)
			forms := make([]string, b.N)
			for i := range forms { // one recorded approval per request, set up untimed
				order := fmt.Sprintf("ord_%d", i)
				e.approve(sesIn, order, "M")
				forms[i] = "order=" + order + "&size=M"
			}
			cs.calls.Store(0)
			cs.marks.Store(0)
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := httptest.NewRequest("POST", "/exchange", strings.NewReader(forms[i]))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				r.AddCookie(cookie)
				w.reset()
				e.h.ServeHTTP(w, r)
				if w.status != 200 && w.status != 0 {
					b.Fatalf("status %d", w.status)
				}
			}
			b.StopTimer()
			if got := e.runs.Load(); got != int64(b.N) {
				b.Fatalf("handler ran %d times for %d approvals", got, b.N)
			}
			b.ReportMetric(float64(cs.calls.Load()+cs.marks.Load())/float64(b.N), "roundtrips/op")
		})
	}
}
