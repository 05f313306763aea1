// Command demo is the opsgate demo shop, Ridgeline Outfitters: a small
// storefront whose exchanges, subscription cancellation and delivery date
// changes wait for a person's agent's approval when the agent's browser is
// joined to its Session (Poppy `operations` extension v3, on web pages).
//
//	go run ./demo                  # http://localhost:8080, embedded miniredis
//	go run ./demo -addr :9090      # or ADDR=:9090
//	go run ./demo -redis-addr 127.0.0.1:6390   # the embedded store's address (REDIS_ADDR)
//	REDIS_URL=redis://localhost:6379/0 go run ./demo
//	go run ./demo -metrics=false   # no /metrics (on by default)
//
// The shop serves the kit's Prometheus metrics at /metrics (the Gate's,
// the operations endpoint's, the join's and the status route's answers and
// the store's latency; webkit/metrics/prometheus), linked from no page.
//
// Every agent's User gets its own copy of the demo data (a sandbox, reset
// from the account page), so many agents can share one running demo.
//
// It runs in demo mode: agents whose client_id is on localhost or 127.0.0.1
// over plain http are accepted, cookies are not Secure on http, and
// POST /demo/token hands out access tokens for the demo account to anyone.
// Don't expose it to the internet.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/demo/shop"
	"github.com/opsgate/opsgate/store/redisstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", envOr("ADDR", "localhost:8080"), "address to listen on (env ADDR)")
	baseURL := flag.String("base-url", os.Getenv("BASE_URL"), "the shop's origin as browsers and agents reach it (env BASE_URL); default http://<addr>")
	redisAddr := flag.String("redis-addr", os.Getenv("REDIS_ADDR"), "address the embedded miniredis listens on (env REDIS_ADDR); default a free port on 127.0.0.1; unused with REDIS_URL")
	metrics := flag.Bool("metrics", true, "serve the kit's Prometheus metrics at "+shop.PathMetrics)
	customerPassword := flag.String("customer-password", os.Getenv("DEMO_CUSTOMER_PASSWORD"), "the demo customer's password for the shop's own login (env DEMO_CUSTOMER_PASSWORD); default a random one, printed once at start")
	staffCredential := flag.String("staff-credential", os.Getenv("DEMO_STAFF_CREDENTIAL"), "the staff credential for the admin page "+shop.PathAdmin+" (env DEMO_STAFF_CREDENTIAL); default a random one, printed once at start")
	flag.Parse()
	customerNote, staffNote := "", ""
	if *customerPassword == "" {
		*customerPassword = rand.Text()
		customerNote = "  (random, this run only; -customer-password sets one)"
	}
	if *staffCredential == "" {
		*staffCredential = rand.Text()
		staffNote = "  (random, this run only; -staff-credential sets one)"
	}
	if *staffCredential == *customerPassword {
		return errors.New("the staff credential must not be the customer's password")
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

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
		mr, err := startMiniredis(*redisAddr)
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
	err := client.Ping(pingCtx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	st := redisstore.New(client, storeOpts)
	if err := redisstore.Check(ctx, st); err != nil {
		// Not fatal for a demo, but loud: it names what this store risks.
		// The embedded miniredis is chosen knowing that (a warning); a
		// Redis given by REDIS_URL that can't promise it is an error.
		if embedded {
			logger.Warn("opsgate: the embedded store can't promise at most once across restarts; it is a demo store", "error", err)
		} else {
			logger.Error("opsgate: the store can't promise at most once across restarts", "error", err)
		}
	}
	// The steps as functions where the server has them (a real Redis), so
	// each is one FCALL; miniredis runs them as scripts.
	if err := redisstore.Load(ctx, st); err != nil {
		logger.Warn("opsgate: store load", "error", err)
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	base := *baseURL
	if base == "" {
		base = "http://" + displayHost(ln.Addr().(*net.TCPAddr), *addr)
	}
	srv, err := shop.NewServer(shop.Config{
		BaseURL:    base,
		Store:      st,
		Logger:     logger,
		AllowLocal: true, // demo mode: agents on localhost over http
		Metrics:    *metrics,

		CustomerPassword: *customerPassword,
		StaffCredential:  *staffCredential,
	})
	if err != nil {
		ln.Close()
		return err
	}

	fmt.Printf(`
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
  Agents on localhost/127.0.0.1 over plain http are accepted (demo mode).

The shop's own login (people, not agents): %[1]s/signin
  customer password  %[8]s%[9]s
  Each action on that login is confirmed on the shop's page with the password.
Staff only:  %[1]s%[10]s   (operations whose outcome is not known)
  staff credential   %[11]s%[12]s

Store: %[6]s
%[7]sStop with Ctrl-C.

`, srv.URL(""), shop.PathPoppyJSON, shop.PathJoin, shop.PathOperations, shop.PathToken, storeDesc, metricsLine(*metrics, srv.URL(shop.PathMetrics)),
		*customerPassword, customerNote, shop.PathAdmin, *staffCredential, staffNote)

	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShut()
	if err := hs.Shutdown(shutCtx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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
func metricsLine(on bool, url string) string {
	if !on {
		return ""
	}
	return "Metrics: " + url + " (Prometheus; -metrics=false turns it off)\n"
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
