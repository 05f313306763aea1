package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/testenv"
)

// bookingShop is an upstream whose POST /api/bookings is described by its
// own describe URL, written in Go here, as any website would write it in
// its own language.
type bookingShop struct {
	srv       *httptest.Server
	bookings  atomic.Int32 // bookings made
	described atomic.Int32 // calls of the describe URL
	mode      atomic.Value // "ok", "fail", "slow", "garbage"

	mu   sync.Mutex
	last describeRequest
}

func newBookingShop(t *testing.T) *bookingShop {
	s := &bookingShop{}
	s.mode.Store("ok")
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/bookings/{table}", func(w http.ResponseWriter, r *http.Request) {
		var b struct{ Date string }
		json.NewDecoder(r.Body).Decode(&b)
		s.bookings.Add(1)
		fmt.Fprintf(w, `{"booked":%q}`, b.Date)
	})
	mux.HandleFunc("POST /opsgate/describe", func(w http.ResponseWriter, r *http.Request) {
		s.described.Add(1)
		var req describeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		s.mu.Lock()
		s.last = req
		s.mu.Unlock()
		switch s.mode.Load() {
		case "fail":
			http.Error(w, "describe is down", http.StatusInternalServerError)
			return
		case "slow":
			time.Sleep(300 * time.Millisecond)
		case "garbage":
			fmt.Fprint(w, `{"key":"x","summary":"y","terms":[1]}`)
			return
		}
		var b struct {
			Date   string
			Guests int
		}
		json.Unmarshal([]byte(*req.Body), &b)
		if b.Date == "" {
			w.WriteHeader(http.StatusNoContent) // not gated
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"key":      "booking:" + req.PathValues["table"] + ":" + b.Date,
			"terms":    map[string]any{"table": req.PathValues["table"], "date": b.Date, "guests": b.Guests},
			"summary":  fmt.Sprintf("Book table %s for %d on %s.", req.PathValues["table"], b.Guests, b.Date),
			"lifetime": 300,
		})
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

const bookingConfig = `
origin: https://shop.example
upstream: UPSTREAM
store: memory
cookie_keys:
  - hash_env: GW_TEST_HASH
    encryption_env: GW_TEST_ENC
actions:
  - match: POST /api/bookings/{table}
    describe: DESCRIBE
    describe_timeout: 150ms
    describe_headers: [Cookie]
    kind: booking
`

func describeConfig(describeURL string) string {
	return strings.ReplaceAll(bookingConfig, "DESCRIBE", describeURL)
}

// An action named by the website's describe URL: the gateway asks it, and
// the flow is the Gate's.
func TestDescribeURL(t *testing.T) {
	up := newBookingShop(t)
	site := startGateway(t, describeConfig("/opsgate/describe"), up.srv.URL)

	t.Run("W07 an ordinary browser never waits on the describe URL", func(t *testing.T) {
		res := site.Browser().PostJSON("/api/bookings/t4", `{"date":"2026-12-24","guests":2}`)
		if res.StatusCode != 200 || up.described.Load() != 0 || up.bookings.Load() != 1 {
			t.Fatalf("%d, described %d, bookings %d", res.StatusCode, up.described.Load(), up.bookings.Load())
		}
	})

	t.Run("W53 W96 the describe URL's answer is the operation, performed once", func(t *testing.T) {
		before := up.bookings.Load()
		s, b := join(t, site)
		b.Header = http.Header{"X-Private": {"not for describe"}}
		res := b.PostJSON("/api/bookings/t4", `{"date":"2026-12-31","guests":4}`)
		if res.StatusCode != http.StatusForbidden || res.Ref == "" {
			t.Fatalf("%d %s", res.StatusCode, res.Body)
		}
		up.mu.Lock()
		last := up.last
		up.mu.Unlock()
		if last.Method != "POST" || last.Path != "/api/bookings/t4" || last.PathValues["table"] != "t4" || last.Headers["Content-Type"] == nil {
			t.Errorf("describe got %+v", last)
		}
		if _, ok := last.Headers["X-Private"]; ok {
			t.Error("describe got a header describe_headers does not allow")
		}
		for _, c := range last.Headers["Cookie"] {
			if strings.Contains(c, "opsgate_") {
				t.Errorf("describe got the gateway's cookie: %q", c)
			}
		}
		look := s.Lookup(res.Ref)
		if look.Operation == nil || look.Operation.Summary != "Book table t4 for 4 on 2026-12-31." {
			t.Fatalf("lookup %+v", look)
		}
		if ttl := time.Until(look.Operation.ExpiresAt); ttl > 5*time.Minute+time.Second || ttl < 4*time.Minute {
			t.Errorf("expires in %s, want the describe URL's 300 s", ttl)
		}
		s.Approve(res.Ref)
		if again := b.Again(); again.StatusCode != 200 || string(again.Body) != `{"booked":"2026-12-31"}` {
			t.Fatalf("again: %d %s", again.StatusCode, again.Body)
		}
		b.Again()
		if got := up.bookings.Load() - before; got != 1 {
			t.Fatalf("booked %d times, want 1", got)
		}
	})

	t.Run("204 from the describe URL: not gated, straight to the upstream", func(t *testing.T) {
		before := up.bookings.Load()
		_, b := join(t, site)
		res := b.PostJSON("/api/bookings/t5", `{"guests":2}`)
		if res.StatusCode != 200 || res.Ref != "" || up.bookings.Load() != before+1 {
			t.Fatalf("%d ref %q", res.StatusCode, res.Ref)
		}
	})

	for _, mode := range []string{"fail", "slow", "garbage"} {
		t.Run("W143 describe URL "+mode+": 503 with Retry-After, nothing performed", func(t *testing.T) {
			up.mode.Store(mode)
			defer up.mode.Store("ok")
			before := up.bookings.Load()
			_, b := join(t, site)
			start := time.Now()
			res := b.PostJSON("/api/bookings/t6", `{"date":"2027-01-01","guests":2}`)
			if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || res.Ref != "" {
				t.Fatalf("%d %v %s", res.StatusCode, res.Header, res.Body)
			}
			var body struct{ Error, Message string }
			if json.Unmarshal(res.Body, &body) != nil || body.Error != "temporarily_unavailable" || strings.Contains(body.Message, "fail") {
				t.Errorf("W142 body %q", res.Body)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("took %s; describe_timeout is 150ms", took)
			}
			if up.bookings.Load() != before {
				t.Fatal("performed with no answer from describe")
			}
			page := b.Post("/api/bookings/t6", "application/json", []byte(`{"date":"2027-01-01"}`))
			if page.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(page.Body), "nothing was done") {
				t.Errorf("page: %d %s", page.StatusCode, page.Body)
			}
		})
	}
}

