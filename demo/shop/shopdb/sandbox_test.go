package shopdb

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// exchanged changes key's sandbox, so a fresh one is told apart.
func exchanged(t *testing.T, db *DB, now time.Time) {
	t.Helper()
	plan, err := db.PlanExchange(DemoAccount, "ord_7Hk2", "itm_4Qa", "stormline-l")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exchange(DemoAccount, plan, now); err != nil {
		t.Fatal(err)
	}
}

func isSeeded(db *DB) bool {
	o, _ := db.Order(DemoAccount, "ord_7Hk2")
	return o.Items[0].SKU == "stormline-m"
}

func TestSandboxes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	t.Run("own copy per key", func(t *testing.T) {
		var s Sandboxes
		exchanged(t, s.Get("a", now), now)
		if !isSeeded(s.Get("b", now)) {
			t.Error("b sees a's change")
		}
		if isSeeded(s.Get("a", now)) {
			t.Error("a lost its change")
		}
	})
	t.Run("forgotten after a day without use, kept while used", func(t *testing.T) {
		s := Sandboxes{Idle: 24 * time.Hour}
		exchanged(t, s.Get("busy", now), now)
		exchanged(t, s.Get("idle", now), now)
		for h := 1; h <= 30; h++ {
			s.Get("busy", now.Add(time.Duration(h)*time.Hour))
		}
		if s.Len() != 1 {
			t.Errorf("%d sandboxes after the idle one expired, want 1", s.Len())
		}
		if isSeeded(s.Get("busy", now.Add(30*time.Hour))) {
			t.Error("a sandbox in use was forgotten")
		}
		if !isSeeded(s.Get("idle", now.Add(30*time.Hour))) {
			t.Error("an idle sandbox was kept past a day")
		}
	})
	t.Run("at most Max, least recently used first", func(t *testing.T) {
		s := Sandboxes{Max: 3}
		for i := range 100 {
			s.Get(fmt.Sprint("k", i), now)
			s.Get("k0", now) // k0 stays the most recently used
			if s.Len() > 3 {
				t.Fatalf("%d sandboxes, max 3", s.Len())
			}
		}
		exchanged(t, s.Get("k0", now), now)
		s.Get("new", now)
		if isSeeded(s.Get("k0", now)) {
			t.Error("the most recently used sandbox was evicted")
		}
	})
	t.Run("fair between groups: a full group evicts its own first", func(t *testing.T) {
		group := func(key string) string { g, _, _ := strings.Cut(key, "/"); return g }
		s := Sandboxes{Max: 10, MaxPerGroup: 4, Group: group}
		exchanged(t, s.Get("victim/u1", now), now)
		exchanged(t, s.Get("other/u1", now), now)
		exchanged(t, s.Get("other/u2", now.Add(time.Second)), now)
		// The hostile group's 1,000 keys, each newer than the victims'.
		for i := range 1000 {
			s.Get(fmt.Sprint("hostile/u", i), now.Add(time.Minute))
			if s.Len() > 10 {
				t.Fatalf("%d sandboxes, max 10", s.Len())
			}
		}
		if isSeeded(s.Get("victim/u1", now.Add(time.Minute))) || isSeeded(s.Get("other/u1", now.Add(time.Minute))) || isSeeded(s.Get("other/u2", now.Add(time.Minute))) {
			t.Error("a hostile group's keys evicted another group's sandbox")
		}
		// The hostile group keeps its 4 most recent.
		if !isSeeded(s.Get("hostile/u999", now.Add(time.Minute))) || s.Len() != 7 {
			t.Errorf("%d sandboxes kept, want 3 + the hostile group's 4", s.Len())
		}
		// Beyond Max in all, the largest group gives way first: six
		// groups of one fill Max, and the 4-strong hostile group loses
		// its oldest, not a group of one.
		for i := range 4 {
			exchanged(t, s.Get(fmt.Sprint("g", i, "/u"), now.Add(2*time.Minute)), now)
		}
		if s.Len() != 10 {
			t.Fatalf("%d sandboxes, want 10", s.Len())
		}
		for _, k := range []string{"victim/u1", "other/u1", "g0/u", "g3/u"} {
			if isSeeded(s.Get(k, now.Add(2*time.Minute))) {
				t.Errorf("%s was evicted while the hostile group held more", k)
			}
		}
	})
	t.Run("fair between sources: 1,000 made-up groups from one source evict their own", func(t *testing.T) {
		group := func(key string) string { g, _, _ := strings.Cut(key, "/"); return g }
		s := Sandboxes{Max: 50, MaxPerGroup: 4, MaxPerSource: 10, Group: group}
		exchanged(t, s.GetFrom("victim/u1", "198.51.100.0/24", now), now)
		exchanged(t, s.GetFrom("other/u1", "192.0.2.0/24", now), now)
		// 1,000 made-up groups of one key each, from one network, each
		// newer than the victims'.
		for i := range 1000 {
			s.GetFrom(fmt.Sprint("made-up-", i, "/u"), "203.0.113.0/24", now.Add(time.Minute))
			if s.Len() > 12 {
				t.Fatalf("%d sandboxes, want the source's 10 and the other 2", s.Len())
			}
		}
		if isSeeded(s.GetFrom("victim/u1", "198.51.100.0/24", now.Add(time.Minute))) || isSeeded(s.GetFrom("other/u1", "192.0.2.0/24", now.Add(time.Minute))) {
			t.Error("one source's made-up groups evicted another source's sandbox")
		}
		if !isSeeded(s.GetFrom("made-up-999/u", "203.0.113.0/24", now.Add(time.Minute))) || s.Len() != 12 {
			t.Errorf("%d sandboxes, want the source's 10 most recent and the 2 others", s.Len())
		}
		// Beyond Max in all, the largest source gives way first, even
		// when many sources of one sandbox each are older.
		small := Sandboxes{Max: 5, MaxPerSource: 10}
		exchanged(t, small.GetFrom("a", "net-a", now), now)
		exchanged(t, small.GetFrom("b", "net-b", now), now)
		for i := range 20 {
			small.GetFrom(fmt.Sprint("h", i), "net-h", now.Add(time.Minute))
		}
		if small.Len() != 5 || isSeeded(small.GetFrom("a", "net-a", now.Add(time.Minute))) || isSeeded(small.GetFrom("b", "net-b", now.Add(time.Minute))) {
			t.Errorf("%d kept; the small sources' sandboxes must stay while the large one holds more", small.Len())
		}
	})
	t.Run("reset", func(t *testing.T) {
		var s Sandboxes
		exchanged(t, s.Get("a", now), now)
		exchanged(t, s.Get("b", now), now)
		if !isSeeded(s.Reset("a", now)) || !isSeeded(s.Get("a", now)) {
			t.Error("a is not seeded after its reset")
		}
		if isSeeded(s.Get("b", now)) {
			t.Error("a's reset reset b")
		}
	})
}

