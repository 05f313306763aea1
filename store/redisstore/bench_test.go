package redisstore_test

import (
	"testing"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/store/storetest"
)

// go test -run '^$' -bench . ./store/redisstore/
// Each op is one EVALSHA (or HGETALL) round trip; compare with Redis's own
// ceiling on the machine: redis-benchmark -q -n 100000 EVALSHA <sha of
// "return 1"> 0.

func BenchmarkMiniredis(b *testing.B) {
	storetest.Bench(b, func(b testing.TB) storetest.Harness {
		_, c := redistest.Mini(b)
		return storetest.Harness{Store: redisstore.New(c, redisstore.Options{Durability: redisstore.Durability{Mode: redisstore.DurableNone}})}
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
		return storetest.Harness{Store: st}
	})
}