// The Python describe example of README.md, run as the describe URL.
func TestDescribePythonExample(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, "python3", "the Python describe example of README.md")
	}
	src, err := os.ReadFile("testdata/describe.py")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), string(src)) {
		t.Fatal("README.md does not show testdata/describe.py as it is")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, "python3", "testdata/describe.py", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }() // the example serves until it is stopped
	port, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the example printed no port: %v", err)
	}
	up := newBookingShop(t)
	cfg := strings.ReplaceAll(describeConfig("http://127.0.0.1:"+strings.TrimSpace(port)+"/opsgate/describe"), "150ms", "2s")
	site := startGateway(t, cfg, up.srv.URL)

	s, b := join(t, site)
	res := b.PostJSON("/api/bookings/t1", `{"date":"2026-12-24","guests":3}`)
	if res.StatusCode != http.StatusForbidden || res.Ref == "" {
		t.Fatalf("%d %s", res.StatusCode, res.Body)
	}
	look := s.Lookup(res.Ref)
	if look.Operation == nil || look.Operation.Summary != "Book a table for 3 on 2026-12-24." || string(look.Operation.Terms) != `{"date":"2026-12-24","guests":3}` {
		t.Fatalf("lookup %+v", look.Operation)
	}
	s.Approve(res.Ref)
	if again := b.Again(); again.StatusCode != 200 || up.bookings.Load() != 1 {
		t.Fatalf("again: %d, bookings %d", again.StatusCode, up.bookings.Load())
	}
	if again := b.Again(); again.StatusCode == 200 || up.bookings.Load() != 1 {
		t.Fatalf("performed twice: %d, bookings %d", again.StatusCode, up.bookings.Load())
	}
	// Nothing to approve: 204, and the request goes on.
	if r := b.PostJSON("/api/bookings/t1", `{"guests":3}`); r.StatusCode != 200 || up.bookings.Load() != 2 {
		t.Fatalf("not gated: %d, bookings %d", r.StatusCode, up.bookings.Load())
	}
}
