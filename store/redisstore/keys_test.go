package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/internal/storetest"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

var (
	base  = time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	owner = store.Owner{Agent: "agent-a", User: "user-1", Account: "acct-1"}
)

func at(d time.Duration) time.Time { return base.Add(d) }

func action(key, terms string, life time.Duration) storedriver.TakeRequest {
	return storedriver.TakeRequest{Key: key, Terms: []byte(terms), Summary: "Do " + key, Lifetime: life}
}

// storedAction is action with a summary too long for a 2048-character
// ref: the store can't compute its operation into its ref, and stores it
// when the ref is returned (the stored fallback, computed.go).
func storedAction(key, terms string, life time.Duration) storedriver.TakeRequest {
	a := action(key, terms, life)
	a.Summary += strings.Repeat(" and then some more", 120)
	return a
}

func approval(is storedriver.TakeResult) store.Approval {
	return store.Approval{OperationID: is.Operation.ID, Revision: is.Operation.Revision, Approver: "user"}
}

// scenario drives every kind of key the scripts write: waiting, approved,
// performed, not performed, unknown, a busy action, capped revisions and a
// jti marker. It returns the longest time any record must be kept, from
// the scenario's now.
func scenario(t *testing.T, st store.Store, retention time.Duration) time.Duration {
	t.Helper()
	ctx := t.Context()
	now := at(0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	record := func(is storedriver.TakeResult) {
		t.Helper()
		rep, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), now, storedriver.RecordOptions{})
		must(err)
		if rep.Result != storedriver.Recorded {
			t.Fatalf("Record: %v", rep.Result)
		}
	}
	take := func(a storedriver.TakeRequest) *store.Claim {
		t.Helper()
		res, err := storedriver.Steps(st).Take(ctx, owner, a, now)
		must(err)
		if res.Claim == nil {
			t.Fatalf("Take: %+v", res)
		}
		return res.Claim
	}
	longest := 2 * time.Hour
	for i, out := range []store.Outcome{0, store.OutcomePerformed, store.OutcomeNotPerformed, store.OutcomeUnknown} {
		a := action(fmt.Sprint("k", i), `{"v":1}`, longest)
		is, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, now)
		must(err)
		record(is)
		if out != 0 {
			must(storedriver.Steps(st).Finish(ctx, *take(a), out, now))
		}
	}
	// A busy action: two approvals, one taken.
	a := action("busy", `{}`, time.Minute)
	r1, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, now)
	must(err)
	record(r1)
	a.ExpiresAt = at(2 * time.Minute)
	r2, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, now)
	must(err)
	record(r2)
	take(a)
	// 40 revisions of one stored operation (capped at 32).
	for i := range 40 {
		_, err := storetest.Issue(ctx, storedriver.Steps(st), owner, storedAction("cap", fmt.Sprintf(`{"n":%d}`, i), time.Minute), now)
		must(err)
	}
	// A signed-out owner and a waiting operation, stored (a waiting
	// operation computed into its ref stores nothing).
	_, err = storetest.Issue(ctx, storedriver.Steps(st), store.Owner{Agent: "agent-a", User: "user-1"}, storedAction("out", `{}`, time.Minute), now)
	must(err)
	_, err = storedriver.Steps(st).UseOnce(ctx, "jti-1", at(5*time.Minute), now)
	must(err)
	return max(longest, retention)
}

