// Command demo is the opsgate demo shop, Ridgeline Outfitters: a small
// storefront whose exchanges, subscription cancellation and delivery date
// changes wait for a person's agent's approval when the agent's browser is
// joined to its Session (Poppy `operations` extension v3, on web pages).
//
//	go run ./demo                  # http://localhost:8080, embedded miniredis
//	go run ./demo -addr localhost:9090         # or ADDR=localhost:9090
//	go run ./demo -redis-addr 127.0.0.1:6390   # the embedded store's address (REDIS_ADDR)
//	REDIS_URL=redis://localhost:6379/0 go run ./demo
//	go run ./demo -metrics=false   # no /metrics (on by default)
//	go run ./demo -metrics-addr 127.0.0.1:9100 # /metrics on a listener of its own only
//	go run ./demo -addr :8443 -base-url https://demo.example -tls-cert cert.pem -tls-key key.pem
//	go run ./demo -staff-credential … -customer-password …   # else random, printed at start
//
// The shop serves the kit's Prometheus metrics at /metrics (the Gate's,
// the operations endpoint's, the join's and the status route's answers and
// the store's latency; webkit/metrics/prometheus), linked from no page;
// with -metrics-addr only on that address, not on the shop's listener.
//
// -allow-local (demo mode, below) is on by default only when the shop's
// origin and the address it listens on are both loopback; the shop's own
// login needs the customer's password and the admin page the staff
// credential. demo/DEPLOY.md puts the demo on a server.
//
// Every agent's User gets its own copy of the demo data (a sandbox, reset
// from the account page), so many agents can share one running demo.
//
// For agent developers, the demo is a test bench: every refusal says why
// (webkit.Kit.ExplainRefusals), /demo/seen shows a joined browser what
// the shop saw of its agent, and /demo/bench makes the shop misbehave on
// purpose for one Session (demo/agent/PROTOCOL.md).
//
// In demo mode (-allow-local) agents whose client_id is on localhost or
// 127.0.0.1 over plain http are accepted and the kit's dial-time address
// check is off; cookies are not Secure on http. Always, POST /demo/token
// hands out access tokens for the demo account to anyone: the demo data is
// every agent's to play with, in its own sandbox.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/store/redisstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(ctx, os.Args[1:], os.Stdout, logger); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// options are the demo's flags.
type options struct {
	addr, baseURL, redisAddr    string
	metrics                     bool
	metricsAddr                 string
	tlsCert, tlsKey             string
	allowLocal                  bool
	allowLocalSet               bool
	trustedProxies              []netip.Prefix
	customerPassword, staffCred string
	// What the banner shows of each: a random one, or that it was given.
	customerShown, staffShown string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", envOr("ADDR", "localhost:8080"), "address to listen on (env ADDR)")
	fs.StringVar(&o.baseURL, "base-url", os.Getenv("BASE_URL"), "the shop's origin as browsers and agents reach it (env BASE_URL); default http://<addr>, or https://<addr> with -tls-cert")
	fs.StringVar(&o.redisAddr, "redis-addr", os.Getenv("REDIS_ADDR"), "address the embedded miniredis listens on (env REDIS_ADDR); default a free port on 127.0.0.1; unused with REDIS_URL")
	fs.BoolVar(&o.metrics, "metrics", true, "serve the kit's Prometheus metrics at "+shop.PathMetrics)
	fs.StringVar(&o.metricsAddr, "metrics-addr", os.Getenv("METRICS_ADDR"), "serve "+shop.PathMetrics+" on this address only, not on the shop's own listener (env METRICS_ADDR)")
	fs.StringVar(&o.tlsCert, "tls-cert", os.Getenv("TLS_CERT"), "serve https with this PEM certificate chain (env TLS_CERT; with -tls-key)")
	fs.StringVar(&o.tlsKey, "tls-key", os.Getenv("TLS_KEY"), "the PEM private key of -tls-cert (env TLS_KEY)")
	fs.BoolVar(&o.allowLocal, "allow-local", false, "demo mode: accept agents on localhost over plain http, and turn off the check that keeps the shop from fetching loopback, private and link-local addresses for an agent's client_id; default on only when the shop's origin and its listener are both loopback")
	fs.StringVar(&o.customerPassword, "customer-password", os.Getenv("DEMO_CUSTOMER_PASSWORD"), "the demo customer's password for the shop's own login (env DEMO_CUSTOMER_PASSWORD); default a random one, printed once at start")
	fs.StringVar(&o.staffCred, "staff-credential", os.Getenv("DEMO_STAFF_CREDENTIAL"), "the staff credential for the admin page "+shop.PathAdmin+" (env DEMO_STAFF_CREDENTIAL); default a random one, printed once at start")
	proxies := fs.String("trusted-proxy", os.Getenv("TRUSTED_PROXY"), "comma-separated addresses or CIDRs of the reverse proxies in front of the shop, such as 127.0.0.1 (env TRUSTED_PROXY): behind one, a client's network (its budget of sandboxes and of wrong passwords) is read from X-Forwarded-For")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, p := range strings.FieldsFunc(*proxies, func(r rune) bool { return r == ',' || r == ' ' }) {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			a, aerr := netip.ParseAddr(p)
			if aerr != nil {
				return o, fmt.Errorf("-trusted-proxy %q: not an address or a CIDR", p)
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		o.trustedProxies = append(o.trustedProxies, pfx)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "allow-local" {
			o.allowLocalSet = true
		}
	})
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return o, errors.New("-tls-cert and -tls-key go together")
	}
	if o.metricsAddr != "" && !o.metrics {
		return o, errors.New("-metrics-addr with -metrics=false: choose one")
	}
	// A secret given by flag or environment is never printed: the banner
	// goes to stdout, which a service manager keeps in its journal. Only a
	// random one, which nobody could know otherwise, is shown once.
	o.customerShown, o.staffShown = "(set by -customer-password or DEMO_CUSTOMER_PASSWORD; not shown)", "(set by -staff-credential or DEMO_STAFF_CREDENTIAL; not shown)"
	if o.customerPassword == "" {
		o.customerPassword = rand.Text()
		o.customerShown = o.customerPassword + "  (random, this run only; -customer-password sets one)"
	}
	if o.staffCred == "" {
		o.staffCred = rand.Text()
		o.staffShown = o.staffCred + "  (random, this run only; -staff-credential sets one)"
	}
	if o.staffCred == o.customerPassword {
		return o, errors.New("the staff credential must not be the customer's password")
	}
	return o, nil
}

