package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/spans"
	"github.com/opsgate/opsgate/store"
)

// DurabilityMode is what a claim must reach before Take returns it, so that
// the handler runs only for a claim that a Redis restart or failover can't
// undo (webkit/RULES.md "Durability"). Losing a recent claim is the one way a store
// can perform an approval twice: a Redis that comes back older, or a
// replica promoted before it got the claim, still holds the approval
// without its use.
type DurabilityMode int

const (
	// DurableDisk, the default: the claim is on the Redis server's own disk
	// before the handler runs. On Redis 7.2 and later Take sends WAITAOF 1 0
	// on the connection that ran the claim; on earlier versions (Redis 7.0
	// as Debian 12 ships it) only appendfsync always gives that, because
	// Redis then fsyncs before it replies, and the store verifies it: it
	// reads the server's appendfsync and AOF state when it first claims on a
	// server and every 10 seconds after. It protects against a restart of
	// that server (a crash, an OS crash, a power cut), not against losing
	// its disk or a failover to a replica.
	DurableDisk DurabilityMode = iota
	// DurableReplicas: the claim reached Options.Replicas replicas (WAIT)
	// before the handler runs. It protects against a failover to a replica
	// that lagged behind the claim, and against losing the master's disk;
	// combine with AOF on the replicas to survive a restart of them all.
	// It survives a restart of the master without a failover only when the
	// master fsyncs each write before it replies (appendonly yes,
	// appendfsync always), and Check says so otherwise: a master that
	// snapshots (RDB) comes back older and its replicas resync from it,
	// losing the claim too (package doc, "Durability").
	DurableReplicas
	// DurableNone: Take returns the claim as soon as the master has it. A
	// restart from an older snapshot, an AOF cut back by an OS crash, or a
	// promoted replica that lagged can perform an approval a second time.
	// Choose it explicitly, knowing that; Check reports the risk.
	DurableNone
	// DurableServer: Take returns the claim as soon as the server has
	// acknowledged it, for a server that is durable before it
	// acknowledges a write, such as Amazon MemoryDB (a multi-AZ
	// transaction log). It waits for nothing more, so it is DurableNone
	// on a server that isn't: choose it only for such a server. Check
	// can't verify a managed server's promise (MemoryDB refuses CONFIG);
	// it refuses the mode where it can see the server doesn't keep it
	// (CONFIG answers, and appendfsync isn't always).
	DurableServer
)

// confirms reports whether Take confirms a claim after the server's reply
// (DurableDisk, DurableReplicas), as opposed to taking the reply as
// enough (DurableNone, DurableServer).
func (d durability) confirms() bool {
	return d.Mode != DurableNone && d.Mode != DurableServer
}

func (m DurabilityMode) String() string {
	switch m {
	case DurableDisk:
		return "disk"
	case DurableReplicas:
		return "replicas"
	case DurableNone:
		return "none"
	case DurableServer:
		return "server"
	}
	return "DurabilityMode(" + strconv.Itoa(int(m)) + ")"
}

// durability is what a claim must reach before Take returns it, from
// Options.Durability, Options.Replicas and Options.DurabilityTimeout.
type durability struct {
	Mode     DurabilityMode
	Replicas int
	Timeout  time.Duration
}

// defaultDurabilityTimeout is Options.DurabilityTimeout when 0.
const defaultDurabilityTimeout = 300 * time.Millisecond

// aofRecheck is how often, per server, DurableDisk on Redis before 7.2
// checks again that appendfsync is always and AOF is on, so that a change
// of configuration at run time fails closed within this long.
const aofRecheck = 10 * time.Second

func (d durability) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return defaultDurabilityTimeout
}

func (d durability) replicas() int {
	if d.Replicas > 0 {
		return d.Replicas
	}
	return 1
}

