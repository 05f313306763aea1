package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// computedStore is a store on miniredis, with its client and clock
// control.
func computedStore(t *testing.T, opts redisstore.Options) (store.Store, *redis.Client, func(time.Duration)) {
	mr, c := redistest.Mini(t)
	opts.Durability = redisstore.DurableNone
	return redisstore.New(c, opts), c, mr.FastForward
}

func TestComputed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	mustTake := func(t *testing.T, st store.Store, o store.Owner, a storedriver.TakeRequest, now time.Time) storedriver.TakeResult {
		t.Helper()
		r, err := storedriver.Steps(st).Take(ctx, o, a, now)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	issued := func(t *testing.T, st store.Store, o store.Owner, a storedriver.TakeRequest, now time.Time) storedriver.TakeResult {
		t.Helper()
		r := mustTake(t, st, o, a, now)
		if r.Ref == "" {
			t.Fatalf("Take: %+v, want an operation issued", r)
		}
		return r
	}
	record := func(t *testing.T, st store.Store, o store.Owner, is storedriver.TakeResult, now time.Time) storedriver.RecordResult {
		t.Helper()
		rep, err := storedriver.Steps(st).Record(ctx, o, is.Ref, approval(is), now, storedriver.RecordOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Result
	}

	t.Run("W19 W21 a 403 stores nothing, and a repeated request keeps its operation_id", func(t *testing.T) {
		st, c, _ := computedStore(t, redisstore.Options{})
		first := issued(t, st, owner, action("k", `{"v":1}`, 10*time.Minute), at(0))
		keys, _ := c.Keys(ctx, "*").Result()
		for range 50 {
			issued(t, st, owner, action("k", `{"v":1}`, 10*time.Minute), at(time.Second))
		}
		again := issued(t, st, owner, action("k", `{"v":2}`, 10*time.Minute), at(2*time.Second))
		other := issued(t, st, owner, action("other", `{"v":1}`, 10*time.Minute), at(2*time.Second))
		otherUser := issued(t, st, store.Owner{Agent: owner.Agent, User: "user-2", Account: owner.Account}, action("k", `{"v":1}`, 10*time.Minute), at(2*time.Second))
		after, _ := c.Keys(ctx, "*").Result()
		if len(keys) != 1 || len(after) != 1 {
			t.Errorf("keys after the 403s: %v then %v, want only the seal key", keys, after)
		}
		if again.Operation.ID != first.Operation.ID || again.Operation.Revision == first.Operation.Revision {
			t.Errorf("W19 W20: %+v then %+v, want the same operation_id and another revision", first.Operation, again.Operation)
		}
		if other.Operation.ID == first.Operation.ID || otherUser.Operation.ID == first.Operation.ID {
			t.Errorf("W21: another action or User shares operation_id %s", first.Operation.ID)
		}
		if !storekit.ValidID(first.Operation.ID) || !storekit.ValidID(first.Operation.Revision) || !storekit.ValidRef(first.Ref) {
			t.Errorf("W22 W23 W59: %+v", first)
		}
	})

	t.Run("W74 a ref altered, or sent by another owner, is not found and stores nothing", func(t *testing.T) {
		st, c, _ := computedStore(t, redisstore.Options{})
		is := issued(t, st, owner, action("k", `{"v":1}`, 10*time.Minute), at(0))
		id, rev, _ := storekit.SplitRef(is.Ref)
		sealed := is.Ref[len(id)+1+len(rev)+1:]
		flip := []byte(sealed)
		if mid := len(flip) / 2; flip[mid] == 'A' {
			flip[mid] = 'B'
		} else {
			flip[mid] = 'A'
		}
		other := issued(t, st, owner, action("k2", `{"v":1}`, 10*time.Minute), at(0))
		_, otherRev, _ := storekit.SplitRef(other.Ref)
		for name, ref := range map[string]string{
			"sealed part changed":        id + "." + rev + "." + string(flip),
			"another revision named":     id + "." + otherRev + "." + sealed,
			"another operation named":    "op_AAAAAAAAAAAAAAAAAAAA." + rev + "." + sealed,
			"no sealed part":             id + "." + rev,
			"sealed part of another ref": id + "." + rev + "." + other.Ref[strings.LastIndexByte(other.Ref, '.')+1:],
		} {
			if _, found, err := storedriver.Steps(st).Lookup(ctx, owner, ref, at(time.Second)); err != nil || found {
				t.Errorf("%s: Lookup found %v, %v", name, found, err)
			}
			if got := record(t, st, owner, storedriver.TakeResult{Operation: is.Operation, Ref: ref}, at(time.Second)); got != storedriver.NotFound {
				t.Errorf("%s: Record %v, want not found", name, got)
			}
		}
		for _, o := range []store.Owner{{Agent: "agent-b", User: owner.User, Account: owner.Account}, {Agent: owner.Agent, User: "user-2", Account: owner.Account}} {
			if _, found, _ := storedriver.Steps(st).Lookup(ctx, o, is.Ref, at(time.Second)); found {
				t.Errorf("W76 another owner %+v finds it", o)
			}
			if got := record(t, st, o, is, at(time.Second)); got != storedriver.NotFound {
				t.Errorf("W45 another owner %+v: Record %v, want not found", o, got)
			}
		}
		if n, _ := c.DBSize(ctx).Result(); n != 1 {
			t.Errorf("%d keys, want only the seal key", n)
		}
	})

	t.Run("W105 W95 the first approval stores it; then it is claimed once and performed", func(t *testing.T) {
		st, _, _ := computedStore(t, redisstore.Options{})
		a := action("k", `{"v":1}`, 10*time.Minute)
		is := issued(t, st, owner, a, at(0))
		rec, found, err := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(time.Second))
		if err != nil || !found || rec.Status != storedriver.StatusWaiting || rec.Current.Revision != is.Operation.Revision || string(rec.Current.Terms) != `{"v":1}` || rec.Owner.Account != owner.Account {
			t.Fatalf("Lookup before the approval: %+v %v %v", rec, found, err)
		}
		// A signed-out Session meets the account's operation (W44).
		signedOut := store.Owner{Agent: owner.Agent, User: owner.User}
		if got := record(t, st, signedOut, is, at(time.Second)); got != storedriver.SignInRequired {
			t.Errorf("W44: %v", got)
		}
		if got := record(t, st, owner, is, at(2*time.Second)); got != storedriver.Recorded {
			t.Fatalf("Record: %v", got)
		}
		if got := record(t, st, owner, is, at(3*time.Second)); got != storedriver.AlreadyRecorded {
			t.Errorf("again: %v", got)
		}
		if rec, _, _ := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(3*time.Second)); rec.Status != storedriver.StatusApproved {
			t.Errorf("W106: %v", rec.Status)
		}
		r := mustTake(t, st, owner, a, at(4*time.Second))
		if r.Claim == nil || r.Claim.Operation.ID != is.Operation.ID || r.Claim.Operation.Revision != is.Operation.Revision {
			t.Fatalf("Take: %+v", r)
		}
		if r := mustTake(t, st, owner, a, at(5*time.Second)); !r.Busy {
			t.Errorf("W145 while performing: %+v", r)
		}
		if err := storedriver.Steps(st).Finish(ctx, *r.Claim, store.OutcomePerformed, at(6*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got := record(t, st, owner, is, at(7*time.Second)); got != storedriver.AlreadyPerformed {
			t.Errorf("W113: %v", got)
		}
		// W141: the next request is a new operation, however often it is
		// asked, and an approval of it performs it once more.
		next := issued(t, st, owner, a, at(8*time.Second))
		if next.Operation.ID == is.Operation.ID {
			t.Fatalf("W141: after performing, issued the performed operation %s", next.Operation.ID)
		}
	})

	t.Run("W141 a performed operation's id never comes back, however long after", func(t *testing.T) {
		retention := time.Hour
		st, _, ff := computedStore(t, redisstore.Options{Retention: retention})
		a := action("k", `{}`, 10*time.Minute)
		seen := map[string]bool{}
		now := at(0)
		for i := range 6 {
			is := issued(t, st, owner, a, now)
			if seen[is.Operation.ID] {
				t.Fatalf("round %d: operation_id %s again", i, is.Operation.ID)
			}
			seen[is.Operation.ID] = true
			if got := record(t, st, owner, is, now); got != storedriver.Recorded {
				t.Fatalf("round %d: Record %v", i, got)
			}
			r := mustTake(t, st, owner, a, now)
			if r.Claim == nil {
				t.Fatalf("round %d: Take %+v", i, r)
			}
			if err := storedriver.Steps(st).Finish(ctx, *r.Claim, store.OutcomePerformed, now); err != nil {
				t.Fatal(err)
			}
			// Every other round, wait until it is forgotten.
			step := time.Minute
			if i%2 == 1 {
				step = retention + 2*time.Minute
			}
			now = now.Add(step)
			ff(step)
		}
	})

	t.Run("the caps count operations when an approval stores them", func(t *testing.T) {
		st, _, _ := computedStore(t, redisstore.Options{MaxOpenPerOwner: 2, MaxOpenPerAgent: -1})
		var all []storedriver.TakeResult
		for i := range 3 {
			all = append(all, issued(t, st, owner, action(fmt.Sprint("k", i), `{}`, 10*time.Minute), at(0)))
		}
		for i, is := range all {
			want := storedriver.Recorded
			if i == 2 {
				want = storedriver.RateLimited
			}
			if got := record(t, st, owner, is, at(time.Second)); got != want {
				t.Errorf("approval %d: %v, want %v", i, got, want)
			}
		}
		// A stored one approved again is no new operation.
		if got := record(t, st, owner, all[0], at(2*time.Second)); got != storedriver.AlreadyRecorded {
			t.Errorf("again: %v", got)
		}
	})

	t.Run("W74 W101 an expired ref of an operation never stored is not found", func(t *testing.T) {
		st, _, _ := computedStore(t, redisstore.Options{})
		is := issued(t, st, owner, action("k", `{}`, time.Minute), at(0))
		if _, found, _ := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, is.Operation.ExpiresAt); !found {
			t.Errorf("W18 at expires_at: not found")
		}
		late := is.Operation.ExpiresAt.Add(time.Second)
		if _, found, _ := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, late); found {
			t.Errorf("after expires_at: found")
		}
		if got := record(t, st, owner, is, late); got != storedriver.NotFound {
			t.Errorf("after expires_at: Record %v", got)
		}
	})

	t.Run("a stale ref whose action has another live operation is not found", func(t *testing.T) {
		retention := time.Hour
		st, _, _ := computedStore(t, redisstore.Options{Retention: retention})
		a := action("k", `{}`, 5*time.Minute)
		// A ref computed in one epoch, then one in the next (at 20:00),
		// whose approval stores the action's operation.
		first := issued(t, st, owner, a, at(50*time.Minute))
		second := issued(t, st, owner, a, at(61*time.Minute))
		if second.Operation.ID == first.Operation.ID {
			t.Fatalf("one operation_id in two epochs: %s", first.Operation.ID)
		}
		if got := record(t, st, owner, second, at(62*time.Minute)); got != storedriver.Recorded {
			t.Fatalf("Record: %v", got)
		}
		// The first ref, sent by a server whose clock is behind, while it
		// is still within its lifetime there.
		if got := record(t, st, owner, first, first.Operation.ExpiresAt); got != storedriver.NotFound {
			t.Errorf("the other operation's ref: Record %v, want not found", got)
		}
		if _, found, _ := storedriver.Steps(st).Lookup(ctx, owner, first.Ref, first.Operation.ExpiresAt); found {
			t.Errorf("the other operation's ref: found")
		}
	})

	t.Run("W19 W20 at an epoch's turn the action keeps one operation_id (Retention 1h)", func(t *testing.T) {
		st, c, _ := computedStore(t, redisstore.Options{Retention: time.Hour})
		a := action("k", `{}`, 10*time.Minute)
		// 19:59:58: its revision can be approved after the turn (20:00),
		// so it is stored at the 403, under the id computed now.
		first := issued(t, st, owner, a, at(time.Hour-2*time.Second))
		if first.Ref != storekit.MakeRef(first.Operation.ID, first.Operation.Revision) {
			t.Fatalf("ref %.60q…, want a stored operation's", first.Ref)
		}
		if n, _ := c.Exists(ctx, "opsgate:{"+storekit.Slot(owner.Agent, owner.User)+"}:op:"+first.Operation.ID).Result(); n != 1 {
			t.Errorf("the operation is not stored under its computed id %s", first.Operation.ID)
		}
		second := issued(t, st, owner, a, at(time.Hour+2*time.Second))
		if second.Operation.ID != first.Operation.ID {
			t.Fatalf("W19: %s before the turn, %s after", first.Operation.ID, second.Operation.ID)
		}
		// A ref that expires before the turn is computed: nothing stored.
		short := issued(t, st, owner, action("s", `{}`, time.Minute), at(time.Hour-2*time.Minute))
		if short.Ref == storekit.MakeRef(short.Operation.ID, short.Operation.Revision) {
			t.Errorf("a ref expiring before the turn was stored")
		}
		if got := record(t, st, owner, first, at(time.Hour+3*time.Second)); got != storedriver.Recorded {
			t.Fatalf("Record: %v", got)
		}
		r := mustTake(t, st, owner, a, at(time.Hour+4*time.Second))
		if r.Claim == nil || r.Claim.Operation.ID != first.Operation.ID {
			t.Fatalf("Take: %+v", r)
		}
		if err := storedriver.Steps(st).Finish(ctx, *r.Claim, store.OutcomePerformed, at(time.Hour+5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// W141: the next request is the action's next operation, computed
		// in the new epoch, and its approval stores it.
		next := issued(t, st, owner, a, at(time.Hour+6*time.Second))
		if next.Operation.ID == first.Operation.ID || next.Ref == storekit.MakeRef(next.Operation.ID, next.Operation.Revision) {
			t.Fatalf("W141 after the turn: %+v, want a new computed operation", next)
		}
		if got := record(t, st, owner, next, at(time.Hour+7*time.Second)); got != storedriver.Recorded {
			t.Fatalf("the next operation: %v, want recorded", got)
		}
	})

	t.Run("W19 a computed ref handed out before a stored operation of the action was performed stores nothing", func(t *testing.T) {
		st, _, _ := computedStore(t, redisstore.Options{Retention: time.Hour})
		small := issued(t, st, owner, action("k", `{"v":1}`, 10*time.Minute), at(0))
		// The same action with terms too long for a ref: stored.
		bigAction := action("k", `{"x":"`+strings.Repeat("x", 2000)+`"}`, 10*time.Minute)
		big := issued(t, st, owner, bigAction, at(time.Second))
		if big.Operation.ID == small.Operation.ID || big.Ref != storekit.MakeRef(big.Operation.ID, big.Operation.Revision) {
			t.Fatalf("big terms: %+v", big.Operation)
		}
		if got := record(t, st, owner, big, at(2*time.Second)); got != storedriver.Recorded {
			t.Fatalf("big: %v", got)
		}
		r := mustTake(t, st, owner, bigAction, at(3*time.Second))
		if r.Claim == nil {
			t.Fatalf("Take: %+v", r)
		}
		if err := storedriver.Steps(st).Finish(ctx, *r.Claim, store.OutcomePerformed, at(4*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got := record(t, st, owner, small, at(5*time.Second)); got != storedriver.NotFound {
			t.Errorf("the earlier computed ref: %v, want not found", got)
		}
	})

	t.Run("another web server's store takes the refs this one computed (one seal key)", func(t *testing.T) {
		st, c, _ := computedStore(t, redisstore.Options{})
		a := action("k", `{}`, 10*time.Minute)
		is := issued(t, st, owner, a, at(0))
		other := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})
		if rec, found, err := storedriver.Steps(other).Lookup(ctx, owner, is.Ref, at(time.Second)); err != nil || !found || rec.Current.Revision != is.Operation.Revision {
			t.Errorf("Lookup on the other server: %+v %v %v", rec, found, err)
		}
		if got := record(t, other, owner, is, at(time.Second)); got != storedriver.Recorded {
			t.Errorf("Record on the other server: %v", got)
		}
		if r := mustTake(t, other, owner, a, at(2*time.Second)); r.Claim == nil || r.Claim.Operation.ID != is.Operation.ID {
			t.Errorf("Take on the other server: %+v", r)
		}
	})

	t.Run("each ref is sealed anew, and a damaged seal key fails closed", func(t *testing.T) {
		st, c, _ := computedStore(t, redisstore.Options{})
		a := action("k", `{}`, 10*time.Minute)
		one, two := issued(t, st, owner, a, at(0)), issued(t, st, owner, a, at(0))
		if one.Ref == two.Ref || one.Operation.Revision != two.Operation.Revision {
			t.Errorf("the same operation twice: refs %q and %q, revisions %s and %s; want two seals of one revision", one.Ref, two.Ref, one.Operation.Revision, two.Operation.Revision)
		}
		for _, is := range []storedriver.TakeResult{one, two} {
			if _, found, err := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(time.Second)); !found || err != nil {
				t.Errorf("Lookup %q: %v %v", is.Ref, found, err)
			}
		}
		// Another web server finds the secret damaged: its calls fail
		// (503 at the Gate), never panic or compute with a bad key.
		if err := c.Set(ctx, "opsgate:seal", "short", 0).Err(); err != nil {
			t.Fatal(err)
		}
		other := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})
		if _, err := storedriver.Steps(other).Take(ctx, owner, action("k2", `{}`, 10*time.Minute), at(0)); err == nil || !strings.Contains(err.Error(), "seal key") {
			t.Errorf("Take with a damaged seal key: %v", err)
		}
		if _, err := storedriver.Steps(other).Record(ctx, owner, one.Ref, approval(one), at(time.Second), storedriver.RecordOptions{}); err == nil {
			t.Errorf("Record with a damaged seal key: no error")
		}
	})

	t.Run("stored when its ref is returned: a lifetime beyond Retention, or terms too long for a ref", func(t *testing.T) {
		st, _, _ := computedStore(t, redisstore.Options{Retention: time.Hour})
		long := issued(t, st, owner, action("k", `{}`, 2*time.Hour), at(0))
		big := issued(t, st, owner, action("b", `{"x":"`+strings.Repeat("x", 2000)+`"}`, time.Minute), at(0))
		for _, is := range []storedriver.TakeResult{long, big} {
			if is.Ref != storekit.MakeRef(is.Operation.ID, is.Operation.Revision) {
				t.Errorf("ref %.80q…, want a stored operation's", is.Ref)
			}
		}
		small := issued(t, st, owner, action("s", `{"x":"`+strings.Repeat("x", 1300)+`"}`, time.Minute), at(0))
		if len(small.Ref) > storekit.MaxRefLength || small.Ref == storekit.MakeRef(small.Operation.ID, small.Operation.Revision) {
			t.Errorf("1300 bytes of terms: a %d-character ref", len(small.Ref))
		}
	})
}