// TestTTL: every key the scripts create has a TTL, and none outlives what
// it keeps by more than the minute's grace (webkit/RULES.md "The store": nothing
// grows without bound; W139).
func TestTTL(t *testing.T) {
	t.Parallel()
	c := redistest.Server(t)
	const retention = time.Hour
	// The audit logs live for their own retention (store.Entry): the
	// same hour here.
	st := redisstore.New(c, redisstore.Options{Retention: retention, AuditRetention: retention, Prefix: "ttl:"})
	longest := scenario(t, st, retention)

	keys, err := c.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	const grace = time.Minute
	for _, k := range keys {
		ttl, err := c.PTTL(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if k == "ttl:seal" {
			// The seal key (computed.go) is one key, made once and kept.
			continue
		}
		if ttl <= 0 || ttl > longest+grace {
			t.Errorf("%s: PTTL %v, want in (0, %v]", k, ttl, longest+grace)
		}
		switch {
		case len(k) > 4 && k[:4] != "ttl:":
			t.Errorf("%s: not under the prefix", k)
		default:
			for _, kind := range []string{":op:", ":act:", ":tok:", "jti:"} {
				if contains(k, kind) {
					kinds[kind]++
				}
			}
		}
	}
	// 4 + 1 + 1 + 1 operations; 7 actions (the one performed, stored
	// when its ref was returned since its lifetime is beyond the
	// retention, keeps its action key while it is remembered: ka,
	// lib.lua issue); the tokens of the claims not performed (not done,
	// unknown, busy); 1 marker.
	want := map[string]int{":op:": 7, ":act:": 7, ":tok:": 3, "jti:": 1}
	for kind, n := range want {
		if kinds[kind] != n {
			t.Errorf("%d %s keys, want %d (keys: %q)", kinds[kind], kind, n, keys)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// counter is a go-redis hook that counts the round trips to Redis: a
// command, or a pipeline of them.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestOneRoundTrip: each method is one round trip, so the Gate's 403 path and
// its performing path each start with a single round trip (store package
// doc), for an operation computed into its ref (stored by its first
// approval) and for one stored when its ref is returned (storedAction).
// With Load, the first call of each is one too; the store's seal key is
// read once, by the first call that needs it. On a single Redis, storing
// a new operation counts it against its agent's cap in the same step;
// where that count is kept apart (a Cluster, where it is in a slot of its
// own), it costs one more.
func TestOneRoundTrip(t *testing.T) {
	t.Parallel()
	c := redistest.Server(t)
	var hook counter
	c.AddHook(&hook)
	// Without the overall caps: their counts are a round trip of their
	// own, at most once a second and only near a cap (TestOverallCaps).
	st := redisstore.New(c, redisstore.Options{MaxOpen: -1, MaxReplayMarkers: -1})
	if err := st.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	countN := func(want int64, name string, f func() error) {
		t.Helper()
		before := hook.n.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := hook.n.Load() - before; n != want {
			t.Errorf("%s: %d round trips, want %d", name, n, want)
		}
	}
	count := func(name string, f func() error) { t.Helper(); countN(1, name, f) }
	countN(3, "the first Issue (reads the seal key: SETNX, GET)", func() error {
		_, err := storetest.Issue(ctx, storedriver.Steps(st), owner, action("first", `{}`, time.Hour), at(0))
		return err
	})
	for _, a := range []storedriver.TakeRequest{action("k", `{}`, time.Hour), storedAction("s", `{}`, time.Hour)} {
		var is storedriver.TakeResult
		var claim *store.Claim
		count("Issue (a new operation)", func() (err error) { is, err = storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(0)); return err })
		count("Issue (the same)", func() (err error) { _, err = storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(0)); return err })
		count("Take (issues)", func() error {
			res, err := storedriver.Steps(st).Take(ctx, owner, a, at(0))
			if err == nil && res.Ref == "" {
				err = fmt.Errorf("want issued, got %+v", res)
			}
			return err
		})
		count("Lookup", func() error { _, _, err := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(0)); return err })
		count("Record", func() error {
			_, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), at(0), storedriver.RecordOptions{})
			return err
		})
		// A claim is two: the claim, then its start mark (start.go), which
		// the handler waits for; with WAIT or WAITAOF the mark is fused
		// with the durability confirmation, so it is two there too.
		countN(2, "Take (claims)", func() error {
			res, err := storedriver.Steps(st).Take(ctx, owner, a, at(0))
			if err == nil && res.Claim == nil {
				err = fmt.Errorf("want a claim, got %+v", res)
			}
			claim = res.Claim
			return err
		})
		// Finish also takes the operation off its agent's count, pipelined.
		count("Finish", func() error { return storedriver.Steps(st).Finish(ctx, *claim, store.OutcomePerformed, at(0)) })
	}
	count("UseOnce", func() error { _, err := storedriver.Steps(st).UseOnce(ctx, "jti", at(time.Minute), at(0)); return err })

	apart := redisstore.New(c, redisstore.Options{})
	redisstore.CountAgentApart(apart)
	countN(2, "Issue (a new stored operation, the agent's count kept apart)", func() error {
		_, err := storetest.Issue(ctx, storedriver.Steps(apart), owner, storedAction("apart", `{}`, time.Hour), at(0))
		return err
	})
	var is storedriver.TakeResult
	countN(3, "the first Issue of a computed one (reads the seal key)", func() (err error) {
		is, err = storetest.Issue(ctx, storedriver.Steps(apart), owner, action("apart2", `{}`, time.Hour), at(0))
		return err
	})
	countN(2, "Record storing a computed one, the agent's count kept apart", func() error {
		_, err := storedriver.Steps(apart).Record(ctx, owner, is.Ref, approval(is), at(0), storedriver.RecordOptions{})
		return err
	})
}

