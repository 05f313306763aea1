package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
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
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./demo/agent check -site https://shop.example [-via web|api|mcp] [-token-url URL] [-action 'POST /path body' [-header 'Name: value']...] [-login '/path field=value&…' | -cookie 'name=value'...] [-list] [-v] [-json]")
		fs.PrintDefaults()
	}
	var headers headerFlag
	var cookies cookieFlag
	site := fs.String("site", "", "the site's origin (required)")
	tokenURL := fs.String("token-url", "", "a token endpoint like the demo's /demo/token (POST client_id, account): also checks signed-in Sessions")
	account := fs.String("account", "acct_demo", "the account to ask -token-url for")
	action := fs.String("action", "", "the gated action to check instead of crawling for one: 'METHOD /path [form or JSON body]'; with -via mcp, 'tool {json arguments}'")
	via := fs.String("via", "web", "the interface to check: web (the website, its endpoint and a joined browser: W rows), api (the JSON API at api.base_url: P rows; -action 'METHOD /path {json}') or mcp (the MCP server at mcp.url: M rows; -action 'tool {json}')")
	start := fs.String("start", "/", "where the crawl for gated forms starts")
	listen := fs.String("listen", "127.0.0.1:0", "where the checker serves its agents' metadata and keys (the site fetches them)")
	agentURL := fs.String("agent-url", "", "the URL the site reaches -listen at, if not http://<listen>")
	concurrency := fs.Int("concurrency", 5, "how many repeats to send at once")
	timeout := fs.Duration("timeout", 15*time.Second, "how long each request may take")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("v", false, "print each step, and the body (its first 2 KiB, tokens blanked out) of each answer a case did not expect")
	list := fs.Bool("list", false, "crawl, print the forms the check would submit and those it never submits, and exit 0, submitting none")
	login := fs.String("login", "", "`'/path field=value&field=value'`: sign every browser in through the site's own login form first (the first POST form on that page with those fields; its CSRF field kept); values never shown")
	fs.Var(&cookies, "cookie", "`'name=value'`: a cookie of the site's own (its login session, say) every browser starts with (repeatable); values never shown")
	fs.Var(&headers, "header", "`'Name: value'` sent with each request of -action, such as a CSRF header a page script adds to a JSON body (repeatable)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2 // the flag package has said what is wrong
	}
	if *site == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if len(headers.h) > 0 && *action == "" {
		fmt.Fprintln(os.Stderr, "agent check: -header goes with -action's requests: name the action with -action")
		return 2
	}
	cfg := conformance.Config{
		Site: strings.TrimRight(*site, "/"), TokenURL: *tokenURL, Account: *account, Action: *action, StartPath: *start,
		Listen: *listen, AgentURL: *agentURL, Concurrency: *concurrency, Timeout: *timeout, Header: headers.h, Via: *via,
		Login: *login, Cookies: cookies.c,
	}
	if *verbose {
		cfg.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *list {
		l, err := conformance.List(ctx, cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "agent check:", err)
			return 2
		}
		if *asJSON {
			l.WriteJSON(os.Stdout)
		} else {
			l.WriteText(os.Stdout)
		}
		return 0
	}
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

// headerFlag is -header 'Name: value', repeatable.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string {
	if f == nil || len(f.h) == 0 {
		return ""
	}
	names := make([]string, 0, len(f.h))
	for k := range f.h {
		names = append(names, k+": …") // a value may be a token: never shown
	}
	return strings.Join(names, ", ")
}

func (f *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || !conformance.ValidHeaderName(name) {
		return fmt.Errorf("write -header 'Name: value', such as -header 'X-CSRF-Token: …'")
	}
	value = strings.TrimSpace(value)
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("the value of -header %s has characters a header can't carry", name)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(name, value)
	return nil
}

// cookieFlag is -cookie 'name=value', repeatable.
type cookieFlag struct{ c []*http.Cookie }

func (f *cookieFlag) String() string {
	if f == nil {
		return ""
	}
	names := make([]string, 0, len(f.c))
	for _, c := range f.c {
		names = append(names, c.Name+"=…") // a session: never shown
	}
	return strings.Join(names, ", ")
}

func (f *cookieFlag) Set(v string) error {
	cs, err := http.ParseCookie(strings.TrimSpace(v))
	if err != nil || len(cs) == 0 {
		return fmt.Errorf("write -cookie 'name=value', such as -cookie 'session=…'")
	}
	f.c = append(f.c, cs...)
	return nil
}