// nodeState is what the store knows of one server's durability.
type nodeState struct {
	lock     chan struct{} // held (one element) while a caller reads or checks the server
	version  [2]int        // major, minor; zero until read
	checked  time.Time
	checkErr error      // the last check's verdict (DurableDisk before 7.2)
	confirms confirmer  // claims confirmed together (confirm.go)
	alone    aloneState // DurableReplicas on a Cluster master without replicas (alone.go)
}

// waitAOF reports whether the server has WAITAOF (7.2 and later).
func (n *nodeState) waitAOF() bool {
	return n.version[0] > 7 || n.version[0] == 7 && n.version[1] >= 2
}

// node returns the state of the server at addr.
func (s *rstore) node(addr string) *nodeState {
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	if s.nodes == nil {
		s.nodes = make(map[string]*nodeState)
	}
	n := s.nodes[addr]
	if n == nil {
		n = &nodeState{lock: make(chan struct{}, 1)}
		s.nodes[addr] = n
	}
	return n
}

// ready makes sure the server can confirm claims as the mode asks: it reads
// the server's version once, and for DurableDisk before 7.2 that AOF is on
// with appendfsync always, again every aofRecheck.
func (s *rstore) ready(ctx context.Context, c *redis.Client, n *nodeState) error {
	// One caller at a time reads the server; the others wait for it no
	// longer than their own deadline (BoundByContext).
	select {
	case n.lock <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the server's durability check: %w", ctx.Err())
	}
	defer func() { <-n.lock }()
	if m := s.durability.Mode; m != DurableDisk && m != DurableReplicas {
		return fmt.Errorf("unknown durability mode %v", m)
	}
	if n.version[0] == 0 {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("read the server's version (INFO server): %w", err)
		}
		v, ok := parseVersion(infoField(info, "redis_version"))
		if !ok {
			return fmt.Errorf("read the server's version: no redis_version in INFO server")
		}
		n.version = v
	}
	if s.durability.Mode != DurableDisk || n.waitAOF() {
		return nil
	}
	// A good verdict holds for aofRecheck; a bad one for a second, so that
	// claims resume soon after the configuration is fixed.
	if !n.checked.IsZero() && (n.checkErr == nil && time.Since(n.checked) < aofRecheck ||
		n.checkErr != nil && time.Since(n.checked) < time.Second) {
		return n.checkErr
	}
	err := checkAOFAlways(ctx, c)
	var v verdict
	if err != nil && !errors.As(err, &v) {
		return err // the server didn't answer: no verdict to keep
	}
	n.checkErr, n.checked = err, time.Now()
	return err
}

// verdict is what checkAOFAlways found wrong with a server's settings (as
// opposed to not reaching it).
type verdict string

func (v verdict) Error() string { return string(v) }

// checkAOFAlways verifies that the server fsyncs its AOF before each reply.
func checkAOFAlways(ctx context.Context, c redis.Cmdable) error {
	pipe := c.Pipeline()
	cfg := pipe.ConfigGet(ctx, "appendfsync")
	inf := pipe.Info(ctx, "persistence")
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("verify appendfsync always (CONFIG GET, INFO persistence): %w", err)
	}
	info := inf.Val()
	if infoField(info, "aof_enabled") != "1" {
		return verdict("AOF is off (appendonly no): a claim is not on disk before the action runs")
	}
	if st := infoField(info, "aof_last_write_status"); st != "" && st != "ok" {
		return verdict(fmt.Sprintf("the AOF's last write failed (aof_last_write_status %s)", st))
	}
	if p := cfg.Val()["appendfsync"]; p != "always" {
		return verdict(fmt.Sprintf("appendfsync is %q, not always: before Redis 7.2 (no WAITAOF) only always puts a claim on disk before the reply", p))
	}
	return nil
}

// parseVersion reads "7.0.15" as {7, 0}.
func parseVersion(v string) ([2]int, bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major <= 0 {
		return [2]int{}, false
	}
	return [2]int{major, minor}, true
}

// infoField returns a field of an INFO reply ("" when absent).
func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), name+":"); ok {
			return v
		}
	}
	return ""
}

