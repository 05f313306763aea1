package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// The Gate's flow on one store: a refused request issues an operation, the
// endpoint records its approval, the repeated request takes it, and the
// website reports the outcome (§6 "Websites", §7). A *redis.ClusterClient
// works the same way.
func Example() {
	mr, err := miniredis.Run() // or a real Redis: redis.NewClient(&redis.Options{Addr: …})
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()

	ctx := context.Background()
	// miniredis keeps nothing on disk: durability none, chosen explicitly.
	// With a real Redis keep the default (DurableDisk) and call redisstore.Check.
	st := redisstore.New(client, redisstore.Options{Durability: redisstore.DurableNone})
	if err := redisstore.Load(ctx, st); err != nil {
		panic(err)
	}
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	owner := store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-1"}
	action := store.TakeRequest{Key: "exchange:ord_7Hk2", Terms: []byte(`{"size":"L"}`), Lifetime: 10 * time.Minute}

	res, _ := st.Take(ctx, owner, action, now) // no approval yet: 403 with the ref
	is := res
	rep, _ := st.Record(ctx, owner, is.Ref, store.Approval{
		OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: "user",
	}, now.Add(time.Minute), store.RecordOptions{})
	fmt.Println("record:", rep.Result)

	res, _ = st.Take(ctx, owner, action, now.Add(2*time.Minute)) // the browser repeats it
	fmt.Println("claimed:", res.Claim != nil)
	fmt.Println("finish:", st.Finish(ctx, *res.Claim, store.Done, now.Add(2*time.Minute)))

	rec, _, _ := st.Lookup(ctx, owner, is.Ref, now.Add(3*time.Minute))
	fmt.Println("status:", rec.Status)
	res, _ = st.Take(ctx, owner, action, now.Add(4*time.Minute)) // once more: a new operation
	fmt.Println("new operation:", res.Operation.ID != is.Operation.ID)
	// Output:
	// record: recorded
	// claimed: true
	// finish: <nil>
	// status: performed
	// new operation: true
}

// A reconciliation job (webkit/RULES.md "Claims are never stranded"): now and then,
// list the operations performing for longer than any handler takes, find
// out from the website's own records whether each action took effect, and
// say so with Resolve. A performed one then answers "performed" for as
// long as the spec requires; a not-performed one waits for a new approval.
func Example_reconcile() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	st := redisstore.New(client, redisstore.Options{Durability: redisstore.DurableNone})

	ctx := context.Background()
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	owner := store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-1"}
	action := store.TakeRequest{Key: "refund:ord_7Hk2", Terms: []byte(`{"amount":"70.00"}`), Lifetime: 10 * time.Minute}
	first, _ := st.Take(ctx, owner, action, now) // the browser's request: 403, waiting for approval
	is := first
	st.Record(ctx, owner, is.Ref, store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: "user"}, now, store.RecordOptions{})
	res, _ := st.Take(ctx, owner, action, now)
	st.Finish(ctx, *res.Claim, store.Unknown, now) // the payment provider timed out

	// The website's own record of what happened (here: the refund went through).
	refunded := func(store.Stuck) bool { return true }

	// The job, an hour later: anything performing for over 10 minutes.
	later := now.Add(time.Hour)
	for stuck, err := range st.Performing(ctx, later.Add(-10*time.Minute), later) {
		if err != nil {
			fmt.Println("scan:", err)
			break
		}
		outcome := store.NotDone
		if refunded(stuck) {
			outcome = store.Done
		}
		err := st.Resolve(ctx, stuck.Owner, stuck.Operation.ID, outcome, later)
		fmt.Println("resolved", stuck.Operation.ID == is.Operation.ID, "unknown:", stuck.Unknown, "as", outcome, err)
	}
	rec, _, _ := st.Lookup(ctx, owner, is.Ref, later)
	fmt.Println("status:", rec.Status)
	// Output:
	// resolved true unknown: true as performed <nil>
	// status: performed
}
