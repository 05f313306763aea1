package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// restartRun is one fault run of DurableReplicas{Replicas: 1} on a master
// and a replica: n approvals are recorded and snapshotted (BGSAVE), and
// the server's files are kept aside, all n are performed (Take, confirmed by WAIT, then
// Finish), and the master is SIGKILLed and started again, without a
// failover, from what it persisted, or from the backup taken before the
// claims: its RDB and its AOF, as a backup or a disk that lost its last
// writes would bring back). The replica resyncs from the restarted master. Then every
// approval is tried again for up to 10 s: each claim now is a second
// performance.
type restartRun struct {
	name       string
	masterArgs []string
	restore    bool // start the master from the backup, not from what it persisted
}

type restartResult struct {
	checkErr error // Check before the fault
	doubles  int   // approvals performed twice
	runIDs   [2]string
	offsets  [2]string // master_repl_offset before the kill, after the restart
}

func (r restartRun) run(t *testing.T, n int) restartResult {
	t.Helper()
	master, err := redistest.StartArgs(t, r.masterArgs...)
	if err != nil {
		t.Fatal(err)
	}
	redistest.Replica(t, master)
	mc := master.Client(t)
	st := redisstore.New(mc, redisstore.Options{Durability: redisstore.DurableReplicas, Replicas: 1, DurabilityTimeout: time.Second})
	var res restartResult
	res.checkErr = st.Check(t.Context())

	actions := make([]storedriver.TakeRequest, n)
	for i := range n {
		actions[i], _ = approvedAction(t, st, fmt.Sprint(r.name, i))
	}
	// The backup: a snapshot of the approvals, before any claim.
	// The replica's full sync may be saving already: wait for it, and
	// save again, so that the snapshot holds the approvals.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := mc.BgSave(t.Context()).Err()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "already in progress") || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	waitBgsave(t, mc)
	backup := t.TempDir()
	copyDir(t, master.Dir(), backup)

	for i, a := range actions {
		res, err := storedriver.Steps(st).Take(t.Context(), owner, a, at(time.Second))
		if err != nil || res.Claim == nil {
			t.Fatalf("%s: first Take %d: %+v, %v", r.name, i, res, err)
		}
		if err := storedriver.Steps(st).Finish(t.Context(), *res.Claim, store.OutcomePerformed, at(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	info := mc.Info(t.Context(), "server", "replication").Val()
	res.runIDs[0], res.offsets[0] = redisstore.InfoField(info, "run_id"), redisstore.InfoField(info, "master_repl_offset")

	master.Kill()
	if r.restore {
		_ = os.RemoveAll(filepath.Join(master.Dir(), "appendonlydir"))
		copyDir(t, backup, master.Dir())
	}
	if err := master.Restart(); err != nil {
		t.Fatal(err)
	}
	info = mc.Info(t.Context(), "server", "replication").Val()
	res.runIDs[1], res.offsets[1] = redisstore.InfoField(info, "run_id"), redisstore.InfoField(info, "master_repl_offset")

	// Every approval again, each retried while the replica resyncs (Take
	// fails closed meanwhile), until it claims or is refused for good.
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range actions {
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			got, err := storedriver.Steps(st).Take(ctx, owner, a, at(2*time.Second))
			cancel()
			if err == nil && got.Claim != nil {
				res.doubles++
				_ = storedriver.Steps(st).Finish(t.Context(), *got.Claim, store.OutcomePerformed, at(2*time.Second))
				break
			}
			if err == nil || time.Now().After(deadline) {
				break // nothing to claim: performed once
			}
			time.Sleep(50 * time.Millisecond) // a 503: the Gate's client would repeat
		}
	}
	return res
}

func waitBgsave(t *testing.T, c *redis.Client) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info := c.Info(t.Context(), "persistence").Val()
		if redisstore.InfoField(info, "rdb_bgsave_in_progress") == "0" && redisstore.InfoField(info, "rdb_last_bgsave_status") == "ok" &&
			!strings.Contains(info, "rdb_changes_since_last_save:") || redisstore.InfoField(info, "rdb_bgsave_in_progress") == "0" && redisstore.InfoField(info, "rdb_changes_since_last_save") == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("BGSAVE never finished: %q", info)
		}
	}
}

// copyDir copies a server's persistence (dump.rdb, appendonlydir) from
// one directory to another.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	copyFile(t, filepath.Join(from, "dump.rdb"), filepath.Join(to, "dump.rdb"))
	aofs, _ := os.ReadDir(filepath.Join(from, "appendonlydir"))
	if len(aofs) > 0 {
		if err := os.MkdirAll(filepath.Join(to, "appendonlydir"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range aofs {
		copyFile(t, filepath.Join(from, "appendonlydir", f.Name()), filepath.Join(to, "appendonlydir", f.Name()))
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// DurableReplicas through a restart of the master without a failover
// (webkit/RULES.md "Durability"): a master that snapshots (RDB, Redis's
// default) comes back older, its replica resyncs from it, and every
// approval performed since the snapshot performs again; Check must say so
// before the fault. A master with appendfsync always comes back with every
// claim: no second performance, and Check says ok. A backup restored from
// before the claims doubles whatever the settings: Check can't see that
// coming, and the package doc says it is outside what any mode promises.
func TestReplicasMasterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: kills and restarts a master with a replica")
	}
	const n = 20
	for _, r := range []struct {
		restartRun
		wantCheckOK, wantDoubles bool
	}{
		{restartRun{name: "RDB", masterArgs: []string{"--appendonly", "no"}}, false, true},
		{restartRun{name: "AOF always", masterArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}}, true, false},
		{restartRun{name: "AOF always, backup restored", masterArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}, restore: true}, true, true},
	} {
		t.Run(r.name, func(t *testing.T) {
			res := r.run(t, n)
			t.Logf("%s: %d of %d approvals performed twice; Check before: %v; run_id %.8s → %.8s, offset %s → %s",
				r.name, res.doubles, n, res.checkErr, res.runIDs[0], res.runIDs[1], res.offsets[0], res.offsets[1])
			if ok := res.checkErr == nil; ok != r.wantCheckOK {
				t.Errorf("Check: %v, want ok %v", res.checkErr, r.wantCheckOK)
			}
			if res.checkErr == nil && res.doubles > 0 && !r.restore {
				t.Errorf("Check said ok for a setup that performed %d approvals twice", res.doubles)
			}
			if (res.doubles > 0) != r.wantDoubles {
				t.Errorf("%d doubles, want some: %v", res.doubles, r.wantDoubles)
			}
		})
	}
}
