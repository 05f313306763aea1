package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/testenv"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and localhost
// to dir, and returns the files and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(26),
		Subject:      pkix.Name{CommonName: "demo test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startDemo runs the demo with args until the test ends, and returns its
// banner.
func startDemo(t *testing.T, args ...string) string {
	t.Helper()
	return startDemoLogging(t, slog.New(slog.DiscardHandler), args...)
}

func startDemoLogging(t *testing.T, logger *slog.Logger, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, logger)
		pw.CloseWithError(err)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		go io.Copy(io.Discard, pr)
		if err := <-done; err != nil {
			t.Errorf("the demo ended with %v", err)
		}
	})
	var banner strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "Stop with Ctrl-C") {
			go io.Copy(io.Discard, pr)
			return banner.String()
		}
	}
	t.Fatalf("the demo did not start: %v\n%s", sc.Err(), banner.String())
	return ""
}

func find(t *testing.T, banner, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("the banner has no %s:\n%s", pattern, banner)
	}
	return m[1]
}

// The demo as demo/DEPLOY.md runs it: TLS from certificate files, a staff
// credential for the admin page, /metrics on a listener of its own; and
// -allow-local on only for a loopback origin.
func TestDemoServesTLSWithStaffCredential(t *testing.T) {
	t.Setenv("REDIS_URL", "") // the embedded store
	const staff, customer = "staff-credential-for-the-test", "customer-password-for-the-test"
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	banner := startDemo(t, "-addr", "127.0.0.1:0", "-tls-cert", certFile, "-tls-key", keyFile,
		"-staff-credential", staff, "-customer-password", customer, "-metrics-addr", "127.0.0.1:0")
	shopURL := find(t, banner, `Shop +(https://127\.0\.0\.1:\d+)/`)
	metricsURL := find(t, banner, `Metrics: (http://127\.0\.0\.1:\d+/metrics) \(its own listener\)`)
	if !strings.Contains(banner, "demo mode, -allow-local") {
		t.Errorf("a loopback origin: allow-local should be on by default:\n%s", banner)
	}
	if strings.Contains(banner, "(random") {
		t.Errorf("the banner says a credential is random though both were given:\n%s", banner)
	}
	// Given by flag: never printed (the banner goes to the journal).
	if strings.Contains(banner, staff) || strings.Contains(banner, customer) || !strings.Contains(banner, "not shown") {
		t.Errorf("the banner prints a secret given by flag:\n%s", banner)
	}

	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
	get := func(u string, cookies ...*http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	post := func(u string, form url.Values) *http.Response {
		t.Helper()
		res, err := client.PostForm(u, form)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}

	t.Run("TLS", func(t *testing.T) {
		res, body := get(shopURL + "/")
		if res.StatusCode != http.StatusOK || res.TLS == nil || !strings.Contains(body, "Ridgeline Outfitters") {
			t.Fatalf("GET / over TLS: %d", res.StatusCode)
		}
		if _, body := get(shopURL + "/.well-known/poppy.json"); !strings.Contains(body, `"`+shopURL+`/poppy/operations"`) {
			t.Errorf("poppy.json does not name the https endpoint:\n%s", body)
		}
		// net/http answers plain http on a TLS port with a 400: nothing
		// of the shop is served over it.
		if res, err := http.Get("http://" + strings.TrimPrefix(shopURL, "https://") + "/"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				t.Error("the shop answers plain http on its TLS listener")
			}
		}
	})

	t.Run("metrics on their own listener", func(t *testing.T) {
		if res, _ := get(shopURL + "/metrics"); res.StatusCode != http.StatusNotFound {
			t.Errorf("/metrics on the shop's listener: %d, want 404", res.StatusCode)
		}
		// An answer of the operations endpoint, for the metrics to count.
		post(shopURL+"/poppy/operations", url.Values{})
		res, body := get(metricsURL)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, "opsgate_") {
			t.Errorf("/metrics on -metrics-addr: %d\n%.300s", res.StatusCode, body)
		}
	})

	t.Run("staff credential", func(t *testing.T) {
		if res, _ := get(shopURL + "/admin/operations"); res.StatusCode != http.StatusForbidden {
			t.Errorf("the admin page without the staff sign-in: %d", res.StatusCode)
		}
		for _, cred := range []string{"guess", customer} {
			if res := post(shopURL+"/admin/signin", url.Values{"staff": {cred}}); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("staff sign-in with a wrong credential: %d", res.StatusCode)
			}
		}
		res := post(shopURL+"/admin/signin", url.Values{"staff": {staff}})
		var cookie *http.Cookie
		for _, c := range res.Cookies() {
			if c.Name == "ridgeline_staff" {
				cookie = c
			}
		}
		if res.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.Secure || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
			t.Fatalf("staff sign-in: %d, cookie %+v", res.StatusCode, cookie)
		}
		if res, body := get(shopURL+"/admin/operations", cookie); res.StatusCode != http.StatusOK || !strings.Contains(body, "Operations whose outcome is not known") {
			t.Errorf("the admin page with the staff sign-in: %d", res.StatusCode)
		}
		res = post(shopURL+"/signin", url.Values{"password": {customer}})
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || !res.Cookies()[0].Secure {
			t.Errorf("the customer's sign-in over TLS: %d %+v", res.StatusCode, res.Cookies())
		}
	})
}

