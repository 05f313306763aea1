// Package redistest starts Redis for tests: a real redis-server, a three-master
// Redis Cluster, or miniredis. Each is stopped when the test ends.
//
// When redis-server is not installed the test is skipped, unless the
// environment variable OPSGATE_REQUIRE (a comma-separated list) names
// "redis": then it fails, so that CI can't pass by skipping.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/testenv"
)

// startTimeout bounds how long a server or cluster may take to come up.
const startTimeout = 20 * time.Second

// skipOrFail skips the test for a missing tool, or fails it when
// OPSGATE_REQUIRE names what (the project's rule, in internal/testenv).
func skipOrFail(t testing.TB, what string, err error) {
	t.Helper()
	testenv.Missing(t, what, "redis-server not installed: "+err.Error())
}

// binary finds a Redis program on PATH or in /usr/bin.
func binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s not on PATH nor in /usr/bin", name)
	}
	return p, nil
}

// Instance is one running redis-server.
type Instance struct {
	Addr string // 127.0.0.1:port

	bin  string   // the redis-server binary
	args []string // its arguments, for Restart
	dir  string   // its working directory, where AOF and RDB files live

	mu      sync.Mutex
	cmd     *exec.Cmd     // the current process
	exited  chan struct{} // closed when the current process has exited
	stopped bool          // Stop was called: no Restart
}

// Stop stops the server now, for tests of a store that is down. It is safe to
// call more than once; the test's cleanup calls it too.
func (i *Instance) Stop() {
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
	i.Kill()
}

// Client returns a new client of the server, closed when the test ends.
// Context deadlines bound its calls (ContextTimeoutEnabled).
func (i *Instance) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: i.Addr, ContextTimeoutEnabled: true,
		// A test of a server that is down wants its answer at once, not
		// after go-redis's default 5 dials × 4 attempts.
		DialerRetries: 1, MaxRetries: 1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Server starts a redis-server and returns a client of it.
func Server(t testing.TB) *redis.Client {
	t.Helper()
	return Start(t).Client(t)
}

// Start starts a redis-server on a free loopback port and waits until it
// answers PING. It keeps an AOF with appendfsync always, which the Redis
// store's default durability needs (redisstore.DurableDisk), in a
// temporary directory on a memory file system when there is one (so fsync
// costs nothing in tests), and takes no snapshots.
func Start(t testing.TB) *Instance {
	t.Helper()
	bin, err := binary("redis-server")
	if err != nil {
		skipOrFail(t, "redis", err)
	}
	var last error
	for range 3 { // a free port may be taken before the server binds it
		port, err := freePort(false)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		i, err := launch(t, bin, port, durableArgs(t)...)
		if err == nil {
			return i
		}
		last = err
	}
	t.Fatalf("redistest: start redis-server: %v", last)
	return nil
}

// launch starts one redis-server on port with extra arguments and waits for it.
// Later arguments override earlier ones, so extra can turn persistence on.
func launch(t Host, bin string, port int, extra ...string) (*Instance, error) {
	dir := t.TempDir()
	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--loglevel", "warning",
		"--logfile", filepath.Join(dir, "redis.log"),
	}, extra...)
	i := &Instance{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, args: args, dir: dir}
	if err := i.spawn(); err != nil {
		return nil, err
	}
	t.Cleanup(i.Stop)
	return i, i.waitUp()
}

// spawn starts the server's process.
func (i *Instance) spawn() error {
	cmd := exec.Command(i.bin, i.args...)
	cmd.Dir = i.dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	i.mu.Lock()
	i.cmd, i.exited = cmd, exited
	i.mu.Unlock()
	return nil
}

