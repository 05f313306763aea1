package storetest

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// Differential runs seeded random sequences of store calls (Take, Issue,
// Record, Finish with every outcome, Lookup, and the clock moving on) on a
// reference store and on the store under test, and fails at the first call
// whose answer differs: the suite's cases show the rules, this shows that
// two stores keep them alike in the orders no case thought of. Operation
// ids, revisions and refs are random in each store, so answers are
// compared by the order in which each first appeared.
//
// OPSGATE_DIFFERENTIAL_SEEDS, when set, replaces seeds: a long campaign
// outside CI (store/TESTING.md says how). OPSGATE_DIFFERENTIAL_FROM, when set,
// is the first seed (0 otherwise), so that a campaign can go on where the
// last one stopped rather than run the same sequences again. A value that
// is not a whole number in range fails the test rather than quietly
// running CI's few sequences. Under go test -short, without
// OPSGATE_DIFFERENTIAL_SEEDS, it runs at most 10 sequences.
func Differential(t *testing.T, seeds, steps int, reference, subject func(t testing.TB) Harness) {
	if testing.Short() {
		seeds = min(seeds, shortSeeds)
	}
	seeds = envInt(t, "OPSGATE_DIFFERENTIAL_SEEDS", 1, seeds)
	from := envInt(t, "OPSGATE_DIFFERENTIAL_FROM", 0, 0)
	for seed := from; seed < from+seeds; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			t.Parallel()
			a, b := newWorld(reference(t)), newWorld(subject(t))
			r := rand.New(rand.NewPCG(uint64(seed), 0x6f7073))
			now := base
			var log []string
			kinds := map[string]int{} // what the answers were, for -v
			defer func() { t.Logf("answers: %v", kinds) }()
			for step := range steps {
				c := randomCall(r, len(a.refs), len(a.claims))
				if c.advance > 0 {
					now = now.Add(c.advance)
					for _, w := range []*world{a, b} {
						if w.h.Advance != nil {
							w.h.Advance(c.advance)
						}
					}
				}
				ga, gb := a.do(t, c, now), b.do(t, c, now)
				log = append(log, fmt.Sprintf("%3d %-60s %s", step, c, ga))
				kind, _, _ := strings.Cut(ga, " op ")
				kinds[kind]++
				if ga != gb {
					t.Fatalf("seed %d, step %d: %s\nreference: %s\nsubject:   %s\nsteps so far:\n%s",
						seed, step, c, ga, gb, strings.Join(log, "\n"))
				}
				// The audit entries, too: the same steps wrote them (§8.1).
				if la, lb := a.ledger(t, now), b.ledger(t, now); la != lb {
					t.Fatalf("seed %d, step %d: %s: the entries differ\nreference:\n%s\nsubject:\n%s\nsteps so far:\n%s",
						seed, step, c, la, lb, strings.Join(log, "\n"))
				}
			}
		})
	}
}

// shortSeeds is how many sequences Differential runs under go test -short.
const shortSeeds = 10

// call is one random store call.
type call struct {
	kind    string // take, issue, record, finish, release, resolve, performing, lookup, wait
	owner   int
	key     string
	terms   string
	ref     int // index into the refs seen
	other   int // record: index of a ref whose revision the approval names, or -1 for ref's own
	claim   int // index into the claims held
	outcome store.Outcome
	token   string // take, release: a claim token from a small pool ("" for a fresh one)
	once    string // record: a single-use key from a small pool ("" for none)
	check   bool   // record: CheckOnly
	fixed   bool   // take, issue: the action has a fixed expires_at (W25)
	// take: the interface the request came through ("" the website,
	// storekit.ViaAPI, ViaMCP), and the ref whose revision the approval
	// it carries names (-1 none): one record across interfaces (§6).
	via      string
	approved int
	advance  time.Duration
}

