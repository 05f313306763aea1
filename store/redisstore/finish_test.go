package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// entriesOf is operation id's audit entries by what they say.
func entriesOf(t *testing.T, st store.Store, id string) map[string]store.Entry {
	t.Helper()
	out := map[string]store.Entry{}
	for e, err := range st.Entries(t.Context(), id, time.Time{}, at(time.Hour)) {
		if err != nil {
			t.Fatal(err)
		}
		out[e.What] = e
	}
	return out
}

// TestEntryOfWhatIsStored: the entry of Finish says what the store
// holds, however the claim came (as Take returned it, slimmed as the Gate
// retries a Finish, or altered), as the claim's own does; and an
// operation's log keeps what its entries share once (audit.go): the
// revision's name appears in it once, whatever the outcome.
func TestEntryOfWhatIsStored(t *testing.T) {
	t.Parallel()
	st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone})
	ctx := t.Context()
	logOf := func(id string) string {
		t.Helper()
		v, err := c.Get(ctx, "opsgate:{"+storekit.Slot(owner.Agent, owner.User)+"}:lg:"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	claims := map[string]func(store.Claim) store.Claim{
		"as taken": func(c store.Claim) store.Claim { return c },
		"slimmed": func(c store.Claim) store.Claim {
			return store.Claim{Owner: c.Owner, Operation: store.Operation{ID: c.Operation.ID, Revision: c.Operation.Revision}, Token: c.Token}
		},
		"altered": func(c store.Claim) store.Claim {
			c.Operation.Summary, c.Operation.ExpiresAt = "Something else", c.Operation.ExpiresAt.Add(time.Minute)
			c.Approval.Approver, c.Approval.UsedAt = "someone else", c.Approval.UsedAt.Add(time.Second)
			return c
		},
	}
	n := 0
	for _, kind := range []string{"computed", "stored"} {
		for name, claimOf := range claims {
			for _, out := range []store.Outcome{store.OutcomePerformed, store.OutcomeNotPerformed, store.OutcomeUnknown} {
				t.Run(fmt.Sprint(kind, "/", name, "/", out), func(t *testing.T) {
					n++
					a := action(fmt.Sprint("entry", n), `{"n":1,"note":"a \"quoted\" <b>&</b>"}`, time.Hour)
					a.Summary = "Do \"it\" <now> \\ é"
					if kind == "stored" {
						a = storedAction(fmt.Sprint("entry", n), `{"n":1}`, time.Hour)
					}
					is := takeIssued(t, st, a, at(0))
					recordOK(t, st, is, at(time.Second))
					claim := takeClaim(t, st, a, at(2*time.Second))
					id, rev := claim.Operation.ID, claim.Operation.Revision
					if err := storedriver.Steps(st).Finish(ctx, claimOf(claim), out, at(3*time.Second)); err != nil {
						t.Fatal(err)
					}
					what := map[store.Outcome]string{store.OutcomePerformed: storekit.EntryPerformed, store.OutcomeNotPerformed: storekit.EntryNotPerformed, store.OutcomeUnknown: storekit.EntryUnknown}[out]
					es := entriesOf(t, st, id)
					rec, claimed, fin := es[storekit.EntryRecorded], es[storekit.EntryClaimed], es[what]
					if fin.ID == "" || claimed.ID == "" || rec.ID == "" {
						t.Fatalf("entries %v, want recorded, claimed and %s", es, what)
					}
					op := claimed.Operation
					if op.ID != id || op.Revision != rev || op.Summary != is.Operation.Summary || !op.ExpiresAt.Equal(is.Operation.ExpiresAt) {
						t.Errorf("claimed entry's operation %+v, want the claim's %+v", op, claim.Operation)
					}
					if fin.Operation.ID != op.ID || fin.Operation.Revision != op.Revision || fin.Operation.Summary != op.Summary || !fin.Operation.ExpiresAt.Equal(op.ExpiresAt) {
						t.Errorf("%s entry's operation %+v, want the claimed one's %+v", what, fin.Operation, op)
					}
					if fin.TermsDigest != claimed.TermsDigest || fin.TermsDigest == "" {
						t.Errorf("%s entry's terms digest %q, want the claimed one's %q", what, fin.TermsDigest, claimed.TermsDigest)
					}
					if fin.Approval != claimed.Approval || fin.Approval.UsedAt.IsZero() || fin.Approval.Approver != "user" {
						t.Errorf("%s entry's approval %+v, want the claimed one's %+v", what, fin.Approval, claimed.Approval)
					}
					if r := rec.Approval; r.OperationID != id || r.Revision != rev || r.Approver != "user" || !r.RecordedAt.Equal(at(time.Second)) || !r.UsedAt.IsZero() {
						t.Errorf("recorded entry's approval %+v", r)
					}
					if r := rec.Operation; r.ID != op.ID || r.Revision != op.Revision || r.Summary != op.Summary || !r.ExpiresAt.Equal(op.ExpiresAt) || rec.TermsDigest != claimed.TermsDigest {
						t.Errorf("recorded entry's operation %+v (terms %s), want %+v (%s)", rec.Operation, rec.TermsDigest, op, claimed.TermsDigest)
					}
					if log := logOf(id); strings.Count(log, rev) != 1 || strings.Count(log, "\n") != 4 {
						t.Errorf("log %q: want 3 entries naming revision %s once", log, rev)
					}
				})
			}
		}
	}
}

// TestFinishAnEarlierClaim: a claim made before claims took their
// operation off the owner's count of open operations (before the start
// mark, st, came) leaves it there; Finish takes it off, and a claim made
// since costs Finish no ZREM.
func TestFinishAnEarlierClaim(t *testing.T) {
	t.Parallel()
	// Without the agent's count, whose ZREM Finish makes in any case.
	st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone, MaxOpenPerAgent: -1})
	ctx := t.Context()
	base := "opsgate:{" + storekit.Slot(owner.Agent, owner.User) + "}:"
	for i, earlier := range []bool{true, false} {
		a := action(fmt.Sprint("earlier", i), `{}`, time.Hour)
		is := takeIssued(t, st, a, at(0))
		recordOK(t, st, is, at(time.Second))
		claim := takeClaim(t, st, a, at(2*time.Second))
		id := claim.Operation.ID
		if err := c.ZScore(ctx, base+"open", id).Err(); err == nil {
			t.Fatalf("a claimed operation counted among its owner's open ones")
		}
		if earlier {
			// As the earlier version's claim left it: no start mark, and
			// still counted.
			if err := c.HDel(ctx, base+"op:"+id, "st").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ZAdd(ctx, base+"open", redis.Z{Score: float64(at(time.Hour).UnixNano()), Member: id}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		before := commandCalls(t, c)["zrem"]
		if err := storedriver.Steps(st).Finish(ctx, claim, store.OutcomePerformed, at(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		if err := c.ZScore(ctx, base+"open", id).Err(); err == nil {
			t.Errorf("earlier %v: performed, still counted among its owner's open operations", earlier)
		}
		want := 1 // from its slot's index of performing operations
		if earlier {
			want = 2
		}
		if got := commandCalls(t, c)["zrem"] - before; got != want {
			t.Errorf("earlier %v: Finish made %d ZREMs, want %d", earlier, got, want)
		}
		if rec, found, err := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(4*time.Second)); err != nil || !found || rec.Status != storedriver.StatusPerformed {
			t.Errorf("earlier %v: Lookup %+v %v %v, want performed", earlier, rec, found, err)
		}
	}
}

// TestEntryKeptAsLongAsTheOperation: with an audit retention shorter than
// the operation is remembered, the log is kept until the operation's
// keep-until (its first line says so), and its key lives that long.
func TestEntryKeptAsLongAsTheOperation(t *testing.T) {
	t.Parallel()
	st, c := loadedStore(t, redisstore.Options{Durability: redisstore.DurableNone, AuditRetention: time.Minute})
	ctx := t.Context()
	base := "opsgate:{" + storekit.Slot(owner.Agent, owner.User) + "}:"
	a := action("long", `{}`, time.Hour)
	is := takeIssued(t, st, a, at(0))
	recordOK(t, st, is, at(time.Second))
	logged := func() string {
		t.Helper()
		log, err := c.Get(ctx, base+"lg:"+is.Operation.ID).Result()
		if err != nil {
			t.Fatal(err)
		}
		return log
	}
	// Recorded: kept until the revision's expires_at.
	if log := logged(); !strings.HasPrefix(log, fmt.Sprint("1:", is.Operation.ExpiresAt.UnixNano(), "\n")) {
		t.Errorf("log after the approval %q: want it kept until the revision's expires_at", log)
	}
	claim := takeClaim(t, st, a, at(2*time.Second))
	id := claim.Operation.ID
	if err := storedriver.Steps(st).Finish(ctx, claim, store.OutcomePerformed, at(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	k, err := c.HGet(ctx, base+"op:"+id, "k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if log := logged(); !strings.HasPrefix(log, "1:"+k+"\n") || strings.Count(log, "\n") != 4 {
		t.Errorf("log %q: want 3 entries kept until the operation's keep-until %s", log, k)
	}
	if ttl := c.PTTL(ctx, base+"lg:"+id).Val(); ttl < time.Hour {
		t.Errorf("the log's TTL %v, want the operation's (over an hour)", ttl)
	}
	if es := entriesOf(t, st, id); len(es) != 3 {
		t.Errorf("entries %v, want 3", es)
	}
}