// TestHistoryBounded: repeating an action all day keeps at most MaxHistory
// entries of its history.
func TestHistoryBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	db := New(now)
	for i := range 3 * MaxHistory {
		to := []string{"stormline-insulated-m", "stormline-m"}[i%2]
		plan, err := db.PlanExchange(DemoAccount, "ord_7Hk2", "itm_4Qa", to)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exchange(DemoAccount, plan, now); err != nil {
			t.Fatal(err)
		}
		d, _ := db.Delivery(DemoAccount, "del_2Wn8")
		rp, err := db.PlanReschedule(DemoAccount, d.ID, d.Date.AddDate(0, 0, 1-2*(i%2)), now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Reschedule(DemoAccount, rp, now); err != nil {
			t.Fatal(err)
		}
	}
	o, _ := db.Order(DemoAccount, "ord_7Hk2")
	d, _ := db.Delivery(DemoAccount, "del_2Wn8")
	if len(o.Items[0].Exchanges) != MaxHistory || len(o.Charges) != MaxHistory || len(d.Changes) != MaxHistory {
		t.Errorf("kept %d exchanges, %d charges, %d date changes; want %d each", len(o.Items[0].Exchanges), len(o.Charges), len(d.Changes), MaxHistory)
	}
	if last := o.Items[0].Exchanges[MaxHistory-1]; last.To.ID != "stormline-m" {
		t.Errorf("the newest exchange is not the last kept: %+v", last.To.ID)
	}
}
