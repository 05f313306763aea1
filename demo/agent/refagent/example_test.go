package refagent_test

import (
	"context"
	"fmt"
	"os"

	"github.com/chromedp/chromedp"

	"github.com/opsgate/opsgate/demo/agent/refagent"
)

// Example is the reference agent's whole flow against the demo shop (`go run
// ./demo` first): join the browser, exchange a jacket, approve it under a
// standing instruction or ask at the terminal, and Continue. It needs
// Chromium, so it compiles with the suite but does not run; `go run
// ./demo/agent` does the same.
func Example() {
	ctx := context.Background()
	alloc, cancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath("/usr/bin/chromium"), chromedp.NoSandbox)...)
	defer cancel()
	tab, cancel := chromedp.NewContext(alloc)
	defer cancel()

	a, err := refagent.New(ctx, refagent.Config{Shop: "http://localhost:8080", Browser: tab, Name: "Example Agent", Log: os.Stdout})
	if err != nil {
		panic(err) // e.g. refagent.ErrNotSupported: the shop lists no operations v3 (A03)
	}
	if _, err := a.Join(ctx, refagent.JoinOptions{}); err != nil { // declares "operations";v="3" (A02)
		panic(err)
	}
	// The browser submits the exchange form; the shop answers 403 with
	// Poppy-Operation, which the agent reads from its browser (A08).
	if err := refagent.ExchangeItem(tab, "http://localhost:8080", "ord_7Hk2", "itm_4Qa", "stormline-insulated-m"); err != nil {
		panic(err)
	}
	rule, _ := refagent.ParseRule("exchange<=100USD") // the user's standing instruction
	out, err := a.Approve(ctx, &refagent.Standing{Rules: []refagent.Rule{rule}, Ask: &refagent.Prompt{In: os.Stdin, Out: os.Stdout}})
	if err != nil {
		panic(err)
	}
	fmt.Println(out.Result, out.OperationID) // "performed op_…" once the shop did it, once
}
