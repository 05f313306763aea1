package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// go test -run '^$' -bench . ./store/redisstore/
// Each op is one EVALSHA (or HGETALL) round trip; compare with Redis's own
// ceiling on the machine: redis-benchmark -q -n 100000 EVALSHA <sha of
// "return 1"> 0.

func BenchmarkMiniredis(b *testing.B) {
	storetest.Bench(b, func(b testing.TB) storetest.Harness {
		_, c := redistest.Mini(b)
		return storetest.Harness{Store: storedriver.Steps(redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone}))}
	})
}

func BenchmarkRedis(b *testing.B) {
	// One server for every benchmark, flushed for each harness: starting
	// one per b.N would measure process start-up.
	c := redistest.Server(b)
	storetest.Bench(b, func(b testing.TB) storetest.Harness {
		if err := c.FlushAll(b.Context()).Err(); err != nil {
			b.Fatal(err)
		}
		st := redisstore.New(c, redisstore.Options{})
		if err := st.Load(b.Context()); err != nil {
			b.Fatal(err)
		}
		return storetest.Harness{Store: storedriver.Steps(st)}
	})
}

// go test -run '^$' -bench ClaimDurability -benchtime 2000x ./store/redisstore/
// What each durability mode adds to a claim (Take that claims, then
// Finish) on a real redis-server on loopback: none (no AOF), disk (AOF,
// appendfsync always, on the test's temporary directory's disk; Redis 7.0
// has no WAITAOF, so the fsync happens before the reply), and replicas 1
// (WAIT 1 on a replica on loopback). The approvals are recorded with the
// timer stopped.
func BenchmarkClaimDurability(b *testing.B) {
	for _, mode := range []string{"none", "disk", "replicas"} {
		b.Run(mode, func(b *testing.B) {
			var (
				srv  *redistest.Instance
				err  error
				opts = redisstore.Options{MaxOpenPerOwner: -1, MaxOpenPerAgent: -1}
			)
			switch mode {
			case "none":
				srv, err = redistest.StartArgs(b)
				opts.Durability = redisstore.DurableNone
			case "disk":
				srv, err = redistest.StartArgs(b, "--appendonly", "yes", "--appendfsync", "always")
				opts.Durability = redisstore.DurableDisk
			case "replicas":
				srv, err = redistest.StartArgs(b)
				if err == nil {
					_, err = redistest.StartReplica(b, srv)
				}
				opts.Durability, opts.Replicas = redisstore.DurableReplicas, 1
			}
			if err != nil {
				b.Skip(err)
			}
			c := srv.Client(b)
			st := redisstore.New(c, opts)
			ctx := b.Context()
			if err := st.Load(ctx); err != nil {
				b.Fatal(err)
			}
			const batch = 256
			var actions []storedriver.TakeRequest
			b.ResetTimer()
			for i := range b.N {
				if i%batch == 0 {
					b.StopTimer()
					actions = actions[:0]
					for j := range batch {
						a := action(fmt.Sprint("k", i+j), `{}`, time.Hour)
						is, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(0))
						if err != nil {
							b.Fatal(err)
						}
						if _, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), at(0), storedriver.RecordOptions{}); err != nil {
							b.Fatal(err)
						}
						actions = append(actions, a)
					}
					b.StartTimer()
				}
				res, err := storedriver.Steps(st).Take(ctx, owner, actions[i%batch], at(time.Second))
				if err != nil || res.Claim == nil {
					b.Fatalf("Take: %+v, %v", res, err)
				}
				if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, at(time.Second)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// go test -run '^$' -bench ClaimsAtOnce -benchtime 4000x ./store/redisstore/
// Claims (Take that claims, then Finish) from 50 goroutines with
// DurableReplicas (WAIT 1 on a replica on loopback): claims made at the
// same moment share their confirmation (confirm.go). The approvals are
// recorded before the timer starts.
func BenchmarkClaimsAtOnce(b *testing.B) {
	srv, err := redistest.StartArgs(b)
	if err == nil {
		_, err = redistest.StartReplica(b, srv)
	}
	if err != nil {
		b.Skip(err)
	}
	st := redisstore.New(srv.Client(b), redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, MaxOpenPerOwner: -1, MaxOpenPerAgent: -1})
	ctx := b.Context()
	if err := st.Load(ctx); err != nil {
		b.Fatal(err)
	}
	actions := make([]storedriver.TakeRequest, b.N)
	for i := range actions {
		actions[i], _ = approvedAction(b, st, fmt.Sprint("k", i))
	}
	var next atomic.Int64
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a := actions[next.Add(1)-1]
			res, err := storedriver.Steps(st).Take(ctx, owner, a, at(time.Second))
			if err != nil || res.Claim == nil {
				b.Errorf("Take: %+v, %v", res, err)
				return
			}
			if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, at(time.Second)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// approvalShapes are the approvals whose cost in stored bytes is compared
// (store/approval_bytes_test.go): the spec's example, a hostile one (an
// input_type of 7 KB, a 255-character reference), and the largest the
// store keeps whole.
var approvalShapes = []struct {
	name                 string
	inputType, reference func(i int) string
}{
	{"ordinary", func(int) string { return "tap" }, func(i int) string { return fmt.Sprintf("apr_%010d", i) }},
	{"hostile_7KB_input_type", func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("x", 7000) }, func(i int) string { return fmt.Sprintf("apr_%010d", i) }},
	{"hostile_7KB_input_type_255_reference", func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("x", 7000) },
		func(i int) string { return fmt.Sprintf("%010d", i) + strings.Repeat("r", 245) }},
	{"largest_kept", func(i int) string { return fmt.Sprintf("%07d", i) + strings.Repeat("t", storekit.MaxInputType-7) },
		func(i int) string { return fmt.Sprintf("%010d", i) + strings.Repeat("r", storekit.MaxKeptReference-10) }},
}

