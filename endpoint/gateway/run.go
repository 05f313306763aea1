package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/opsgate/opsgate/webkit"
	promobs "github.com/opsgate/opsgate/webkit/metrics/prometheus"
)

// readyTimeout bounds the store's ping of a readiness check.
const readyTimeout = time.Second

// Run serves the gateway on the config's listen address, and health,
// readiness and metrics on admin_listen when the config names one, until
// ctx ends. Then it stops taking requests, lets those in flight finish (an
// approved action being performed among them) for up to shutdown_timeout,
// and returns. An address it can't listen on is an error at once.
func (g *Gateway) Run(ctx context.Context) error {
	servers := []*http.Server{{Addr: g.listen, Handler: g}}
	if g.adminAddr != "" {
		servers = append(servers, &http.Server{Addr: g.adminAddr, Handler: g.admin})
	}
	errc := make(chan error, len(servers))
	for i, s := range servers {
		s.ReadHeaderTimeout = g.timeouts.header
		s.IdleTimeout = g.timeouts.idle
		s.ErrorLog = slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn)
		ln, err := net.Listen("tcp", s.Addr)
		if err != nil {
			for _, started := range servers[:i] {
				started.Close()
			}
			return fmt.Errorf("gateway: %w", err)
		}
		g.logger.Info("opsgate-gateway: serving", "addr", ln.Addr().String(), "admin", i > 0)
		go func() { errc <- s.Serve(ln) }()
	}
	var failed error
	select {
	case failed = <-errc:
	case <-ctx.Done():
	}
	// Not ready from now on, so that a load balancer stops sending; then
	// finish what is in flight, the gateway first and the admin last.
	g.draining.Store(true)
	g.logger.Info("opsgate-gateway: shutting down; finishing the requests in flight", "timeout", g.shutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), g.shutdownTimeout)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("gateway: shutdown %s: %w", s.Addr, err))
		}
	}
	if failed != nil && !errors.Is(failed, http.ErrServerClosed) {
		errs = append([]error{fmt.Errorf("gateway: %w", failed)}, errs...)
	}
	return errors.Join(errs...)
}

// adminState is what the admin listener reports.
type adminState struct {
	draining atomic.Bool
	ping     func(context.Context) error // the store's; nil: memory, always up
}

// newAdmin sets kit's Observer to Prometheus metrics and returns the admin
// handler: /healthz (the process serves), /readyz (it serves and its store
// answers; 503 while shutting down) and /metrics.
func (g *Gateway) newAdmin(kit *webkit.Kit) error {
	reg := prom.NewRegistry()
	obs, err := promobs.New(reg)
	if err != nil {
		return fmt.Errorf("gateway: metrics: %w", err)
	}
	if err := errors.Join(reg.Register(collectors.NewGoCollector()), reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return fmt.Errorf("gateway: metrics: %w", err)
	}
	kit.Observer = obs
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if g.draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if g.ping != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := g.ping(ctx); err != nil {
				g.logger.LogAttrs(r.Context(), slog.LevelWarn, "opsgate-gateway: not ready: the store does not answer", slog.String("error", err.Error()))
				http.Error(w, "the store does not answer", http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	g.admin = mux
	return nil
}