// nodeFor returns the client of the server that owns key: the client itself,
// or the Cluster master of key's slot.
func (s *rstore) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.client.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("durability %s needs a *redis.Client or *redis.ClusterClient, not %T (or choose DurableNone)", s.durability.Mode, s.client)
}

// takeDurable runs take.lua once the server is ready for the durability
// chosen and, when it claims, confirms the claim (confirm: one more round
// trip, on the claim path only; none with DurableDisk before Redis 7.2,
// where the reply itself is the confirmation).
func (s *rstore) takeDurable(ctx context.Context, keys []string, args []any, owner store.Owner, mark startMark) ([]string, error) {
	var v []string
	var err error
	for attempt := range 2 {
		v, err = s.takeOnce(ctx, keys, args, mark)
		if err == nil || attempt == 1 || !movedErr(err) {
			break
		}
		// The slot moved (a failover, a resharding): the script did not run.
		// Reload the Cluster's map and try the new owner once.
		if cc, ok := s.client.(*redis.ClusterClient); ok {
			cc.ReloadState(ctx)
		}
	}
	if err != nil {
		if errors.Is(err, errNotConfirmed) {
			s.releaseAfter(ctx, owner, mark.token, mark.at)
			return nil, fmt.Errorf("%w: %w", errNotDurable, err)
		}
		return nil, err
	}
	return v, nil
}

// errNotConfirmed is a claim whose durability was not confirmed.
var errNotConfirmed = errors.New("durability not confirmed")

func movedErr(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ") ||
		strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "CLUSTERDOWN")
}

func (s *rstore) takeOnce(ctx context.Context, keys []string, args []any, mark startMark) ([]string, error) {
	node, err := s.nodeFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	n := s.node(node.Options().Addr)
	if err := s.ready(ctx, node, n); err != nil {
		// Nothing was claimed: fail closed before the script runs.
		return nil, fmt.Errorf("%w: %s durability: %w", errNotDurable, s.durability.Mode, err)
	}
	// The step shares round trips (Options.Pipelines) whatever the
	// durability: a claim is confirmed after it, on a connection of its
	// own.
	v, err := s.run(ctx, node, takeStep, keys, args...).StringSlice()
	if err != nil || len(v) == 0 || v[0] != "claim" {
		return v, err
	}
	mark = mark.of(v)
	if s.durability.Mode != DurableReplicas && !n.waitAOF() || s.confirmedAlone(ctx, node, n) {
		// Disk before Redis 7.2, with appendfsync always (verified by
		// ready): Redis wrote and fsynced the AOF before it sent the reply
		// just read. The start mark is a step of its own (start.go).
		return v, s.startOne(ctx, node, mark)
	}
	// Claims made at the same moment share one confirmation (confirmer),
	// fused with their start marks.
	cctx, sp := spans.Start(ctx, "opsgate.redis.confirm", spans.Labels{Step: "take"})
	err = n.confirms.confirm(cctx, mark, func(ctx context.Context, marks []startMark) ([]bool, error) { return s.confirm(ctx, node, marks) })
	sp.End(spans.Labels{}, err)
	if err != nil {
		if s.durability.Mode == DurableReplicas && errors.Is(err, errNotConfirmed) {
			n.alone.fellShort() // alone.go
		}
		if !errors.Is(err, errNotConfirmed) && !errors.Is(err, errNotStarted) {
			// The claim's own deadline ended while it waited for its round.
			err = fmt.Errorf("%w: %w", errNotConfirmed, err)
		}
		return nil, err
	}
	return v, nil
}

