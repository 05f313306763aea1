package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Host owns the servers a test or a program starts: their directories, and
// the clean-ups that stop them. A testing.TB is one; [Procs] is one for a
// program (the load tool's fault suite).
type Host interface {
	TempDir() string
	Cleanup(func())
}

// Procs is a Host for a program: Close stops every server started on it
// and removes their directories. Safe for concurrent use.
type Procs struct {
	mu       sync.Mutex
	root     string
	n        int
	cleanups []func()
}

// NewProcs returns a Procs whose servers live under a new temporary
// directory.
func NewProcs() (*Procs, error) {
	root, err := os.MkdirTemp("", "opsgate-redis-")
	if err != nil {
		return nil, err
	}
	return &Procs{root: root}, nil
}

// TempDir returns a new directory under the Procs' root.
func (p *Procs) TempDir() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	dir := fmt.Sprintf("%s/%03d", p.root, p.n)
	if err := os.Mkdir(dir, 0o700); err != nil {
		panic(err) // under a directory this process just made: can't happen but for a full disk
	}
	return dir
}

// Cleanup registers f to run on Close, last registered first.
func (p *Procs) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

// Close stops every server and removes the directories. Safe to call more
// than once.
func (p *Procs) Close() {
	p.mu.Lock()
	fs := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
	_ = os.RemoveAll(p.root)
}

// StartArgs starts a redis-server on a free loopback port with extra
// arguments (such as "--appendonly", "yes", "--appendfsync", "always"),
// which override the defaults of Start, and waits until it answers PING.
func StartArgs(h Host, extra ...string) (*Instance, error) {
	bin, err := binary("redis-server")
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 { // a free port may be taken before the server binds it
		port, err := freePort(false)
		if err != nil {
			return nil, err
		}
		i, err := launch(h, bin, port, extra...)
		if err == nil {
			return i, nil
		}
		last = err
	}
	return nil, fmt.Errorf("redistest: start redis-server: %w", last)
}

// Kill ends the server's process at once (SIGKILL, as a crash), without
// saving anything; Restart starts it again. Safe to call more than once.
func (i *Instance) Kill() {
	i.mu.Lock()
	cmd, exited := i.cmd, i.exited
	i.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill() // a SIGSTOPped process dies too
	<-exited
}

// Restart starts a killed server again on the same port and directory, with
// the same arguments, so that it reloads what it persisted (AOF or RDB), and
// waits until it answers PING, at most 20 s.
func (i *Instance) Restart() error {
	i.mu.Lock()
	stopped := i.stopped
	i.mu.Unlock()
	if stopped {
		return fmt.Errorf("redistest: %s was stopped for good", i.Addr)
	}
	i.Kill()
	var err error
	for range 50 { // the port may linger for a moment after the kill
		if err = i.spawn(); err != nil {
			return err
		}
		if err = i.waitUp(); err == nil || !strings.Contains(err.Error(), "Address already in use") {
			return err
		}
		time.Sleep(100 * time.Millisecond) // waiting for the kernel to free the port
	}
	return err
}

// Pause stops the server's process (SIGSTOP): it keeps its connections but
// answers nothing, as a server stalled by the OS, a fork or a swap storm.
func (i *Instance) Pause() error { return i.signal(sigStop) }

// Resume lets a paused server go on (SIGCONT).
func (i *Instance) Resume() error { return i.signal(sigCont) }

