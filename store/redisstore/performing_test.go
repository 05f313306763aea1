package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// unrelated fills c with n keys that are not the store's (other programs
// sharing the Redis), in pipelined MSETs of 1,000.
func unrelated(tb testing.TB, c *redis.Client, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := 0; i < n; {
		pipe := c.Pipeline()
		for range 10 {
			kv := make([]any, 0, 2000)
			for j := 0; j < 1000 && i < n; j++ {
				kv = append(kv, fmt.Sprint("other:", i), "v")
				i++
			}
			if len(kv) > 0 {
				pipe.MSet(ctx, kv...)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Fatal(err)
		}
	}
}

// performingOps makes n claims that perform (started, never finished), of
// n owners, so that they are in many hash slots.
func performingOps(tb testing.TB, st store.Store, n int) {
	tb.Helper()
	ctx := context.Background()
	for i := range n {
		o := store.Owner{Agent: "agent-p", User: fmt.Sprint("user-", i)}
		a := action("k", `{}`, time.Hour)
		is, err := storedriver.Steps(st).Take(ctx, o, a, at(0))
		if err != nil || is.Ref == "" {
			tb.Fatalf("Take: %+v, %v", is, err)
		}
		if rep, err := storedriver.Steps(st).Record(ctx, o, is.Ref, approval(is), at(0), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			tb.Fatalf("Record: %+v, %v", rep, err)
		}
		if r, err := storedriver.Steps(st).Take(ctx, o, a, at(time.Second)); err != nil || r.Claim == nil {
			tb.Fatalf("Take: %+v, %v", r, err)
		}
	}
}

// countPerforming runs Performing and returns what it found.
func countPerforming(tb testing.TB, st store.Store, now time.Time) int {
	tb.Helper()
	n := 0
	for _, err := range st.Performing(context.Background(), now, now) {
		if err != nil {
			tb.Fatal(err)
		}
		n++
	}
	return n
}

// Performing's cost follows the operations performing, not the keyspace
// (RULES.md "Claims are never stranded"): with 100,000 unrelated keys in
// the Redis it sends exactly the commands it sends with none, and reads
// no key other than its indexes and the operations they list.
func TestPerformingReadsNoKeyspace(t *testing.T) {
	t.Parallel()
	calls := map[int]int{}
	for _, others := range []int{0, 100_000} {
		st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone})
		performingOps(t, st, 10)
		unrelated(t, c, others)
		if err := c.ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if n := countPerforming(t, st, at(time.Minute)); n != 10 {
			t.Fatalf("Performing found %d, want 10", n)
		}
		total := 0
		for cmd, k := range commandCalls(t, c) {
			if cmd == "scan" || cmd == "keys" {
				t.Errorf("Performing sent %s", cmd)
			}
			switch cmd {
			case "info", "config|resetstat", "hello", "client|setinfo", "ping", "select":
				// the test's own, and a new connection's
			default:
				total += k
			}
		}
		calls[others] = total
	}
	if calls[0] != calls[100_000] {
		t.Errorf("Performing: %d commands with no other keys, %d with 100,000: want the same", calls[0], calls[100_000])
	}
	t.Logf("Performing with 10 operations performing: %d commands, with or without 100,000 unrelated keys", calls[0])
}

// go test -run '^$' -bench Performing -benchtime 20x ./store/redisstore/
// One Performing listing of 10 operations performing, on a redis-server
// on loopback that holds 0 or 1,000,000 unrelated keys.
func BenchmarkPerforming(b *testing.B) {
	for _, others := range []int{0, 1_000_000} {
		b.Run(fmt.Sprint("unrelated=", others), func(b *testing.B) {
			c := redistest.Start(b).Client(b)
			st := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})
			if err := st.Load(b.Context()); err != nil {
				b.Fatal(err)
			}
			performingOps(b, st, 10)
			unrelated(b, c, others)
			// Let Redis finish growing its table of keys (it rehashes a
			// step at a time, on every command and once a millisecond).
			time.Sleep(3 * time.Second)
			b.ResetTimer()
			for range b.N {
				if n := countPerforming(b, st, at(time.Minute)); n != 10 {
					b.Fatalf("Performing found %d, want 10", n)
				}
			}
		})
	}
}

// go test -run '^$' -bench PerformingCluster -benchtime 20x ./store/redisstore/
// The same on a Redis Cluster of three masters (loopback): each master
// reads the indexes of its own slots, about 5,461 each.
func BenchmarkPerformingCluster(b *testing.B) {
	c := redistest.Cluster(b)
	st := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})
	if err := st.Load(b.Context()); err != nil {
		b.Fatal(err)
	}
	performingOps(b, st, 10)
	added := 0
	for _, others := range []int{0, 1_000_000} {
		ctx := context.Background()
		for ; added < others; added += 1000 {
			pipe := c.Pipeline()
			for j := range 1000 {
				pipe.Set(ctx, fmt.Sprint("other:", added+j), "v", 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if others > 0 {
			time.Sleep(3 * time.Second) // as BenchmarkPerforming
		}
		b.Run(fmt.Sprint("unrelated=", others), func(b *testing.B) {
			for range b.N {
				if n := countPerforming(b, st, at(time.Minute)); n != 10 {
					b.Fatalf("Performing found %d, want 10", n)
				}
			}
		})
	}
}
