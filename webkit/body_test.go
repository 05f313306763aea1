package webkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/continueform"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/memstore"
	"github.com/opsgate/opsgate/internal/storedriver"
)

// A middleware in front of the Gate that reads the form spends r.Body. The
// waiting page's Continue must still post what the browser sent (W62), so
// that a CSRF library's token and the action's fields come back, and the
// handler must still read them. These tests run a real server, post as a
// browser would, read the page's Continue form and submit it, and count
// the performances at the handler.

// press sends c as a browser does (internal/continueform builds the body
// from the control's fields, in its encoding).
func press(t *testing.T, client *http.Client, c *continueform.Control) *http.Response {
	t.Helper()
	ctype, body := c.Body()
	req, err := http.NewRequest(c.Method, c.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "text/html")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func pairs(fs []continueform.Field) [][2]string {
	p := make([][2]string, len(fs))
	for i, f := range fs {
		p[i] = [2]string{f.Name, f.Value}
	}
	return p
}

func sortedPairs(p [][2]string) string {
	p = slices.Clone(p)
	slices.SortFunc(p, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	return fmt.Sprint(p)
}

// formSite is a website whose gated exchange route sits behind wrap.
type formSite struct {
	*gateEnv
	srv     *httptest.Server
	client  *http.Client
	logs    *syncBuffer
	obs     *eventLog
	mu      sync.Mutex
	handled []url.Values // what the handler read, one per performance
	bodies  []string     // the raw body the handler read
}

// eventLog keeps every Event and store step, as "route outcome reason"
// and "store step".
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) Observe(_ context.Context, e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e.Route+" "+e.Outcome+" "+e.Reason)
}

func (l *eventLog) StoreStep(_ context.Context, step string, _ time.Duration, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "store "+step)
}

func (l *eventLog) String() string { l.mu.Lock(); defer l.mu.Unlock(); return fmt.Sprint(l.events) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newFormSite(t *testing.T, wrap func(http.Handler) http.Handler) *formSite {
	t.Helper()
	e := newGateEnv(t, memstore.New(memstore.Config{}), newClock())
	fs := &formSite{gateEnv: e, logs: &syncBuffer{}, obs: &eventLog{}}
	e.kit.Logger = slog.New(slog.NewTextHandler(fs.logs, nil))
	e.kit.Observer = fs.obs
	gated := e.kit.Gate(exchangeDescribe)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fs.mu.Lock()
		fs.handled = append(fs.handled, r.PostForm)
		fs.bodies = append(fs.bodies, string(raw))
		fs.mu.Unlock()
		fmt.Fprintf(w, "exchanged %s to %s", r.PostFormValue("order"), r.PostFormValue("size"))
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /exchange", gated)
	fs.srv = httptest.NewServer(wrap(mux))
	t.Cleanup(fs.srv.Close)
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(fs.srv.URL)
	jar.SetCookies(u, []*http.Cookie{joinCookie(t, e.kit, sesOut)})
	fs.client = &http.Client{Jar: jar}
	return fs
}

// post sends fields as the browser's first request, in the given encoding.
func (fs *formSite) post(t *testing.T, fields [][2]string, multipartForm bool) *http.Response {
	t.Helper()
	c := &continueform.Control{Method: http.MethodPost, URL: fs.srv.URL + "/exchange", Enctype: "application/x-www-form-urlencoded"}
	if multipartForm {
		c.Enctype = "multipart/form-data"
	}
	for _, kv := range fields {
		c.Fields = append(c.Fields, continueform.Field{Name: kv[0], Value: kv[1]})
	}
	return press(t, fs.client, c)
}

func (fs *formSite) approveRef(t *testing.T, res *http.Response) {
	t.Helper()
	_, ref, err := headers.ParseOperation(res.Header.Values(headers.Operation))
	if err != nil {
		t.Fatalf("Poppy-Operation %q: %v", res.Header.Values(headers.Operation), err)
	}
	rec := fs.lookup(sesOut, ref)
	fs.record(sesOut, storedriver.TakeResult{Operation: rec.Current, Ref: ref})
}

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestContinueWhenMiddlewareReadTheForm(t *testing.T) {
	parseForm := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.ParseForm() // a logging or method-override middleware
			next.ServeHTTP(w, r)
		})
	}
	postFormValue := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = r.PostFormValue("_method") // parses multipart too
			next.ServeHTTP(w, r)
		})
	}
	none := func(next http.Handler) http.Handler { return next }

	tests := []struct {
		name      string
		wrap      func(http.Handler) http.Handler
		multipart bool
	}{
		{"W62 nothing read the body first", none, false},
		{"W62 ParseForm before the Gate", parseForm, false},
		{"W62 PostFormValue before the Gate, multipart", postFormValue, true},
		{"W62 multipart, nothing read it first", none, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFormSite(t, tt.wrap)
			fields := [][2]string{{"order", "ord_7"}, {"size", "L"}, {"note", "leave at the door & ring"}, {"size", "L"}}
			res := fs.post(t, fields, tt.multipart)
			page := readAll(t, res)
			if res.StatusCode != http.StatusForbidden || res.Header.Get(headers.Operation) == "" {
				t.Fatalf("first request: %d %s", res.StatusCode, page)
			}
			form, err := continueform.Parse(fs.srv.URL+"/exchange", []byte(page))
			if err != nil || form.Link {
				t.Fatalf("no Continue form on the waiting page (%v):\n%s", err, page)
			}
			if got, want := sortedPairs(pairs(form.Fields)), sortedPairs(fields); got != want {
				t.Fatalf("Continue form's fields\n got %s\nwant %s", got, want)
			}
			wantEnctype := "application/x-www-form-urlencoded"
			if tt.multipart {
				wantEnctype = "multipart/form-data"
			}
			if form.Enctype != wantEnctype || form.Method != http.MethodPost || form.URL != fs.srv.URL+"/exchange" {
				t.Errorf("Continue form %s %s %s", form.Method, form.URL, form.Enctype)
			}
			if n := len(fs.handled); n != 0 {
				t.Fatalf("handler ran %d times before the approval", n)
			}

			fs.approveRef(t, res)
			res = press(t, fs.client, form) // the person presses Continue
			body := readAll(t, res)
			if res.StatusCode != http.StatusOK || body != "exchanged ord_7 to L" {
				t.Fatalf("Continue after the approval: %d %s", res.StatusCode, body)
			}
			res = press(t, fs.client, form) // and again
			readAll(t, res)
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("second Continue: %d, want 403 (a new approval is needed)", res.StatusCode)
			}
			if len(fs.handled) != 1 {
				t.Fatalf("handler ran %d times, want 1", len(fs.handled))
			}
			got := fs.handled[0]
			if got.Get("order") != "ord_7" || fmt.Sprint(got["size"]) != "[L L]" || got.Get("note") != "leave at the door & ring" {
				t.Errorf("handler read %v", got)
			}
			// The raw body the handler reads means the same form.
			if !tt.multipart {
				v, err := url.ParseQuery(fs.bodies[0])
				if err != nil || v.Get("order") != "ord_7" || len(v["size"]) != 2 {
					t.Errorf("handler's raw body %q: %v", fs.bodies[0], err)
				}
			}
			if strings.Contains(fs.logs.String(), "level=ERROR") {
				t.Errorf("errors logged:\n%s", fs.logs)
			}
		})
	}
}

