// Command opsgate-gateway runs the opsgate gateway: the Poppy `operations`
// extension v3 in front of any website, from a YAML config file (see
// webkit/gateway/README.md).
//
//	opsgate-gateway -config opsgate-gateway.yaml
//	opsgate-gateway -config opsgate-gateway.yaml -check-config
//
// It serves until SIGINT or SIGTERM, then stops taking requests and lets
// those in flight finish (an approved action being performed among them)
// for up to -shutdown-timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/opsgate/opsgate/webkit/gateway"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "opsgate-gateway:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("opsgate-gateway", flag.ContinueOnError)
	path := fs.String("config", "opsgate-gateway.yaml", "the config file")
	check := fs.Bool("check-config", false, "read and check the config file, connect to its store, and exit")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long in-flight requests may take to finish at shutdown")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	c, err := gateway.Load(*path)
	if err != nil {
		return err
	}
	g, err := gateway.New(c, logger)
	if err != nil {
		return err
	}
	defer g.Close()
	if *check {
		fmt.Println(*path + ": ok")
		return nil
	}
	srv := &http.Server{
		Addr:              g.Addr(),
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("opsgate-gateway: serving", "addr", g.Addr(), "config", *path)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("opsgate-gateway: shutting down; finishing requests in flight")
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
