package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store/redisstore"
)

// The overall caps (Options.MaxOpen, MaxReplayMarkers) hold across agents
// on miniredis, on one redis-server shared by four web servers, and on a
// Cluster shared by two: the count one web server adds is seen by the
// others near the cap.
func TestOverallCaps(t *testing.T) {
	t.Parallel()
	caps := redisstore.Options{MaxOpen: 3, MaxReplayMarkers: 3, Durability: redisstore.DurableNone}
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		storetest.OverallCaps(t, func(t *testing.T) storetest.Harness {
			mr, c := redistest.Mini(t)
			return storetest.Harness{Store: storedriver.Steps(redisstore.New(c, caps)), Advance: mr.FastForward}
		})
	})
	t.Run("redis-server, four web servers", func(t *testing.T) {
		t.Parallel()
		storetest.OverallCaps(t, func(t *testing.T) storetest.Harness {
			srv := redistest.Start(t)
			h := storetest.Harness{Store: storedriver.Steps(redisstore.New(srv.Client(t), caps))}
			for range 3 {
				h.Clients = append(h.Clients, storedriver.Steps(redisstore.New(srv.Client(t), caps)))
			}
			return h
		})
	})
	t.Run("cluster, two web servers", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: starts a Redis Cluster")
		}
		t.Parallel()
		cluster := redistest.Cluster(t)
		other := clusterClient(t, cluster)
		var n atomic.Int64
		storetest.OverallCaps(t, func(t *testing.T) storetest.Harness {
			opts := caps
			opts.Prefix = fmt.Sprintf("caps%d:", n.Add(1))
			forgetPrefix(t, cluster, opts.Prefix)
			return storetest.Harness{
				Store:   storedriver.Steps(redisstore.New(cluster, opts)),
				Clients: []storedriver.Store{storedriver.Steps(redisstore.New(other, opts))},
			}
		})
	})
}

var _ = context.Background
var _ redis.UniversalClient
