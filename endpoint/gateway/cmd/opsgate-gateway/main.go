// Command opsgate-gateway runs the opsgate gateway: the Poppy `operations`
// extension v3 in front of any website, from a YAML config file (see
// endpoint/gateway/README.md).
//
//	opsgate-gateway -config opsgate-gateway.yaml
//	opsgate-gateway -config opsgate-gateway.yaml -check-config
//
// It serves until SIGINT or SIGTERM, then stops taking requests and lets
// those in flight finish (an approved action being performed among them)
// for up to the config's shutdown_timeout. It logs JSON to standard error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/opsgate/opsgate/endpoint/gateway"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "opsgate-gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opsgate-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "opsgate-gateway.yaml", "the config file")
	check := fs.Bool("check-config", false, "read and check the config file, connect to its store, print what agents' browsers may do, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := gateway.Load(*path)
	if err != nil {
		return err
	}
	g, err := gateway.New(c, slog.New(slog.NewJSONHandler(stderr, nil)))
	if err != nil {
		return err
	}
	defer g.Close()
	if *check {
		fmt.Fprintln(stdout, *path+": ok")
		fmt.Fprint(stdout, c.AgentRules())
		return nil
	}
	return g.Run(ctx)
}