var (
	diffOwners = []store.Owner{signedIn, signedOut, otherUser, otherAccount}
	diffKeys   = []string{"k1", "k2"}
	// The last terms' action gets a summary too long for a ref
	// (storedAction): a store that computes waiting operations stores it
	// when its ref is returned, so sequences mix computed and stored
	// operations, in one action too.
	diffTerms  = []string{`{"size":"M"}`, `{"size":"L"}`, `{"size":"S"}`, diffStored}
	diffStored = `{"size":"XL"}`
	diffWaits  = []time.Duration{time.Second, time.Minute, 6 * time.Minute, 11 * time.Minute, 2 * time.Hour}
)

// refsOwner, as a call's owner, is the owner who got the call's ref.
const refsOwner = -1

// pick returns one of pool, or "" (half the time).
func pick(r *rand.Rand, pool ...string) string {
	if r.IntN(2) == 0 {
		return ""
	}
	return pool[r.IntN(len(pool))]
}

func randomCall(r *rand.Rand, refs, claims int) call {
	c := call{owner: r.IntN(len(diffOwners)), key: diffKeys[r.IntN(len(diffKeys))], terms: diffTerms[r.IntN(len(diffTerms))], other: -1, approved: -1}
	c.fixed = c.key == "k2" && r.IntN(3) == 0
	switch n := r.IntN(100); {
	case n < 33:
		c.kind, c.token = "take", pick(r, "tok1", "tok2", "tok3")
		// A third of the requests through an API or an MCP server, most
		// carrying an approval of a revision seen (any interface's).
		switch r.IntN(6) {
		case 0:
			c.via = storekit.ViaAPI
		case 1:
			c.via = storekit.ViaMCP
		}
		if c.via != "" && refs > 0 && r.IntN(4) > 0 {
			c.approved = r.IntN(refs)
		}
	case n < 42:
		c.kind = "issue"
	case n < 66 && refs > 0:
		c.kind, c.ref = "record", r.IntN(refs)
		if r.IntN(4) > 0 {
			c.owner = refsOwner // mostly the owner who got the ref
		}
		if r.IntN(6) == 0 {
			c.other = r.IntN(refs)
		}
		c.once, c.check = pick(r, "jti1", "jti2", "jti3", "jti4", "jti5", "jti6"), r.IntN(5) == 0
	case n < 78 && claims > 0:
		c.kind, c.claim = "finish", r.IntN(claims)
		c.outcome = []store.Outcome{store.OutcomePerformed, store.OutcomePerformed, store.OutcomeNotPerformed, store.OutcomeUnknown}[r.IntN(4)]
	case n < 81:
		c.kind, c.token = "release", []string{"tok1", "tok2", "tok3"}[r.IntN(3)]
	case n < 83 && refs > 0:
		c.kind, c.ref, c.owner = "resolve", r.IntN(refs), refsOwner
		c.outcome = []store.Outcome{store.OutcomePerformed, store.OutcomeNotPerformed}[r.IntN(2)]
	case n < 84:
		c.kind = "performing"
	case n < 95 && refs > 0:
		c.kind, c.ref = "lookup", r.IntN(refs)
		if r.IntN(4) > 0 {
			c.owner = refsOwner
		}
	default:
		c.kind, c.advance = "wait", diffWaits[r.IntN(len(diffWaits))]
	}
	return c
}

func (c call) String() string {
	switch c.kind {
	case "take":
		return fmt.Sprintf("take owner %d %s %s fixed %v token %q via %q approved ref %d", c.owner, c.key, c.terms, c.fixed, c.token, c.via, c.approved)
	case "issue":
		return fmt.Sprintf("issue owner %d %s %s fixed %v", c.owner, c.key, c.terms, c.fixed)
	case "resolve":
		return fmt.Sprintf("resolve ref %d's operation %s", c.ref, c.outcome)
	case "performing":
		return "performing (the reconciler's list)"
	case "release":
		return fmt.Sprintf("release owner %d token %q", c.owner, c.token)
	case "record", "lookup":
		who := fmt.Sprint("owner ", c.owner)
		if c.owner == refsOwner {
			who = "its owner"
		}
		if c.kind == "lookup" {
			return fmt.Sprintf("lookup ref %d by %s", c.ref, who)
		}
		return fmt.Sprintf("record ref %d (revision of ref %d) by %s once %q check-only %v", c.ref, c.other, who, c.once, c.check)
	case "finish":
		return fmt.Sprintf("finish claim %d %s", c.claim, c.outcome)
	}
	return fmt.Sprintf("wait %v", c.advance)
}

