package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/testenv"
)

func startArgs(t *testing.T, extra ...string) *redistest.Instance {
	t.Helper()
	i, err := redistest.StartArgs(t, extra...)
	if err != nil {
		testenv.Missing(t, "redis", err.Error())
	}
	return i
}

func TestKillRestartKeepsAOF(t *testing.T) {
	t.Parallel()
	srv := startArgs(t, "--appendonly", "yes", "--appendfsync", "always")
	c := srv.Client(t)
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(t.Context(), "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
	srv.Stop()
	if err := srv.Restart(); err == nil {
		t.Fatal("Restart after Stop: no error")
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	srv := startArgs(t)
	c := srv.Client(t)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err := c.Ping(ctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING of a paused server answered")
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a replica")
	}
	t.Parallel()
	m := startArgs(t)
	r, err := redistest.StartReplica(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Client(t).Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rc := r.Client(t)
	for range 100 {
		if v, _ := rc.Get(t.Context(), "k").Result(); v == "v" {
			return
		}
		time.Sleep(10 * time.Millisecond) // replication is asynchronous
	}
	t.Fatal("the replica never received k")
}

func TestClusterWithReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a 6-node cluster")
	}
	t.Parallel()
	if _, err := redistest.StartArgs(t); err != nil {
		testenv.Missing(t, "redis", err.Error())
	}
	cn, err := redistest.StartCluster(t, 3, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(cn.Masters) != 3 || len(cn.Replicas) != 3 || len(cn.Addrs()) != 6 {
		t.Fatalf("%d masters, %d replicas", len(cn.Masters), len(cn.Replicas))
	}
	for k, r := range cn.Replicas {
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		info, err := c.Info(t.Context(), "replication").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "master_port:" + cn.Masters[k%3].Port(); !strings.Contains(info, want) {
			t.Errorf("replica %d: no %s in\n%s", k, want, info)
		}
	}
}
