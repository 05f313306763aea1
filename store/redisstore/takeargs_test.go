package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/redisstore"
)

// Take sends what only issuing needs as one JSON array (take.lua's
// ARGV[14]): a summary, agent and User with any bytes come back from the
// stored operation exactly as they went in, on Redis as the functions
// read them and as the scripts do.
func TestTakeIssueFieldsAnyBytes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	now := time.Unix(1_800_000_000, 0)
	summary := "quote \" backslash \\ slash / newline \n tab \t nul \x00 ctl \x01\x1f del \x7f invalid \xff\xfe utf-8 é ✓"
	for _, functions := range []bool{true, false} {
		c := redistest.Server(t)
		st := redisstore.New(c, redisstore.Options{Durability: redisstore.DurableNone})
		if functions {
			if err := st.Load(ctx); err != nil {
				t.Fatal(err)
			}
		}
		owner := store.Owner{Agent: "https://agent.example/\"odd\"\n\xff", User: "usr_\\\x02", Account: "acct_\"1\""}
		// Terms too long for a computed ref: Take stores the operation, with
		// what the JSON array carried.
		terms := []byte(`{"note":"` + strings.Repeat("x", 3000) + `"}`)
		r, err := storedriver.Steps(st).Take(ctx, owner, storedriver.TakeRequest{Key: "k", Terms: terms, Summary: summary, Lifetime: time.Minute}, now)
		if err != nil {
			t.Fatal(err)
		}
		if r.Ref == "" || r.Claim != nil || r.Busy {
			t.Fatalf("functions %v: Take = %+v, want an operation issued", functions, r)
		}
		if r.Operation.Summary != summary {
			t.Errorf("functions %v: Take's summary = %q, want %q", functions, r.Operation.Summary, summary)
		}
		rec, found, err := storedriver.Steps(st).Lookup(ctx, owner, r.Ref, now)
		if err != nil || !found {
			t.Fatalf("functions %v: Lookup = %v, %v", functions, found, err)
		}
		if rec.Current.Summary != summary || string(rec.Current.Terms) != string(terms) || rec.Owner.Account != owner.Account {
			t.Errorf("functions %v: stored %q, %d bytes of terms, account %q; want %q, %d, %q", functions,
				rec.Current.Summary, len(rec.Current.Terms), rec.Owner.Account, summary, len(terms), owner.Account)
		}
		// The same request again reuses the stored revision (W24).
		again, err := storedriver.Steps(st).Take(ctx, owner, storedriver.TakeRequest{Key: "k", Terms: terms, Summary: summary, Lifetime: time.Minute}, now.Add(time.Second))
		if err != nil || again.Ref != r.Ref {
			t.Errorf("functions %v: the repeat's ref = %q, %v; want %q", functions, again.Ref, err, r.Ref)
		}
	}
}
