// Package webkit is what a website imports first to speak the Poppy
// `operations` extension v3 (§4 "Websites", §6 "Websites" of
// https://personalagentprotocol.org/docs/1.0/extensions/operations). RULES.md,
// beside this package, explains the protocol briefly and every rule (W01…,
// A01…) that comments and tests cite.
//
// # The Gate
//
// A [Kit] ([New] gives working defaults) wraps each handler with a business
// effect:
//
//	kit := webkit.New(hashKey, encryptionKey) // the same keys on every instance
//	kit.Store = redisstore.New(client, redisstore.Options{}) // shared by every instance
//	mux.Handle("POST /orders/{order}/exchange", kit.Gate(func(r *http.Request) (webkit.Action, error) {
//		return webkit.Action{
//			Key:     "exchange:" + r.PathValue("order"),
//			Kind:    "exchange", // a metrics label, never an ID
//			Terms:   map[string]string{"order_id": r.PathValue("order"), "size": r.PostFormValue("size")},
//			Summary: "Exchange the jacket on order " + r.PathValue("order") + " for size " + r.PostFormValue("size") + ".",
//		}, nil
//	})(exchangeHandler))
//	m, err := endpoint.NewMount(endpoint.Config{Origin: "https://shop.example", Name: "Shop", Kit: kit})
//	http.ListenAndServe(addr, m.Handler(mux)) // the endpoint, the join, /_opsgate/, poppy.json
//
// An ordinary browser passes straight through. A browser joined to a
// Session (the kit's join at endpoint.Mount, or the website's own login calling
// [Sessions].Bind) is refused with 403 and a Poppy-Operation header until
// the Personal Agent's approval of exactly these terms is recorded at the
// operations endpoint (package endpoint); the same request then runs the
// handler once, in one atomic step of the store (§7). [ClaimOf] gives the
// handler the approved operation; [SetOutcome] states its outcome.
//
// endpoint.Mount serves, from the one origin it is given, the operations
// endpoint, the join, the kit's routes under /_opsgate/ and poppy.json
// (§2), in front of any router; the endpoint package's Example
// wires a whole website. [Kit.Chrome] dresses the waiting page in the
// website's own header, footer and stylesheet; [Kit.Observer] sees what the
// kit does (webkit/metrics/prometheus and webkit/metrics/otel adapt it).
//
// # Vocabulary
//
// The protocol's nouns are plain Go types with the spec's JSON shapes, each
// defined once: the records the store keeps and the endpoint sends are
// package store's ([store.Operation] §3, [store.Approval] §6,
// [store.Claim], [store.Owner]); this package adds what the store never
// sees: [Decline] (§6), and the verified [Session] a request is handled
// as, with the extensions its join declared (§2, RULES.md choice 4), whose
// [Session.Owner] says which operations it can approve (§3 "Who can
// approve it").
//
// # Headers
//
// The kit reads and writes the Poppy headers itself: the Gate writes
// Poppy-Operation on its 403 (§4, W57), and the endpoint reads
// Poppy-Approval (§6, W84) and Poppy-Extensions (RULES.md choice 4). A
// website needs at most the name Poppy-Operation, to let its own scripts
// read it (Access-Control-Expose-Headers).
package webkit