// run serves the demo until ctx ends; the banner goes to stdout.
func run(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	var cert tls.Certificate
	if o.tlsCert != "" {
		if cert, err = tls.LoadX509KeyPair(o.tlsCert, o.tlsKey); err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
	}

	// The store: the real Redis when REDIS_URL is set, else an embedded
	// miniredis, so the demo needs no set-up.
	var client *redis.Client
	storeDesc := ""
	// A real Redis keeps the store's default durability (a claim is on disk
	// before the action runs); miniredis keeps nothing, so the demo says so.
	var storeOpts redisstore.Options
	embedded := false
	if u := os.Getenv("REDIS_URL"); u != "" {
		opts, err := redis.ParseURL(u)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		client = redis.NewClient(opts)
		storeDesc = "Redis at " + opts.Addr
	} else {
		mr, err := startMiniredis(o.redisAddr)
		if err != nil {
			return fmt.Errorf("embedded miniredis: %w", err)
		}
		defer mr.Close()
		client = redis.NewClient(&redis.Options{Addr: mr.Addr()})
		storeOpts.Durability = redisstore.DurableNone
		embedded = true
		storeDesc = "embedded miniredis at " + mr.Addr() + " (set REDIS_URL to use a real Redis)"
	}
	defer client.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = client.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	st := redisstore.New(client, storeOpts)
	if err := st.Check(ctx); err != nil {
		// Not fatal for a demo, but loud: it names what this store risks.
		// A Redis given by REDIS_URL that can't promise it is an error.
		// The embedded miniredis is chosen knowing that: the banner says
		// so, and nothing is logged before it (issue 37).
		if embedded {
			storeDesc += "\n       a demo store: it keeps nothing across restarts, so at most once holds only while it runs"
		} else {
			logger.Error("opsgate: the store can't promise at most once across restarts", "error", err)
		}
	}
	// The steps as functions where the server has them (a real Redis), so
	// each is one FCALL; miniredis runs them as scripts.
	if err := st.Load(ctx); err != nil {
		logger.Warn("opsgate: store load", "error", err)
	}

	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	base := o.baseURL
	if base == "" {
		scheme := "http://"
		if o.tlsCert != "" {
			scheme = "https://"
		}
		base = scheme + displayHost(ln.Addr().(*net.TCPAddr), o.addr)
	}
	allowLocal := o.allowLocal
	if !o.allowLocalSet {
		allowLocal = loopbackOrigin(base) && ln.Addr().(*net.TCPAddr).IP.IsLoopback()
	} else if allowLocal && !(loopbackOrigin(base) && ln.Addr().(*net.TCPAddr).IP.IsLoopback()) {
		logger.Warn("demo: -allow-local on a shop reachable from other machines: anyone can make it fetch loopback, private and link-local addresses through a client_id", "origin", base)
	}
	var metricsLn net.Listener
	if o.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		defer metricsLn.Close()
	} else if o.metrics && !loopbackOrigin(base) {
		logger.Warn("demo: "+shop.PathMetrics+" is served to anyone who reaches the shop; -metrics-addr serves it on a listener of its own", "origin", base)
	}
	srv, err := shop.NewServer(shop.Config{
		BaseURL:        base,
		Store:          st,
		Logger:         logger,
		AllowLocal:     allowLocal,
		Metrics:        o.metrics,
		MetricsPrivate: metricsLn != nil,

		CustomerPassword: o.customerPassword,
		StaffCredential:  o.staffCred,
		TrustedProxies:   o.trustedProxies,
	})
	if err != nil {
		if !allowLocal && strings.HasPrefix(base, "http://") {
			where := "the shop's origin " + base + " is plain http and not loopback"
			if loopbackOrigin(base) {
				where = "the shop listens on " + ln.Addr().String() + ", reachable from other machines, over plain http"
			}
			return fmt.Errorf("%w\n(%s: serve https with -tls-cert and -tls-key, or behind a reverse proxy with -base-url https://…; -allow-local is for a machine nobody else reaches)", err, where)
		}
		return err
	}

	metricsURL := srv.URL(shop.PathMetrics)
	if metricsLn != nil {
		metricsURL = "http://" + displayHost(metricsLn.Addr().(*net.TCPAddr), o.metricsAddr) + shop.PathMetrics + " (its own listener)"
	}
	localLine := "Agents on localhost/127.0.0.1 over plain http are accepted (demo mode, -allow-local)."
	if !allowLocal {
		localLine = "allow-local is off: agents' client_ids must be https on public addresses."
	}
	fmt.Fprintf(stdout, `
Ridgeline Outfitters, the opsgate demo shop, is running.

  Shop            %[1]s/
  Your orders     %[1]s/orders/ord_7Hk2
  Deliveries      %[1]s/deliveries
  Subscription    %[1]s/account/subscription

Point an agent at it:
  poppy.json      %[1]s%[2]s
  browser join    %[1]s%[3]s   (web.browser_session_endpoint)
  operations      %[1]s%[4]s   (the operations endpoint)
  demo token      %[1]s%[5]s   DEMO ONLY: POST client_id=<your client_id>&account=acct_demo
                  for an access token for the demo account, to make a signed-in join.
  %[11]s

For agent developers (in the agent's joined browser; demo/agent/PROTOCOL.md):
  what the shop saw  %[1]s%[12]s   your agent's requests, the shop's decisions and why
  the bench          %[1]s%[13]s   scenarios where the shop misbehaves on purpose
  Every refusal says why (error_description): Kit.ExplainRefusals is on.

The shop's own login (people, not agents): %[1]s/signin
  customer password  %[8]s
  Each action on that login is confirmed on the shop's page with the password.
Staff only:  %[1]s%[9]s   (operations whose outcome is not known)
  staff credential   %[10]s

Store: %[6]s
%[7]sStop with Ctrl-C.

`, srv.URL(""), shop.PathPoppyJSON, shop.PathJoin, shop.PathOperations, shop.PathToken, storeDesc, metricsLine(o.metrics, metricsURL),
		o.customerShown, shop.PathAdmin, o.staffShown, localLine, shop.PathSeen, shop.PathBench)

	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	servers := []*http.Server{hs}
	errc := make(chan error, 2)
	if o.tlsCert != "" {
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		go func() { errc <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- hs.Serve(ln) }()
	}
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET "+shop.PathMetrics, srv.MetricsHandler())
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, ErrorLog: hs.ErrorLog}
		servers = append(servers, ms)
		go func() { errc <- ms.Serve(metricsLn) }()
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShut()
	for _, s := range servers {
		if err := s.Shutdown(shutCtx); err != nil {
			return err
		}
	}
	for range servers {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return nil
}

// loopbackOrigin reports whether origin's host is loopback: localhost (or
// a name under .localhost), 127.0.0.0/8 or ::1.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	h := strings.ToLower(u.Hostname())
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}

// startMiniredis starts the embedded store on addr, or on a free loopback
// port when addr is "": a fixed address lets redis-cli look at the demo's
// data, or a second demo process share it.
func startMiniredis(addr string) (*miniredis.Miniredis, error) {
	if addr == "" {
		return miniredis.Run()
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		return nil, err
	}
	return mr, nil
}

// metricsLine is the banner's line for /metrics.
func metricsLine(on bool, where string) string {
	if !on {
		return ""
	}
	return "Metrics: " + where + " (Prometheus; -metrics=false turns it off)\n"
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// displayHost is host:port for the shop's URLs: "localhost" when listening
// on every interface or on loopback by name.
func displayHost(a *net.TCPAddr, requested string) string {
	host, _, err := net.SplitHostPort(requested)
	if err != nil || host == "" || a.IP.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, fmt.Sprint(a.Port))
}
