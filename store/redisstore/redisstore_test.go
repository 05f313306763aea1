package redisstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
	"github.com/opsgate/opsgate/store/storetest"
)

// The conformance suite on every backend the store promises to run on
// (package doc): miniredis, a redis-server, a Redis Cluster, and four web
// servers' clients sharing one redis-server (W135 across clients).

func TestMiniredis(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		mr, c := redistest.Mini(t)
		return storetest.Harness{
			// miniredis keeps nothing on disk: durability none, chosen
			// explicitly (Check says it is a demo store).
			Store:   redisstore.New(c, redisstore.Options{Durability: redisstore.Durability{Mode: redisstore.DurableNone}}),
			Advance: mr.FastForward,
			Size:    func(ctx context.Context) (int, error) { n, err := c.DBSize(ctx).Result(); return int(n), err },
			Down:    mr.Close,
		}
	})
}

// serverHarness starts a fresh redis-server for each subtest (a few ms), so
// that Down can stop it; clients is how many web servers share it.
func serverHarness(clients int) func(t *testing.T) storetest.Harness {
	return func(t *testing.T) storetest.Harness {
		srv := redistest.Start(t)
		h := storetest.Harness{Store: redisstore.New(srv.Client(t), redisstore.Options{}), Down: srv.Stop}
		for range clients - 1 {
			h.Clients = append(h.Clients, redisstore.New(srv.Client(t), redisstore.Options{}))
		}
		// No Advance or Size: a real server's TTLs run on real time
		// (TestTTL checks them instead).
		return h
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	storetest.Run(t, serverHarness(1))
}

func TestRedisFourClients(t *testing.T) {
	t.Parallel()
	storetest.Run(t, serverHarness(4))
}

func TestCluster(t *testing.T) {
	t.Parallel()
	// One cluster for the whole suite (creating one takes seconds),
	// flushed before each subtest; two clients, as two web servers.
	cluster := redistest.Cluster(t)
	other := clusterClient(t, cluster)
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		err := cluster.ForEachMaster(t.Context(), func(ctx context.Context, c *redis.Client) error {
			return c.FlushAll(ctx).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Harness{
			Store:   redisstore.New(cluster, redisstore.Options{}),
			Clients: []store.Store{redisstore.New(other, redisstore.Options{})},
		}
	})
}

// clusterClient returns a second client of c's cluster.
func clusterClient(t *testing.T, c *redis.ClusterClient) *redis.ClusterClient {
	var (
		mu    sync.Mutex
		addrs []string
	)
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		addrs = append(addrs, m.Options().Addr)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = o.Close() })
	return o
}
