package redisstore

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions returns the options of a Redis Cluster client that moves
// to a promoted replica quickly while the old master stays down: pass them,
// adjusted as needed, to redis.NewClusterClient and the client to New.
//
// go-redis maps slots to masters from a CLUSTER SLOTS reply it refreshes
// only on a MOVED or READONLY reply, or once the map is
// ClusterStateReloadInterval old (a minute by default); a master that
// doesn't answer at all sends neither, so by default the clients of its
// slots fail until it comes back (25 s in one fault run). Here the map is
// refreshed every second while the client is used (in the background, off
// the request path), and the store asks for a refresh as soon as a call
// fails on the network (New does so for any *redis.ClusterClient). Dials
// and retries are short, so a dead master costs a request its StoreTimeout
// at most, and a promoted replica serves its slots within about 2 s of its
// promotion.
func ClusterOptions(addrs ...string) *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                      addrs,
		ContextTimeoutEnabled:      true,
		ClusterStateReloadInterval: time.Second,
		DialTimeout:                500 * time.Millisecond,
		ReadTimeout:                time.Second,
		WriteTimeout:               time.Second,
		MaxRetries:                 1,
		DialerRetries:              1,
		MinRetryBackoff:            8 * time.Millisecond,
		MaxRetryBackoff:            100 * time.Millisecond,
	}
}

// maxClusterReload is the longest ClusterStateReloadInterval Check accepts
// without naming the risk: a failover then takes that long to be noticed.
const maxClusterReload = 2 * time.Second

// failed asks a Cluster client to refresh its slot map when a call failed
// on the network: the node may be down and its slots served by a promoted
// replica (the refresh runs in the background).
func (s *rstore) failed(err error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok || err == nil {
		return
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded) {
		cc.ReloadState(context.Background())
	}
}
