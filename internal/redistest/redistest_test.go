package redistest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
)

func TestServerStop(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.Client(t)
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	for _, arg := range []string{"save", "appendonly", "appendfsync"} {
		v, err := c.ConfigGet(t.Context(), arg).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"save": "", "appendonly": "yes", "appendfsync": "always"}[arg]; v[arg] != want {
			t.Errorf("%s = %q, want %q", arg, v[arg], want)
		}
	}
	srv.Stop()
	srv.Stop() // twice is fine; cleanup calls it again
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop: no error")
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if err := c.Set(t.Context(), k, k, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var n atomic.Int32 // ForEachMaster runs concurrently
	if err := c.ForEachMaster(t.Context(), func(context.Context, *redis.Client) error { n.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	if n := n.Load(); n != 3 {
		t.Errorf("%d masters, want 3", n)
	}
}

func TestMini(t *testing.T) {
	t.Parallel()
	mr, c := redistest.Mini(t)
	if err := c.Set(t.Context(), "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	mr.FastForward(2 * time.Minute)
	if mr.Exists("k") {
		t.Error("k outlived its TTL after FastForward")
	}
}