// TestDeadline: with the store down, a call fails by the context's
// deadline even with go-redis's default dial retries (package doc: set
// ContextTimeoutEnabled), and it is a store error, never a result.
func TestDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	st := redisstore.New(c, redisstore.Options{})
	is, err := storetest.Issue(t.Context(), storedriver.Steps(st), owner, action("k", `{}`, time.Hour), at(0))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(time.Second))
	if err == nil {
		t.Fatal("Lookup while down: no error")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Lookup while down took %v with a 300ms deadline", d)
	}
	if !contains(err.Error(), "redisstore: lookup:") {
		t.Errorf("error %q does not say where", err)
	}
}

// TestOddData: records another program (or a bug) left malformed are not
// found, never a panic or a claim.
func TestOddData(t *testing.T) {
	t.Parallel()
	mr, c := redistest.Mini(t)
	st := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})
	ctx := t.Context()
	a := action("k", `{}`, time.Hour)
	is, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), at(0), storedriver.RecordOptions{}); err != nil {
		t.Fatal(err)
	}
	var opKey, actKey string
	for _, k := range mr.Keys() {
		switch {
		case contains(k, ":op:"):
			opKey = k
		case contains(k, ":act:"):
			actKey = k
		}
	}
	act, err := mr.Get(actKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ field, value string }{
		{"state", "exploded"}, {"k", "soon"}, {"x:" + is.Operation.Revision, "-"},
		{"a:" + is.Operation.Revision, "{not json"}, {"cur", "nope"}, {"al", "   "},
	} {
		t.Run(f.field, func(t *testing.T) {
			saved := mr.HGet(opKey, f.field)
			mr.HSet(opKey, f.field, f.value)
			// Restored after: the field, and the action key, which Issue
			// points at a new operation while this one looks unusable.
			defer func() {
				mr.HSet(opKey, f.field, saved)
				if err := mr.Set(actKey, act); err != nil {
					t.Error(err)
				}
			}()
			if _, _, err := storedriver.Steps(st).Lookup(ctx, owner, is.Ref, at(time.Second)); err != nil {
				t.Errorf("Lookup: %v", err)
			}
			if _, err := storedriver.Steps(st).Record(ctx, owner, is.Ref, approval(is), at(time.Second), storedriver.RecordOptions{}); err != nil {
				t.Errorf("Record: %v", err)
			}
			if _, err := storetest.Issue(ctx, storedriver.Steps(st), owner, a, at(time.Second)); err != nil {
				t.Errorf("Issue: %v", err)
			}
			if err := storedriver.Steps(st).Finish(ctx, store.Claim{Owner: owner, Operation: is.Operation, Token: "t"}, store.OutcomePerformed, at(time.Second)); !errors.Is(err, storedriver.ErrClaimLost) {
				t.Errorf("Finish: %v, want ErrClaimLost", err)
			}
		})
	}
	// An action key with odd contents: a stale or foreign revision hint, an
	// unknown performing operation, extra words, nothing. None is an error,
	// and none makes Take claim or issue the wrong operation.
	for _, v := range []string{
		is.Operation.ID + " 1700000000-staleRevision", is.Operation.ID + " op_unknownPerforming",
		is.Operation.ID + " a b c d", is.Operation.ID + " " + is.Operation.Revision + " op_nope", "   ",
	} {
		t.Run("act "+v, func(t *testing.T) {
			if err := mr.Set(actKey, v); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := mr.Set(actKey, act); err != nil {
					t.Error(err)
				}
			}()
			res, err := storedriver.Steps(st).Take(ctx, owner, storedriver.TakeRequest{Key: a.Key, Terms: []byte(`{"other":1}`), Lifetime: time.Hour}, at(time.Second))
			if err != nil || res.Claim != nil {
				t.Errorf("Take with other terms: %+v, %v", res, err)
			}
		})
	}
	// With the data restored, the approval is still taken exactly once.
	res, err := storedriver.Steps(st).Take(ctx, owner, a, at(2*time.Second))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	if res, err := storedriver.Steps(st).Take(ctx, owner, a, at(3*time.Second)); err != nil || res.Claim != nil {
		t.Fatalf("second Take: %+v, %v; want no second claim", res, err)
	}
}