// Without the fix the Continue form is empty: the CSRF library refuses
// it and nothing is performed. Shown here as the bare mechanism: the body
// a ParseForm spent is not what the Gate reads.
func TestSentBodyFromParsedForm(t *testing.T) {
	k := New(testKeys...)
	r := httptest.NewRequest("POST", "/exchange", strings.NewReader("size=L&order=ord_7&size=M"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if err := r.ParseForm(); err != nil {
		t.Fatal(err)
	}
	body, err := k.sentBody(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != "order=ord_7&size=L&size=M" || r.ContentLength != int64(len(body)) {
		t.Errorf("body %q, ContentLength %d", body, r.ContentLength)
	}
	c := continueOf(r, body)
	if c.Method != "POST" || fmt.Sprint(c.Fields) != "[{order ord_7} {size L} {size M}]" {
		t.Errorf("Continue %+v", c)
	}

	t.Run("over MaxBody", func(t *testing.T) {
		k := New(testKeys...)
		k.maxBodyBytes = 16
		r := httptest.NewRequest("POST", "/exchange", strings.NewReader("order=ord_7&note="+strings.Repeat("x", 32)))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.ContentLength = -1 // chunked: MaxBody is checked on what was parsed
		r.ParseForm()
		if _, err := k.sentBody(r); err != errBodyTooLarge {
			t.Errorf("err %v, want errBodyTooLarge", err)
		}
	})
	t.Run("multipart with a file", func(t *testing.T) {
		var mp bytes.Buffer
		mw := multipart.NewWriter(&mp)
		mw.WriteField("order", "ord_7")
		fw, _ := mw.CreateFormFile("photo", "jacket.jpg")
		fw.Write([]byte("not really a jpeg"))
		mw.Close()
		r := httptest.NewRequest("POST", "/exchange", &mp)
		r.Header.Set("Content-Type", mw.FormDataContentType())
		r.ParseMultipartForm(1 << 20)
		body, err := k.sentBody(r)
		if err != nil {
			t.Fatal(err)
		}
		// W63: the page can't send a file again; the handler still gets it.
		if c := continueOf(r, body); c.Method != "" || c.Why != "it sent files" {
			t.Errorf("Continue %+v", c)
		}
		r2 := httptest.NewRequest("POST", "/exchange", bytes.NewReader(body))
		r2.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		if err := r2.ParseMultipartForm(1 << 20); err != nil || r2.FormValue("order") != "ord_7" || len(r2.MultipartForm.File["photo"]) != 1 {
			t.Errorf("re-encoded multipart: %v %v", err, r2.MultipartForm)
		}
	})
}

// A middleware that read the body and kept nothing leaves the Gate unable
// to know what the browser sent: it says so loudly, performs nothing and
// issues nothing; never a silent empty Continue (W62).
func TestGateBodySpentByMiddleware(t *testing.T) {
	drain := func(n int64) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n < 0 {
					io.Copy(io.Discard, r.Body)
				} else {
					io.CopyN(io.Discard, r.Body, n)
				}
				next.ServeHTTP(w, r)
			})
		}
	}
	for _, tt := range []struct {
		name string
		n    int64
	}{{"read whole", -1}, {"read in part", 5}} {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFormSite(t, drain(tt.n))
			res := fs.post(t, [][2]string{{"order", "ord_7"}, {"size", "L"}}, false)
			body := readAll(t, res)
			if res.StatusCode != http.StatusInternalServerError || res.Header.Get(headers.Operation) != "" {
				t.Fatalf("%d %q %s", res.StatusCode, res.Header.Get(headers.Operation), body)
			}
			if !strings.Contains(body, "nothing was done") {
				t.Errorf("body %q", body)
			}
			if len(fs.handled) != 0 {
				t.Errorf("handler ran")
			}
			logs := fs.logs.String()
			if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "Put that middleware inside the Gate") {
				t.Errorf("no error naming the fix in the log:\n%s", logs)
			}
			// Observed once, and the store never asked: nothing issued.
			if got := fs.obs.String(); got != "[gate misconfigured body_read]" {
				t.Errorf("Observer saw %s", got)
			}
		})
	}
}