// W138: the first approval keeps a computed operation's
// key until its expires_at plus the retention (kt), so the claim, which
// must keep it for the retention, makes no PEXPIRE of it (only of its
// action key); and whether the operation is remembered is still judged by
// its keep-until, not by how long Redis keeps its key.
func TestComputedKeptFromTheApproval(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := redistest.Server(t)
	const retention = time.Hour
	st := redisstore.New(c, redisstore.Options{Retention: retention, Prefix: "kt:"})
	a := action("k", `{"v":1}`, 10*time.Minute)
	r := takeIssued(t, st, a, at(0))
	recordOK(t, st, r, at(0))
	keys, err := c.Keys(ctx, "kt:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Claimed at its expires_at, the latest moment it can be.
	takeClaim(t, st, a, at(10*time.Minute))
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Its action key's PEXPIRE and its slot's index of performing
	// operations' (start.go), new: PEXPIRE GT, then NX. (Its audit log,
	// kept longer, gets its TTL with its SET.)
	if !strings.Contains(info, "cmdstat_pexpire:calls=3,") {
		t.Errorf("the claim made other PEXPIREs than its action key's and its index's:\n%s", info)
	}
	keptForRetention(t, c, keys, retention)
	// Approved and never claimed: past its expires_at it is forgotten,
	// though its key is kept. The action's next request is issued afresh
	// (computed again: the same operation_id, never performed, with a new
	// revision), the old ref is not found, and the new one's approval
	// stores the operation anew.
	a = action("w", `{"v":1}`, 10*time.Minute)
	r = takeIssued(t, st, a, at(0))
	recordOK(t, st, r, at(0))
	later := at(11 * time.Minute)
	next := takeIssued(t, st, a, later)
	if next.Operation.Revision == r.Operation.Revision {
		t.Fatalf("Take after expires_at: %+v, want an operation issued afresh", next)
	}
	if rep, err := storedriver.Steps(st).Record(ctx, owner, r.Ref, approval(r), later, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.NotFound {
		t.Errorf("Record of the expired ref: %+v %v, want not found", rep, err)
	}
	recordOK(t, st, next, later)
	if claim := takeClaim(t, st, a, later); claim.Operation.Revision != next.Operation.Revision {
		t.Fatalf("Take: %+v, want the new revision claimed", claim)
	}
}

// keptForRetention checks that the operation and action keys among keys
// are kept for the retention, and the minute's grace, from a claim just
// made (W138, W145), and not much longer.
func keptForRetention(t *testing.T, c *redis.Client, keys []string, retention time.Duration) {
	t.Helper()
	kept := 0
	for _, k := range keys {
		if !strings.Contains(k, ":op:") && !strings.Contains(k, ":act:") {
			continue
		}
		kept++
		ttl, err := c.PTTL(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < retention+time.Minute-5*time.Second || ttl > 10*time.Minute+retention+time.Minute {
			t.Errorf("%s: PTTL %v after the claim, want the retention and the grace from it", k, ttl)
		}
	}
	if kept != 2 {
		t.Errorf("%d operation and action keys, want 2 (keys %q)", kept, keys)
	}
}

// W145 W138: a computed operation stored by its approval, then given a
// revision that keeps it longer (other terms), sets its action key's TTL
// anew; the claim must still keep that key for the retention, or the
// action would get a second operation while the first performs. (The
// differential test found this: a claim that trusted kt for the action key
// too let it expire two hours later.)
func TestComputedClaimKeepsTheActionKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := redistest.Server(t)
	const retention = time.Hour
	st := redisstore.New(c, redisstore.Options{Retention: retention, Prefix: "kt2:"})
	first := takeIssued(t, st, action("k", `{"v":1}`, 10*time.Minute), at(0))
	recordOK(t, st, first, at(0))
	// Other terms six minutes later: a revision expiring at 16 minutes,
	// past the operation's 10; its action key's TTL is set to that.
	a := action("k", `{"v":2}`, 10*time.Minute)
	second := takeIssued(t, st, a, at(6*time.Minute))
	if second.Operation.ID != first.Operation.ID {
		t.Fatalf("Take: %+v, want a revision of the same operation", second)
	}
	recordOK(t, st, second, at(6*time.Minute))
	takeClaim(t, st, a, at(6*time.Minute))
	keys, err := c.Keys(ctx, "kt2:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keptForRetention(t, c, keys, retention)

	// And as a site sees it, on miniredis, whose keys expire with the
	// clock: two hours on, still performing, the action is busy.
	mst, _, advance := computedStore(t, redisstore.Options{Retention: retention})
	first = takeIssued(t, mst, action("k", `{"v":1}`, 10*time.Minute), at(0))
	recordOK(t, mst, first, at(0))
	second = takeIssued(t, mst, a, at(6*time.Minute))
	recordOK(t, mst, second, at(6*time.Minute))
	takeClaim(t, mst, a, at(6*time.Minute))
	advance(50 * time.Minute)
	if r, err := storedriver.Steps(mst).Take(ctx, owner, a, at(56*time.Minute)); err != nil || !r.Busy {
		t.Fatalf("Take while performing, 50 minutes on: %+v %v, want busy (W145)", r, err)
	}
}

// takeIssued is Take of owner's action a, which must issue an operation.
func takeIssued(t *testing.T, st store.Store, a storedriver.TakeRequest, now time.Time) storedriver.TakeResult {
	t.Helper()
	r, err := storedriver.Steps(st).Take(t.Context(), owner, a, now)
	if err != nil || r.Ref == "" {
		t.Fatalf("Take: %+v %v, want an operation issued", r, err)
	}
	return r
}

// recordOK records owner's approval of is, which must be recorded.
func recordOK(t *testing.T, st store.Store, is storedriver.TakeResult, now time.Time) {
	t.Helper()
	if rep, err := storedriver.Steps(st).Record(t.Context(), owner, is.Ref, approval(is), now, storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record: %+v %v", rep, err)
	}
}

// takeClaim is Take of owner's action a, which must claim an approval.
func takeClaim(t *testing.T, st store.Store, a storedriver.TakeRequest, now time.Time) store.Claim {
	t.Helper()
	r, err := storedriver.Steps(st).Take(t.Context(), owner, a, now)
	if err != nil || r.Claim == nil {
		t.Fatalf("Take: %+v %v, want a claim", r, err)
	}
	return *r.Claim
}
