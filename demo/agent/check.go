package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/opsgate/opsgate/demo/agent/conformance"
)

// check is `agent check`: the conformance checker (package conformance)
// against any site. Its exit status is 0 only when no case fails, 1 when
// one does, 2 when the checker could not run.
func check(args []string) int {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./demo/agent check -site https://shop.example [-token-url URL] [-action 'POST /path body'] [-json]")
		fs.PrintDefaults()
	}
	site := fs.String("site", "", "the site's origin (required)")
	tokenURL := fs.String("token-url", "", "a token endpoint like the demo's /demo/token (POST client_id, account): also checks signed-in Sessions")
	account := fs.String("account", "acct_demo", "the account to ask -token-url for")
	action := fs.String("action", "", "the gated action to check instead of crawling for one: 'METHOD /path [form or JSON body]'")
	start := fs.String("start", "/", "where the crawl for gated forms starts")
	listen := fs.String("listen", "127.0.0.1:0", "where the checker serves its agents' metadata and keys (the site fetches them)")
	agentURL := fs.String("agent-url", "", "the URL the site reaches -listen at, if not http://<listen>")
	concurrency := fs.Int("concurrency", 5, "how many repeats to send at once")
	timeout := fs.Duration("timeout", 15*time.Second, "how long each request may take")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "print each step")
	fs.Parse(args)
	if *site == "" {
		fs.Usage()
		return 2
	}
	cfg := conformance.Config{
		Site: strings.TrimRight(*site, "/"), TokenURL: *tokenURL, Account: *account, Action: *action, StartPath: *start,
		Listen: *listen, AgentURL: *agentURL, Concurrency: *concurrency, Timeout: *timeout,
	}
	if *verbose {
		cfg.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent check:", err)
		return 2
	}
	if *asJSON {
		rep.WriteJSON(os.Stdout)
	} else {
		rep.WriteText(os.Stdout)
	}
	if rep.Failed() {
		return 1
	}
	return 0
}
