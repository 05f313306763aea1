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
	st := redisstore.New(client, redisstore.Options{})
	if err := st.Load(ctx); err != nil {
		panic(err)
	}
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	owner := store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-1"}
	action := store.Action{Key: "exchange:ord_7Hk2", Terms: []byte(`{"size":"L"}`), Lifetime: 10 * time.Minute}

	res, _ := st.Take(ctx, owner, action, now) // no approval yet: 403 with the ref
	is := *res.Issued
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
	fmt.Println("new operation:", res.Issued.Operation.ID != is.Operation.ID)
	// Output:
	// record: recorded
	// claimed: true
	// finish: <nil>
	// status: performed
	// new operation: true
}
