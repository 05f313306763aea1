package redisstore

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/redistest"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// BenchmarkComputeRef is the web server's own work for a computed 403:
// the operation's id and revision, and its sealed ref.
func BenchmarkComputeRef(b *testing.B) {
	_, c := redistest.Mini(b)
	s := New(c, Options{}).s
	k, err := s.sealer(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	owner := store.Owner{Agent: "https://agent.example/ceiling", User: "usr_1_2", Account: "acct"}
	a := storedriver.TakeRequest{Key: "exchange:1", Terms: []byte(`{"order_id":"ord_1","price_difference":{"amount":"70.00","currency":"USD"},"replacement_sku":"stormline-insulated-m"}`),
		Summary: "Exchange the jacket on order 1 for $70.00 more.", Lifetime: 10 * time.Minute}
	base := s.base(owner.Agent, owner.User)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		op, ok := s.computable(owner, storekit.ActionDigest(owner.Account, a.Key), a, now)
		if !ok {
			b.Fatal("not computable")
		}
		op.ID = k.ID(base, op)
		_ = issuedComputed(k, base, op)
	}
}