// confirm writes the start marks of claims just made (start.lua, one per
// claim: started[i] says whether marks[i] found its claim still held) and
// waits until they are on Options.Replicas replicas (WAIT) or on the
// server's disk (WAITAOF, Redis 7.2 and later). Both wait for the last
// write of their own connection, which did not make the claims: the marks
// are that write, in the claims' slots. Redis replicates and appends to
// the AOF in order, and the marks were written after the claims' replies
// arrived, so a confirmed mark confirms its claim too. Marks and wait are
// one round trip.
func (s *rstore) confirm(ctx context.Context, node *redis.Client, marks []startMark) ([]bool, error) {
	d := s.durability
	conn := node.Conn()
	defer conn.Close()
	var wait *redis.Cmd
	started, err := s.startMarks(ctx, conn, node, marks, func(p redis.Pipeliner) {
		if d.Mode == DurableReplicas {
			wait = p.Do(ctx, "WAIT", d.replicas(), d.timeout().Milliseconds())
		} else {
			wait = p.Do(ctx, "WAITAOF", 1, 0, d.timeout().Milliseconds())
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotConfirmed, err)
	}
	if d.Mode == DurableReplicas {
		got, err := wait.Int64()
		if err != nil {
			return nil, fmt.Errorf("%w: WAIT: %w", errNotConfirmed, err)
		}
		if got < int64(d.replicas()) {
			return nil, fmt.Errorf("%w: %d of %d replicas acknowledged the claim within %v", errNotConfirmed, got, d.replicas(), d.timeout())
		}
		return started, nil
	}
	r, err := wait.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: WAITAOF: %w", errNotConfirmed, err)
	}
	if len(r) < 1 || r[0] < 1 {
		return nil, fmt.Errorf("%w: the claim was not fsynced to the AOF within %v", errNotConfirmed, d.timeout())
	}
	return started, nil
}

// releaseAfter releases a claim whose durability was not confirmed, so
// that nothing is performed for it and its approval applies to the next
// request (W144). It runs before Take returns while the caller's deadline
// leaves time for it (the caller's context may be cancelled: a fresh one
// with that deadline), and in the background otherwise, so that Take
// still returns by its deadline (BoundByContext); the Gate releases again
// if this fails.
func (s *rstore) releaseAfter(ctx context.Context, owner store.Owner, token string, now time.Time) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second)
	}
	if time.Until(deadline) > releaseAtLeast {
		ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		if _, err := s.Release(ctx, owner, token, now); err == nil {
			return
		}
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = s.Release(ctx, owner, token, now)
	}()
}

// releaseAtLeast is the least time left before the caller's deadline in
// which releaseAfter releases before Take returns.
const releaseAtLeast = 20 * time.Millisecond

// Check reads what each server (every Cluster master) can promise and
// returns an error that names the risk when the chosen durability can't
// hold (webkit/RULES.md "Durability"): AOF off, appendfsync not always before Redis
// 7.2, fewer replicas connected than DurableReplicas needs, an AOF that
// failed to write, or a server that isn't Redis at all (miniredis, a demo
// store), and a Cluster client that would notice a failover late (see
// ClusterOptions), and a server that may evict keys (any maxmemory-policy
// but noeviction: the error names the fix). With DurableNone it returns an error naming that risk too, so
// call it at start-up, and refuse to start or log the error loudly. With
// DurableServer it takes a server that refuses CONFIG (a managed one) at
// the operator's word, and refuses one that shows it doesn't persist each
// write before replying.
func (st *Store) Check(ctx context.Context) error {
	return st.s.check(ctx)
}