// errAfter is a body that gives its bytes, then err.
type errAfter struct {
	b   []byte
	err error
}

func (e *errAfter) Read(p []byte) (int, error) {
	if len(e.b) == 0 {
		return 0, e.err
	}
	n := copy(p, e.b)
	e.b = e.b[n:]
	return n, nil
}

// readBody reads a body to its end whatever its Content-Length says, and
// fails on a body that breaks off (a client gone), as io.ReadAll would.
func TestReadBodyAgainstContentLength(t *testing.T) {
	k := New(testKeys...)
	k.maxBodyBytes = 64
	for _, c := range []struct {
		name     string
		declared int64
		body     string
		err      error
		want     string
		fails    bool
	}{
		{"as declared", 9, "order=1&s", io.EOF, "order=1&s", false},
		{"empty", 0, "", io.EOF, "", false},
		{"longer than declared", 3, "order=1&size=M", io.EOF, "order=1&size=M", false},
		{"unknown length", -1, "order=1&size=M", io.EOF, "order=1&size=M", false},
		{"shorter, then broken off", 20, "order=1", io.ErrUnexpectedEOF, "", true},
		{"broken off at once", 5, "", errors.New("connection reset"), "", true},
		{"longer than MaxBody though declared short", 3, strings.Repeat("x", 65), io.EOF, "", true},
		{"declared and as long as MaxBody", 64, strings.Repeat("y", 64), io.EOF, strings.Repeat("y", 64), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/exchange", nil)
			r.Body = io.NopCloser(&errAfter{[]byte(c.body), c.err})
			r.ContentLength = c.declared
			got, err := k.readBody(r)
			if c.fails {
				if err == nil {
					t.Fatalf("read %q, want an error", got)
				}
				return
			}
			if err != nil || string(got) != c.want || got == nil {
				t.Fatalf("read %q (nil %v), %v; want %q", got, got == nil, err, c.want)
			}
		})
	}
	// A body larger than the first buffer (8 KiB) is read on to its end.
	big := New(testKeys...)
	big.maxBodyBytes = 64 << 10
	want := strings.Repeat("z", 20_000)
	r := httptest.NewRequest("POST", "/exchange", strings.NewReader(want))
	r.ContentLength = int64(len(want))
	if got, err := big.readBody(r); err != nil || string(got) != want {
		t.Fatalf("a 20,000-byte body read as %d bytes, %v", len(got), err)
	}
}