// approveN records n approvals under prefix's store, each of its own
// operation, and performs them when perform is set.
func approveN(tb testing.TB, st store.Store, n int, inputType, reference func(int) string, perform bool) {
	ctx := context.Background()
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	for i := range n {
		owner := store.Owner{Agent: "https://agent.example/client", User: fmt.Sprint("usr_", i%64), Account: "acct_demo"}
		a := storedriver.TakeRequest{Key: fmt.Sprint("exchange:ord_", i), Terms: []byte(`{"order_id":"ord_7Hk2","size":"M"}`), Summary: "Exchange the jacket for size M.", Lifetime: 10 * time.Minute}
		is, err := storedriver.Steps(st).Take(ctx, owner, a, now)
		if err != nil || is.Ref == "" {
			tb.Fatalf("Take: %+v %v", is, err)
		}
		ap := store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: store.ApproverUser, ApprovedAt: now,
			InputType: inputType(i), Reference: reference(i)}
		if rep, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, ap, now, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			tb.Fatalf("Record: %v %v", rep.Result, err)
		}
		if !perform {
			continue
		}
		res, err := storedriver.Steps(st).Take(ctx, owner, a, now)
		if err != nil || res.Claim == nil {
			tb.Fatalf("Take: %+v %v", res, err)
		}
		if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, now); err != nil {
			tb.Fatal(err)
		}
	}
}

// storedBytes sums MEMORY USAGE of the keys under prefix.
func storedBytes(tb testing.TB, c *redis.Client, prefix string) int64 {
	ctx := context.Background()
	var total int64
	it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		n, err := c.MemoryUsage(ctx, it.Val()).Result()
		if err != nil {
			tb.Fatal(err)
		}
		total += n
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	return total
}

// go test -run '^$' -bench ApprovalBytes ./store/redisstore/
//
// What one agent's approval costs Redis, by MEMORY USAGE of the keys it
// makes: recorded (its operation hash and audit log, kept until
// expires_at), and performed (kept a day). A hostile approval costs no
// more than an ordinary one: an input_type or reference beyond its bound
// is kept as absent (storekit.KeptMembers).
func BenchmarkApprovalBytes(b *testing.B) {
	const n = 500
	c := redistest.Server(b)
	var run atomic.Int64
	for _, stage := range []string{"recorded", "performed"} {
		for _, shape := range approvalShapes {
			b.Run(stage+"/"+shape.name, func(b *testing.B) {
				var per float64
				for range b.N {
					prefix := fmt.Sprintf("ab%d:", run.Add(1))
					st := redisstore.New(c, redisstore.Options{Prefix: prefix, Durability: redisstore.DurableNone})
					approveN(b, st, n, shape.inputType, shape.reference, stage == "performed")
					per = float64(storedBytes(b, c, prefix)) / n
				}
				b.ReportMetric(per, "bytes/approval")
			})
		}
	}
}