// check is Check for this store.
func (s *rstore) check(ctx context.Context) error {
	nodes, err := s.masters(ctx)
	if err != nil {
		return fmt.Errorf("redisstore: check: %w", err)
	}
	var errs []error
	for _, node := range nodes {
		if err := s.checkNode(ctx, node); err != nil {
			errs = append(errs, err)
		}
		if err := checkEviction(ctx, node); err != nil {
			errs = append(errs, err)
		}
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		if iv := cc.Options().ClusterStateReloadInterval; iv > maxClusterReload {
			errs = append(errs, fmt.Errorf("the Cluster client refreshes its slot map every %v: after a failover, the users of a dead master's slots get 503 for up to that long; build the client from redisstore.ClusterOptions", iv))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("redisstore: check (durability %s): %w", s.durability.Mode, errors.Join(errs...))
	}
	return nil
}

// checkEviction refuses a server that may evict keys: with any
// maxmemory-policy but noeviction, a full Redis drops keys it still needs
// (a claim, an approval's use, a performed operation, a replay marker),
// so an approval could perform twice or a jti verify twice. With
// noeviction a full Redis refuses writes instead, and the kit fails
// closed (503). It reads INFO memory, which managed servers answer too.
func checkEviction(ctx context.Context, node redis.Cmdable) error {
	addr := "redis"
	if c, ok := node.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	info, err := node.Info(ctx, "memory").Result()
	if err != nil {
		return nil // no INFO at all: checkNode refuses the server already
	}
	switch policy := infoField(info, "maxmemory_policy"); policy {
	case "noeviction":
		return nil
	case "":
		return fmt.Errorf("%s: INFO memory names no maxmemory_policy, so can't tell whether it evicts keys: the store needs maxmemory-policy noeviction", addr)
	default:
		return fmt.Errorf("%s: maxmemory-policy is %s: a full Redis then evicts keys the store still needs (a claim, an approval's use, a performed operation, a replay marker), and an approval can be performed twice; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf or your provider's parameter group), with maxmemory large enough (webkit/DEPLOYING.md, \"Redis sizing\")", addr, policy)
	}
}

func (s *rstore) checkNode(ctx context.Context, node redis.Cmdable) error {
	addr := "redis"
	if c, ok := node.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("%s: can't read INFO server (%v): not a Redis server that can promise anything; miniredis is a demo store that forgets everything when it stops", addr, err)
	}
	v, ok := parseVersion(infoField(info, "redis_version"))
	if !ok {
		return fmt.Errorf("%s: no redis_version in INFO server", addr)
	}
	if v[0] < 7 {
		// The steps use PEXPIRE … GT/NX and SET … NX GET (Redis 7.0).
		return fmt.Errorf("%s: Redis %d.%d: the store needs Redis 7.0 or later; its steps fail on this server", addr, v[0], v[1])
	}
	pers, err := node.Info(ctx, "persistence").Result()
	if err != nil {
		return fmt.Errorf("%s: INFO persistence: %w", addr, err)
	}
	repl, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("%s: INFO replication: %w", addr, err)
	}
	aof := infoField(pers, "aof_enabled") == "1"
	slaves, _ := strconv.Atoi(infoField(repl, "connected_slaves"))
	switch s.durability.Mode {
	default:
		return fmt.Errorf("%s: unknown durability mode %v: choose DurableDisk, DurableReplicas, DurableServer or DurableNone", addr, s.durability.Mode)
	case DurableServer:
		// A managed server (MemoryDB) refuses CONFIG: its promise can't be
		// read, and choosing the mode is the operator's word for it. A
		// server that answers shows whether it keeps it.
		if _, err := node.ConfigGet(ctx, "appendfsync").Result(); err != nil {
			return nil
		}
		if err := checkAOFAlways(ctx, node); err != nil {
			return fmt.Errorf("%s: durability server, but this server shows it doesn't persist each write before it replies (%w): a restart loses recent claims and can perform an approval twice; choose DurableDisk or DurableReplicas (DurableServer is for a server such as MemoryDB)", addr, err)
		}
	case DurableNone:
		risk := "durability none: a restart from an older snapshot, an AOF cut back by an OS crash, or a failover to a replica that lagged can perform an approval a second time"
		if !aof {
			risk += "; AOF is off, so a restart loses every claim since the last snapshot"
		}
		return fmt.Errorf("%s: %s", addr, risk)
	case DurableReplicas:
		if slaves < s.durability.replicas() {
			msg := "every claim fails closed (503) until they are"
			if _, ok := s.client.(*redis.ClusterClient); ok {
				msg += ", unless the Cluster knows no replica of this master: then its disk confirms claims alone (appendfsync always)"
			}
			return fmt.Errorf("%s: %d replicas connected, durability needs %d: %s", addr, slaves, s.durability.replicas(), msg)
		}
		// A master restarted without a failover comes back with what it
		// persisted, and its replicas resync from it: only a master that
		// fsyncs each write before it replies keeps every claim (the
		// fault run TestReplicasMasterRestart; package doc, Durability).
		if err := checkAOFAlways(ctx, node); err != nil {
			return fmt.Errorf("%s: the master doesn't persist each write before it replies (%w): restarted without a failover (a crash, a reboot) it comes back older, its replicas resync from it, and an approval performed since its last save can perform again; set appendonly yes with appendfsync always on every master", addr, err)
		}
	case DurableDisk:
		if !aof {
			return fmt.Errorf("%s: AOF is off (appendonly no): a claim can't reach disk, so every claim fails closed (503); turn AOF on with appendfsync always, or choose DurableReplicas", addr)
		}
		if st := infoField(pers, "aof_last_write_status"); st != "" && st != "ok" {
			return fmt.Errorf("%s: the AOF's last write failed (aof_last_write_status %s): claims fail closed", addr, st)
		}
		n := &nodeState{version: v}
		if !n.waitAOF() {
			c, ok := node.(*redis.Client)
			if !ok {
				return fmt.Errorf("%s: can't verify appendfsync", addr)
			}
			if err := checkAOFAlways(ctx, c); err != nil {
				return fmt.Errorf("%s (Redis %d.%d): %w: every claim fails closed (503); set appendfsync always, or use Redis 7.2 or later", addr, v[0], v[1], err)
			}
		}
	}
	return nil
}