// waitUp waits until the server answers PING (a server loading its AOF
// answers LOADING, which is not yet up).
func (i *Instance) waitUp() error {
	dir := i.dir
	port := i.Addr[strings.LastIndexByte(i.Addr, ':')+1:]
	i.mu.Lock()
	exited := i.exited
	i.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: i.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return fmt.Errorf("redis-server on port %s exited: %s", port, strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			i.Stop()
			return fmt.Errorf("redis-server on port %s: no PING answer: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for startup, not semantics
	}
}

// freePort returns a loopback port that was free a moment ago. With bus, the
// port 10000 above it (the Cluster bus port) was free too.
func freePort(bus bool) (int, error) {
	if !bus {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for p := 20000 + int(time.Now().UnixNano()%20000); ; p++ {
		if p >= 55000 {
			p = 20000
		}
		l1, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		l1.Close()
		if err != nil {
			continue
		}
		l2.Close()
		return p, nil
	}
}

// durableArgs turn on the AOF with appendfsync always, in a directory on
// /dev/shm when it exists (removed when the test ends), else in the test's
// temporary directory. The directory is made before the server starts, so
// its removal runs after the server stops.
func durableArgs(t testing.TB) []string {
	args := []string{"--appendonly", "yes", "--appendfsync", "always"}
	if dir, err := os.MkdirTemp("/dev/shm", "redistest-"); err == nil {
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		args = append(args, "--dir", dir)
	}
	return args
}

// Cluster starts a Redis Cluster of three masters and no replicas, and
// returns a client of it once every node reports cluster_state:ok. Under
// go test -short it skips the test: a cluster takes seconds to form.
func Cluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts a Redis Cluster")
	}
	bin, err := binary("redis-server")
	if err != nil {
		skipOrFail(t, "redis", err)
	}
	cli, err := binary("redis-cli")
	if err != nil {
		skipOrFail(t, "redis", err)
	}
	var addrs []string
	used := map[int]bool{}
	for len(addrs) < 3 {
		port, err := freePort(true)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		if used[port] || used[port+10000] || used[port-10000] {
			continue
		}
		i, err := launch(t, bin, port, append(durableArgs(t), "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")...)
		if err != nil {
			continue // taken meanwhile: try another
		}
		used[port] = true
		addrs = append(addrs, i.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	create := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		if err := waitClusterOK(ctx, a); err != nil {
			t.Fatalf("redistest: %s: %v", a, err)
		}
	}
	// The slot map is refreshed every second, as redisstore.ClusterOptions
	// does, so that a failover is noticed (redisstore's Check says so).
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: 1,
		ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitClusterOK(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(errors.New("cluster_state never ok"), err, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond) // polling for startup, not semantics
	}
}

// Mini starts a miniredis and returns it (for FastForward and Close) with a
// client of it; both are closed when t ends.
//
// The cleanup lets go of them once it has run: the testing package keeps a
// finished parallel subtest, and the closures it ran, until its parent
// ends, so a cleanup that held the server (as miniredis.RunT's does) kept
// every finished sequence's miniredis, its data and its compiled scripts
// (about 475 KB each) for the rest of a differential campaign.
func Mini(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr, err := miniredis.Run()
	if err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: 1})
	held := &struct {
		mr *miniredis.Miniredis
		c  *redis.Client
	}{mr, c}
	t.Cleanup(func() {
		_ = held.c.Close()
		held.mr.Close()
		held.mr, held.c = nil, nil
	})
	return mr, c
}

// Replica starts a redis-server replicating master (StartReplica) for a
// test. When it can't, the test skips, or fails when OPSGATE_REQUIRE names
// "redis" (internal/testenv), as for a missing redis-server.
func Replica(t testing.TB, master *Instance, extra ...string) *Instance {
	t.Helper()
	r, err := StartReplica(t, master, extra...)
	if err != nil {
		testenv.Missing(t, "redis", "can't start a replica: "+err.Error())
	}
	return r
}

// ClusterOf starts a Redis Cluster (StartCluster) for a test. When it
// can't, the test skips, or fails when OPSGATE_REQUIRE names "redis".
func ClusterOf(t testing.TB, masters, replicas int, nodeTimeout time.Duration, extra ...string) *ClusterNodes {
	t.Helper()
	nodes, err := StartCluster(t, masters, replicas, nodeTimeout, extra...)
	if err != nil {
		testenv.Missing(t, "redis", "can't start a Redis Cluster: "+err.Error())
	}
	return nodes
}

// PauseT pauses the server (Pause) for a test. Where pausing a process
// isn't supported, the test skips, or fails when OPSGATE_REQUIRE names
// "redis"; any other failure fails it.
func (i *Instance) PauseT(t testing.TB) {
	t.Helper()
	if sigStop == nil {
		testenv.Missing(t, "redis", "can't pause redis-server (SIGSTOP) on this system")
	}
	if err := i.Pause(); err != nil {
		t.Fatalf("redistest: pause %s: %v", i.Addr, err)
	}
}