// Secrets given through the environment, as demo/DEPLOY.md's systemd unit
// gives them, are never printed: the unit sends the banner to the journal.
func TestBannerPrintsNoSecretFromTheEnvironment(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	const staff, customer = "staff-from-the-environment-7Qm", "customer-from-the-environment-3Kd"
	t.Setenv("DEMO_STAFF_CREDENTIAL", staff)
	t.Setenv("DEMO_CUSTOMER_PASSWORD", customer)
	banner := startDemo(t, "-addr", "127.0.0.1:0")
	if strings.Contains(banner, staff) || strings.Contains(banner, customer) {
		t.Errorf("the banner prints a secret given through the environment:\n%s", banner)
	}
	if !strings.Contains(banner, "set by -staff-credential or DEMO_STAFF_CREDENTIAL; not shown") ||
		!strings.Contains(banner, "set by -customer-password or DEMO_CUSTOMER_PASSWORD; not shown") {
		t.Errorf("the banner doesn't say where the secrets came from:\n%s", banner)
	}
}

// -allow-local turns the kit's dial-time address check off, so it is off
// by default for an origin other machines reach.
func TestAllowLocalDefault(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	certFile, keyFile, _ := selfSigned(t, t.TempDir())
	banner := startDemo(t, "-addr", "127.0.0.1:0", "-base-url", "https://demo.example", "-tls-cert", certFile, "-tls-key", keyFile)
	if !strings.Contains(banner, "allow-local is off") {
		t.Errorf("a public origin: allow-local should be off:\n%s", banner)
	}
	if !strings.Contains(banner, "customer password") || !strings.Contains(banner, "(random, this run only; -staff-credential sets one)") {
		t.Errorf("no staff credential given: a random one should be printed once:\n%s", banner)
	}
	for _, tc := range []struct {
		origin string
		want   bool
	}{
		{"http://localhost:8080", true},
		{"http://127.0.0.1:8080", true},
		{"http://127.9.9.9", true},
		{"http://[::1]:8080", true},
		{"http://shop.localhost:8080", true},
		{"https://demo.example", false},
		{"http://10.0.0.1:8080", false},
		{"http://[fd00::1]", false},
		{"http://169.254.169.254", false},
		{"http://localhost.example", false},
		{"::::", false},
	} {
		if got := loopbackOrigin(tc.origin); got != tc.want {
			t.Errorf("loopbackOrigin(%q) = %v, want %v", tc.origin, got, tc.want)
		}
	}
	if _, err := parseFlags([]string{"-tls-cert", certFile}); err == nil {
		t.Error("-tls-cert without -tls-key is accepted")
	}
}

// syncBuffer is a log the demo writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// redisConf is the Redis configuration of DEPLOY.md's section 2 (its
// ```conf block), as redis-server arguments.
func redisConf(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("DEPLOY.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```conf\n")
	if !ok {
		t.Fatal("DEPLOY.md has no ```conf block")
	}
	block, _, _ = strings.Cut(block, "```")
	var args []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			t.Fatalf("DEPLOY.md's Redis line %q", line)
		}
		args = append(args, "--"+f[0])
		args = append(args, f[1:]...)
	}
	return args
}

// The demo against a redis-server configured as DEPLOY.md says: the
// store's check (at most once across restarts) passes, so the demo logs no
// warning about it.
func TestDemoOnDeployRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis", "redis-server is not on PATH")
	}
	conf := redisConf(t)
	if !strings.Contains(strings.Join(conf, " "), "--appendfsync always") {
		t.Fatalf("DEPLOY.md's Redis is not synced on every write: %q", conf)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := append(conf, "--port", strconv.Itoa(port), "--dir", t.TempDir(), "--save", "")
	srv := exec.Command("redis-server", args...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i == 100 {
			t.Fatalf("redis-server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Setenv("REDIS_URL", "redis://"+addr+"/0")
	var logs syncBuffer
	certFile, keyFile, _ := selfSigned(t, t.TempDir())
	banner := startDemoLogging(t, slog.New(slog.NewTextHandler(&logs, nil)), "-addr", "127.0.0.1:0",
		"-tls-cert", certFile, "-tls-key", keyFile, "-staff-credential", "staff-for-the-redis-test", "-metrics-addr", "127.0.0.1:0")
	if !strings.Contains(banner, "Store: Redis at "+addr) {
		t.Errorf("the demo does not use the Redis:\n%s", banner)
	}
	if out := logs.String(); strings.Contains(out, "can't promise") || strings.Contains(out, "level=ERROR") {
		t.Errorf("the demo on DEPLOY.md's Redis warns about the store:\n%s", out)
	}
}

// -trusted-proxy reads addresses and CIDRs, and refuses anything else.
func TestTrustedProxyFlag(t *testing.T) {
	o, err := parseFlags([]string{"-trusted-proxy", "127.0.0.1, 10.0.0.0/8,::1"})
	if err != nil || len(o.trustedProxies) != 3 || o.trustedProxies[0].String() != "127.0.0.1/32" || o.trustedProxies[1].String() != "10.0.0.0/8" || o.trustedProxies[2].String() != "::1/128" {
		t.Fatalf("%v %v", o.trustedProxies, err)
	}
	if _, err := parseFlags([]string{"-trusted-proxy", "proxy.example"}); err == nil {
		t.Error("a host name was taken as a proxy's address")
	}
}

// `go run ./demo` on its embedded store: the banner comes first, nothing
// is logged before it (it once opened with a miniredis WARN), and it says
// what the embedded store can't promise (issue 37).
func TestEmbeddedStoreSaysItInTheBanner(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	var logs syncBuffer
	banner := startDemoLogging(t, slog.New(slog.NewTextHandler(&logs, nil)), "-addr", "127.0.0.1:0")
	if logs.String() != "" {
		t.Errorf("logged before the banner: %q", logs.String())
	}
	if !strings.Contains(banner, "embedded miniredis at") || !strings.Contains(banner, "a demo store: it keeps nothing across restarts") {
		t.Errorf("the banner does not say what the embedded store is:\n%s", banner)
	}
}