func (i *Instance) signal(sig os.Signal) error {
	if sig == nil {
		return fmt.Errorf("redistest: stopping a process is not supported on this system")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cmd == nil {
		return fmt.Errorf("redistest: %s is not running", i.Addr)
	}
	return i.cmd.Process.Signal(sig)
}

// Port returns the server's port.
func (i *Instance) Port() string { return i.Addr[strings.LastIndexByte(i.Addr, ':')+1:] }

// Dir returns the server's working directory (its AOF and RDB files).
func (i *Instance) Dir() string { return i.dir }

// StartReplica starts a redis-server replicating master, with extra
// arguments, and waits until its link to the master is up (at most 20 s).
func StartReplica(h Host, master *Instance, extra ...string) (*Instance, error) {
	r, err := StartArgs(h, append([]string{"--replicaof", "127.0.0.1", master.Port()}, extra...)...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("redistest: replica %s never linked to %s: %v", r.Addr, master.Addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for startup, not semantics
	}
}

// ClusterNodes is a Redis Cluster started by StartCluster.
type ClusterNodes struct {
	Masters  []*Instance
	Replicas []*Instance // Replicas[k] replicates Masters[k % len(Masters)]
}

// Addrs returns every node's address, masters first.
func (c *ClusterNodes) Addrs() []string {
	var out []string
	for _, i := range append(slices.Clone(c.Masters), c.Replicas...) {
		out = append(out, i.Addr)
	}
	return out
}

// StartCluster starts a Redis Cluster of masters masters, each with
// replicas replicas, with a node timeout of nodeTimeout (a replica is
// promoted about that long after its master fails), and waits until every
// node reports cluster_state:ok and every replica is linked.
func StartCluster(h Host, masters, replicas int, nodeTimeout time.Duration, extra ...string) (*ClusterNodes, error) {
	bin, err := binary("redis-server")
	if err != nil {
		return nil, err
	}
	cli, err := binary("redis-cli")
	if err != nil {
		return nil, err
	}
	var nodes []*Instance
	used := map[int]bool{}
	for tries := 0; len(nodes) < masters*(1+replicas); tries++ {
		if tries > 100 {
			return nil, fmt.Errorf("redistest: no free ports for a cluster")
		}
		port, err := freePort(true)
		if err != nil {
			return nil, err
		}
		if used[port] || used[port+10000] || used[port-10000] {
			continue
		}
		i, err := launch(h, bin, port, append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10)}, extra...)...)
		if err != nil {
			continue // taken meanwhile: try another
		}
		used[port] = true
		nodes = append(nodes, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	// redis-cli assigns the first masters addresses as masters, and the
	// rest as their replicas.
	create := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		if err := waitClusterOK(ctx, a); err != nil {
			return nil, fmt.Errorf("redistest: %s: %w", a, err)
		}
	}
	// Which node replicates which is redis-cli's choice: read it back.
	cn := &ClusterNodes{}
	byID := map[string]*Instance{}
	masterOf := map[*Instance]string{}
	// A node redis-cli made a replica may still call itself a master for
	// a moment: a node is settled once it is a master that owns slots, or
	// a replica that names its master.
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		var err error
		for {
			var out string
			if out, err = c.Do(ctx, "CLUSTER", "NODES").Text(); err != nil {
				break
			}
			id, master, settled := myRole(out)
			if settled {
				byID[id] = n
				if master != "" {
					masterOf[n] = master
				}
				break
			}
			if ctx.Err() != nil {
				err = fmt.Errorf("its role never settled: %w", ctx.Err())
				break
			}
			time.Sleep(20 * time.Millisecond) // polling for startup, not semantics
		}
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("redistest: %s: %w", n.Addr, err)
		}
	}
	for _, n := range nodes {
		if _, ok := masterOf[n]; !ok {
			cn.Masters = append(cn.Masters, n)
		}
	}
	for k := range replicas {
		for _, m := range cn.Masters {
			found := 0
			for _, n := range nodes {
				if id := masterOf[n]; id != "" && byID[id] == m {
					if found == k {
						cn.Replicas = append(cn.Replicas, n)
					}
					found++
				}
			}
		}
	}
	if len(cn.Masters) != masters || len(cn.Replicas) != masters*replicas {
		return nil, fmt.Errorf("redistest: redis-cli made %d masters and %d replicas, want %d and %d", len(cn.Masters), len(cn.Replicas), masters, masters*replicas)
	}
	for _, r := range cn.Replicas {
		if err := waitLinked(ctx, r.Addr); err != nil {
			return nil, err
		}
	}
	// Each master's own view of the Cluster lists its replicas as its
	// replicas only once gossip has told it: until then a master can read
	// as having none (redisstore's alone.go reads that view).
	for _, m := range cn.Masters {
		var id string
		for n, i := range byID {
			if i == m {
				id = n
			}
		}
		if err := waitReplicasKnown(ctx, m.Addr, id, replicas); err != nil {
			return nil, err
		}
	}
	return cn, nil
}

// waitReplicasKnown waits until CLUSTER NODES, read on the master at addr
// (node id), lists n replicas of it, or ctx ends.
func waitReplicasKnown(ctx context.Context, addr, id string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for {
		out, err := c.Do(ctx, "CLUSTER", "NODES").Text()
		known := 0
		for line := range strings.SplitSeq(out, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[3] == id {
				known++
			}
		}
		if err == nil && known >= n {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redistest: master %s never knew its %d replicas (knows %d): %v", addr, n, known, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for startup, not semantics
	}
}

// myRole reads the "myself" line of CLUSTER NODES: the node's ID, its
// master's ID when it is a replica, and whether it is settled (a replica
// that names its master, or a master that owns slots).
func myRole(nodes string) (id, master string, settled bool) {
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		switch {
		case strings.Contains(f[2], "slave") && f[3] != "-":
			return f[0], f[3], true
		case strings.Contains(f[2], "master") && len(f) > 8:
			return f[0], "", true
		}
		return f[0], "", false
	}
	return "", "", false
}

// WaitLinked waits until the replica at addr reports its link to its
// master up, or ctx ends.
func WaitLinked(ctx context.Context, addr string) error { return waitLinked(ctx, addr) }

func waitLinked(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("redistest: replica %s never linked: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for startup, not semantics
	}
}