// The agent's cap of open operations spans its Users (and their Cluster
// slots). For operations stored when their ref is returned (storedAction;
// TestComputed has those an approval stores): over it, the new operation
// is refused and forgotten, so the
// repeated request is refused too; another agent is not counted.
func TestAgentCap(t *testing.T) {
	t.Parallel()
	for _, apart := range []bool{false, true} {
		name := "counted in the step that opens"
		if apart {
			name = "counted apart, as on a Cluster"
		}
		t.Run(name, func(t *testing.T) { testAgentCap(t, apart) })
	}
}

func testAgentCap(t *testing.T, apart bool) {
	_, c := redistest.Mini(t)
	st := redisstore.New(c, redisstore.Options{MaxOpenPerAgent: 3, Durability: redisstore.DurableNone})
	if apart {
		redisstore.CountAgentApart(st)
	}
	ctx := t.Context()
	a := storedAction("k", `{}`, time.Hour)
	user := func(i int) store.Owner { return store.Owner{Agent: "agent-a", User: fmt.Sprint("u", i)} }
	for i := range 3 {
		if _, err := storetest.Issue(ctx, storedriver.Steps(st), user(i), a, at(0)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := storedriver.Steps(st).Take(ctx, user(9), a, at(0)); !errors.Is(err, storedriver.ErrRateLimited) {
			t.Fatalf("fourth: %v, want ErrRateLimited", err)
		}
	}
	if n, _ := c.Keys(ctx, "opsgate:{"+storekit.Slot("agent-a", "u9")+"}:op:*").Result(); len(n) != 0 {
		t.Errorf("the refused operation is kept: %v", n)
	}
	if _, err := storetest.Issue(ctx, storedriver.Steps(st), store.Owner{Agent: "agent-b", User: "u9"}, a, at(0)); err != nil {
		t.Fatalf("another agent: %v", err)
	}
	// Counted until the first revision expires.
	if _, err := storetest.Issue(ctx, storedriver.Steps(st), user(9), a, at(time.Hour+time.Second)); err != nil {
		t.Fatalf("after the first revisions expired: %v", err)
	}
	// Or until it is performed: agent-c's three Users each get an
	// operation performed, and a fourth User is still served.
	other := func(i int) store.Owner { return store.Owner{Agent: "agent-c", User: fmt.Sprint("u", i)} }
	for i := range 3 {
		is, err := storetest.Issue(ctx, storedriver.Steps(st), other(i), a, at(0))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := storedriver.Steps(st).Record(ctx, other(i), is.Ref, approval(is), at(0), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
			t.Fatalf("Record: %v, %v", rep.Result, err)
		}
		res, err := storedriver.Steps(st).Take(ctx, other(i), a, at(0))
		if err != nil || res.Claim == nil {
			t.Fatalf("Take: %+v, %v", res, err)
		}
		if err := storedriver.Steps(st).Finish(ctx, *res.Claim, store.OutcomePerformed, at(0)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := storedriver.Steps(st).Take(ctx, other(9), a, at(0)); err != nil {
		t.Fatalf("after three were performed: %v, want served", err)
	}
}

// oneSlotProxy answers a script whose keys are in more than one hash slot
// as a proxy in front of a Cluster does (Redis Enterprise's, reached with
// a plain client): CROSSSLOT, and nothing runs. Keys of two hash tags in
// one slot (an owner's keys and its slot's index of performing
// operations) pass, as they do on a Cluster.
type oneSlotProxy struct{ refused atomic.Int64 }

type crossSlotError string

func (e crossSlotError) Error() string { return string(e) }
func (crossSlotError) RedisError()     {}

func (p *oneSlotProxy) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *oneSlotProxy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		switch strings.ToLower(fmt.Sprint(args[0])) {
		case "fcall", "evalsha", "eval":
			n, _ := strconv.Atoi(fmt.Sprint(args[2]))
			slots := map[string]bool{}
			for _, k := range args[3 : 3+n] {
				key := fmt.Sprint(k)
				_, tag, _ := strings.Cut(key, "{")
				tag, _, _ = strings.Cut(tag, "}")
				slots[fmt.Sprint(redisstore.HashSlot(tag))] = true
			}
			if len(slots) > 1 {
				p.refused.Add(1)
				err := crossSlotError("CROSSSLOT Keys in request don't hash to the same slot")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (p *oneSlotProxy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Behind a proxy that refuses a script's keys in two slots, the first
// operation opened is refused once, then opened and counted with the
// agent's count apart, and so is every later one: nothing is lost and the
// cap still holds.
func TestAgentCountBehindAProxy(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	var proxy oneSlotProxy
	c.AddHook(&proxy)
	st := redisstore.New(c, redisstore.Options{MaxOpenPerAgent: 2, Durability: redisstore.DurableNone})
	ctx := t.Context()
	user := func(i int) store.Owner { return store.Owner{Agent: "agent-p", User: fmt.Sprint("u", i)} }
	for i := range 2 {
		res, err := storedriver.Steps(st).Take(ctx, user(i), storedAction("k", `{}`, time.Hour), at(0))
		if err != nil || res.Ref == "" {
			t.Fatalf("Take %d behind the proxy: %+v, %v", i, res, err)
		}
	}
	if n := proxy.refused.Load(); n != 1 {
		t.Errorf("the proxy refused %d steps, want only the first", n)
	}
	if _, err := storetest.Issue(ctx, storedriver.Steps(st), user(2), storedAction("k", `{}`, time.Hour), at(0)); !errors.Is(err, storedriver.ErrRateLimited) {
		t.Errorf("a third operation for an agent capped at 2: %v, want ErrRateLimited", err)
	}

	// A store whose first call behind the proxy is a Finish: refused once,
	// it finishes the operation without the count, then takes the
	// performed operation off the agent's count all the same.
	mr, direct := redistest.Mini(t)
	opts := redisstore.Options{MaxOpenPerAgent: 1, Durability: redisstore.DurableNone}
	a := storedAction("k", `{}`, time.Hour)
	before := redisstore.New(direct, opts)
	redisstore.CountAgentApart(before) // claimed with the count apart: still counted
	is, err := storetest.Issue(ctx, storedriver.Steps(before), user(0), a, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := storedriver.Steps(before).Record(ctx, user(0), is.Ref, approval(is), at(0), storedriver.RecordOptions{}); err != nil || rep.Result != storedriver.Recorded {
		t.Fatalf("Record: %v, %v", rep.Result, err)
	}
	res, err := storedriver.Steps(before).Take(ctx, user(0), a, at(0))
	if err != nil || res.Claim == nil {
		t.Fatalf("Take: %+v, %v", res, err)
	}
	var proxy2 oneSlotProxy
	behind := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { behind.Close() })
	behind.AddHook(&proxy2)
	after := redisstore.New(behind, opts)
	if err := storedriver.Steps(after).Finish(ctx, *res.Claim, store.OutcomePerformed, at(time.Second)); err != nil {
		t.Fatalf("Finish behind the proxy: %v", err)
	}
	if proxy2.refused.Load() != 1 {
		t.Errorf("the proxy refused %d steps, want the Finish once", proxy2.refused.Load())
	}
	if _, err := storetest.Issue(ctx, storedriver.Steps(after), user(1), a, at(2*time.Second)); err != nil {
		t.Errorf("a new operation once the only one was performed (agent cap 1): %v", err)
	}
}