// world is one store under a sequence, with its ids numbered in the order
// they first appeared.
type world struct {
	h      Harness
	calls  int // store calls made, to take turns among the harness's clients
	ids    map[string]int
	refs   []string
	owners []int // who got each ref first
	claims []store.Claim
}

func newWorld(h Harness) *world { return &world{h: h, ids: map[string]int{}} }

// n is the number of id (an operation id or a revision) in this world.
func (w *world) n(id string) string {
	if id == "" {
		return "-"
	}
	i, ok := w.ids[id]
	if !ok {
		i = len(w.ids)
		w.ids[id] = i
	}
	return fmt.Sprint("#", i)
}

// seen files a ref the store returned to owner, once.
func (w *world) seen(ref string, owner int) {
	for _, r := range w.refs {
		if r == ref {
			return
		}
	}
	w.refs = append(w.refs, ref)
	w.owners = append(w.owners, owner)
}

// ledger describes every audit entry the store holds at now, in this
// world's numbering: each operation's in the order written, operations by
// their number.
func (w *world) ledger(t *testing.T, now time.Time) string {
	t.Helper()
	byOp := map[string][]string{}
	for e, err := range w.h.Store.Entries(t.Context(), "", base.Add(-time.Hour), now.Add(time.Nanosecond)) {
		if err != nil {
			t.Fatalf("Entries: %v", err)
		}
		num := func(id string) string {
			if i, ok := w.ids[id]; ok {
				return fmt.Sprint("#", i)
			}
			return "?"
		}
		op := num(e.Operation.ID)
		byOp[op] = append(byOp[op], fmt.Sprintf("%s rev %s at %s owner %s/%s/%s used %v", e.What, num(e.Operation.Revision),
			e.At.Sub(base), e.Agent, e.User, e.Account, !e.Approval.UsedAt.IsZero()))
	}
	ops := slices.Sorted(maps.Keys(byOp))
	var b strings.Builder
	for _, op := range ops {
		for _, l := range byOp[op] {
			fmt.Fprintf(&b, "op %s %s\n", op, l)
		}
	}
	return b.String()
}

func (w *world) op(op store.Operation) string {
	return fmt.Sprintf("op %s rev %s via %q expires %s", w.n(op.ID), w.n(op.Revision), storekit.RevisionVia(op.Revision), op.ExpiresAt.Sub(base))
}

