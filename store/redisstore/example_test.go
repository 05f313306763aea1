package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/endpoint"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/webkit"
	"github.com/opsgate/opsgate/webkit/webkittest"
)

// Every instance of a website behind a load balancer shares one Redis
// store: check at start-up what it can promise, load its steps, and set it
// as the Kit's Store.
func Example() {
	mr, err := miniredis.Run() // or a real Redis: redis.NewClient(&redis.Options{Addr: …})
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	ctx := context.Background()
	// With a real Redis keep the default durability (DurableDisk), and
	// refuse to start when Check says the server can't keep it. miniredis
	// keeps nothing on disk: durability none, chosen knowingly, and Check
	// still names that risk.
	st := redisstore.New(client, redisstore.Options{Durability: redisstore.DurableNone})
	fmt.Println("check names the risk:", st.Check(ctx) != nil)
	if err := st.Load(ctx); err != nil {
		panic(err)
	}
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Store = st
	fmt.Println("kit:", kit.Check())
	// Output:
	// check names the risk: true
	// kit: <nil>
}

// A reconciliation job (webkit/RULES.md "Claims are never stranded"): now
// and then, list the operations performing for longer than any handler
// takes, find out from the website's own records whether each action took
// effect, and say so with Resolve. A performed one then answers
// "performed" for as long as the spec requires; a not-performed one waits
// for a new approval.
func Example_reconcile() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	st := redisstore.New(client, redisstore.Options{Durability: redisstore.DurableNone})

	// A shop whose refund handler times out at its payment provider: the
	// outcome is unknown, and the operation stays performing (§7 W142).
	site := webkittest.New("https://shop.example")
	kit := webkit.New([]byte("32-byte-long-hash-key-for-cookie"), []byte("32-byte-long-encryption-key-1234"))
	kit.Store, kit.Logger = st, slog.New(slog.DiscardHandler)
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/refund", kit.Gate(func(r *http.Request) (webkit.Action, error) {
		return webkit.Action{Key: "refund:" + r.PathValue("order"), Terms: map[string]string{"amount": "70.00"}}, nil
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "payment provider timed out", http.StatusGatewayTimeout)
	})))
	m, err := endpoint.NewMount(endpoint.Config{Origin: site.Origin, Kit: kit, Resolver: site.Resolver()})
	if err != nil {
		panic(err)
	}
	site.Handler = m.Handler(mux)
	s := site.NewAgent().Session("usr_1")
	b, _ := s.Join()
	res := b.PostForm("/orders/ord_7Hk2/refund", url.Values{})
	s.Approve(res.Ref)
	fmt.Println("repeat:", res.Continue().StatusCode) // 503: not known yet

	// The website's own record of what happened (here: the refund went through).
	refunded := func(store.Stuck) bool { return true }

	// The job, an hour later: anything performing for over 10 minutes.
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	for stuck, err := range st.Performing(ctx, later.Add(-10*time.Minute), later) {
		if err != nil {
			fmt.Println("scan:", err)
			break
		}
		outcome := store.OutcomeNotPerformed
		if refunded(stuck) {
			outcome = store.OutcomePerformed
		}
		err := st.Resolve(ctx, stuck.Owner, stuck.Operation.ID, outcome, "job:refunds", time.Now())
		fmt.Println("resolved, unknown:", stuck.Unknown, "as", outcome, err)
	}
	fmt.Println("status:", s.Lookup(res.Ref).OperationStatus)
	// Output:
	// repeat: 503
	// resolved, unknown: true as performed <nil>
	// status: performed
}
