// Package gateway puts the Poppy `operations` extension v3 (§4, §6
// "Websites", §7) in front of a website that is not written with this kit,
// in any language: a reverse proxy that serves the operations endpoint,
// the browser join, poppy.json, the kit's scripts and the waiting page
// itself, gates the requests its config file names, and sends everything
// else to the website (the upstream) untouched.
//
// A gated request from a browser joined to a Session gets 403 and the
// waiting page until the Personal Agent approves it; the Continue control
// repeats it, and the gateway then proxies it to the upstream once, whose
// status decides the outcome (< 400 performed, 4xx not performed, 5xx not
// known: W94–W98, W142). An ordinary browser, and one with the website's
// own login (§4 W56), goes straight to the upstream.
//
// The command opsgate-gateway (cmd/opsgate-gateway) runs it from a YAML
// file; README.md beside this package is the file's reference. A Go
// program runs it as a handler:
//
//	c, err := gateway.Load("opsgate-gateway.yaml")
//	g, err := gateway.New(c, nil) // nil: slog.Default()
//	err = g.Run(ctx) // until ctx ends; or serve g, an http.Handler, yourself
//
// It is built only on the kit's public API: packages webkit, endpoint,
// store and store/redisstore.
package gateway