// do makes the call and describes its answer in this world's numbering.
func (w *world) do(t *testing.T, c call, now time.Time) string {
	t.Helper()
	// Calls take turns among the web servers the harness has (Store and
	// Clients, over the same data).
	clients := append([]storedriver.Store{w.h.Store}, w.h.Clients...)
	ctx, st := t.Context(), clients[w.calls%len(clients)]
	w.calls++
	who := c.owner
	if who == refsOwner {
		who = w.owners[c.ref]
	}
	o := diffOwners[who]
	switch c.kind {
	case "take", "issue":
		a := action(t, c.key, c.terms)
		if c.terms == diffStored {
			a = storedAction(t, c.key, c.terms)
		}
		if c.fixed {
			a.ExpiresAt = base.Add(3 * time.Hour) // one expires_at for every request of it
		}
		if c.kind == "issue" {
			is, err := Issue(ctx, st, o, a, now)
			if err != nil {
				return errClass(t, err)
			}
			w.seen(is.Ref, who)
			return "issued " + w.op(is.Operation)
		}
		a.ClaimToken = claimToken(c.token, who)
		a.Via = c.via
		if c.approved >= 0 {
			_, a.Approved, _ = storekit.SplitRef(w.refs[c.approved])
		}
		res, err := st.Take(ctx, o, a, now)
		switch {
		case err != nil:
			return errClass(t, err)
		case res.Busy:
			return "busy"
		case res.Claim != nil:
			w.claims = append(w.claims, *res.Claim)
			return "claim " + w.op(res.Claim.Operation) + " approval of rev " + w.n(res.Claim.Approval.Revision)
		case res.Ref != "":
			w.seen(res.Ref, who)
			return "issued " + w.op(res.Operation)
		}
		return "nothing"
	case "record":
		ref := w.refs[c.ref]
		id, rev, _ := strings.Cut(ref, ".")
		if c.other >= 0 {
			_, rev, _ = strings.Cut(w.refs[c.other], ".")
		}
		ap := approvalOf(store.Operation{ID: id, Revision: rev})
		opts := storedriver.RecordOptions{CheckOnly: c.check}
		if c.once != "" {
			opts.Once, opts.OnceUntil = storekit.OnceKey(o.Agent, o.User, c.once), now.Add(5*time.Minute)
		}
		rep, err := st.Record(ctx, o, ref, ap, now, opts)
		if err != nil {
			return errClass(t, err)
		}
		return fmt.Sprintf("record %v rev %s answer %q", rep.Result, w.n(rep.Operation.Revision), rep.Answer)
	case "release":
		released, err := st.Release(ctx, o, claimToken(c.token, who), now)
		if err != nil {
			return errClass(t, err)
		}
		return fmt.Sprint("release ", released)
	case "resolve":
		rc := st
		id, _, _ := strings.Cut(w.refs[c.ref], ".")
		err := rc.Resolve(ctx, o, id, c.outcome, now)
		if errors.Is(err, store.ErrNotPerforming) {
			return "resolve: not performing"
		}
		return "resolve " + errClass(t, err)
	case "performing":
		rc := st
		var stuck []string
		for s, err := range rc.Performing(ctx, now, now) {
			if err != nil {
				return errClass(t, err)
			}
			stuck = append(stuck, fmt.Sprintf("%s %s unknown %v", w.n(s.Operation.ID), w.n(s.Operation.Revision), s.Unknown))
		}
		slices.Sort(stuck)
		return fmt.Sprint("performing ", stuck)
	case "finish":
		cl := w.claims[c.claim]
		// A claim through an API or an MCP server keeps its answer (§7
		// P90, M90).
		if v := storekit.RevisionVia(cl.Operation.Revision); v != "" {
			ctx = storedriver.WithAnswer(ctx, []byte(fmt.Sprintf("answer of claim %d via %s", c.claim, v)))
		}
		return "finish " + errClass(t, st.Finish(ctx, cl, c.outcome, now))
	case "lookup":
		rec, found, err := st.Lookup(ctx, o, w.refs[c.ref], now)
		switch {
		case err != nil:
			return errClass(t, err)
		case !found:
			return "not found"
		}
		used := 0
		for _, ap := range rec.Approvals {
			if !ap.UsedAt.IsZero() {
				used++
			}
		}
		terms := string(rec.Current.Terms)
		if rec.Status == storedriver.StatusPerformed {
			terms = "" // a store may drop a performed operation's terms (storedriver.Found)
		}
		return fmt.Sprintf("found %v expired %v current %s %s approvals %d used %d", rec.Status, rec.Expired, w.n(rec.Current.Revision), terms, len(rec.Approvals), used)
	}
	return "waited"
}

// claimToken is a pool's token as owner's: the Gate makes a random one per
// request, so two owners never share one.
func claimToken(token string, owner int) string {
	if token == "" {
		return ""
	}
	return fmt.Sprint(token, "-", owner)
}

// errClass names a store's answer by the error it returned; a store
// failing (not an answer) ends the test.
func errClass(t *testing.T, err error) string {
	t.Helper()
	for _, e := range []error{storedriver.ErrRateLimited, storedriver.ErrClaimLost} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		t.Fatalf("store failed: %v", err)
	}
	return "ok"
}

// envInt is the whole number ≥ least that the environment variable name
// holds, or def when it is unset or empty.
func envInt(t *testing.T, name string, least, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least || n > math.MaxInt32 {
		t.Fatalf("%s=%q: want a whole number from %d to %d", name, v, least, math.MaxInt32)
	}
	return n
}