// errNotDurable is returned (wrapped) by Take when the store could not
// confirm in time that its claim is durable (on disk, or on enough
// replicas). The claim has been released: nothing may be performed, and
// the Gate answers 503 with Retry-After, as for a store that is down.
var errNotDurable = errors.New("redisstore: claim not confirmed durable")

// confirmFinish waits until the Finish just run on the operation at key is
// on Options.Replicas replicas (WAIT), or on the server's disk (WAITAOF,
// Redis 7.2 and later), as takeOnce confirms a claim: a write of its own
// in the operation's slot, after the Finish's reply, and a wait for it on
// the same connection. Redis replicates and appends in order, so the
// write confirmed confirms the Finish. With DurableDisk before Redis 7.2
// (appendfsync always) the Finish's reply was the confirmation; with
// DurableNone and DurableServer nothing is waited for.
func (s *rstore) confirmFinish(ctx context.Context, key string) error {
	d := s.durability
	if d.Mode != DurableReplicas && d.Mode != DurableDisk {
		return nil
	}
	node, err := s.nodeFor(ctx, key)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotConfirmed, err)
	}
	n := s.node(node.Options().Addr)
	if d.Mode == DurableDisk && !n.waitAOF() {
		return nil
	}
	conn := node.Conn()
	defer conn.Close()
	var wait *redis.Cmd
	_, err = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key+":finished", "1", time.Second)
		if d.Mode == DurableReplicas {
			wait = p.Do(ctx, "WAIT", d.replicas(), d.timeout().Milliseconds())
		} else {
			wait = p.Do(ctx, "WAITAOF", 1, 0, d.timeout().Milliseconds())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errNotConfirmed, err)
	}
	if d.Mode == DurableReplicas {
		got, err := wait.Int64()
		switch {
		case err != nil:
			return fmt.Errorf("%w: WAIT: %w", errNotConfirmed, err)
		case got < int64(d.replicas()) && !s.confirmedAlone(ctx, node, n):
			n.alone.fellShort()
			return fmt.Errorf("%w: %d of %d replicas acknowledged the finish within %v", errNotConfirmed, got, d.replicas(), d.timeout())
		}
		return nil
	}
	r, err := wait.Int64Slice()
	if err != nil {
		return fmt.Errorf("%w: WAITAOF: %w", errNotConfirmed, err)
	}
	if len(r) < 1 || r[0] < 1 {
		return fmt.Errorf("%w: the finish was not fsynced to the AOF within %v", errNotConfirmed, d.timeout())
	}
	return nil
}
