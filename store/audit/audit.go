// Package audit pushes a store's audit entries (store.Entry) to a sink of
// the site's own: its database, a log, a queue.
//
// The store is the outbox. Each step writes its entry in the same atomic
// step as the change it records (store.Entry), so a web server that dies
// between a step and the push loses nothing: the entry stays in the store
// for its retention (24 hours by default), readable with Store.Entries,
// and Deliver, wherever it runs next, pushes it.
package audit

import (
	"context"
	"slices"
	"time"

	"github.com/opsgate/opsgate/store"
)

// The pace of Deliver, variables for the package's tests.
var (
	// every is how often Deliver reads the entries written since.
	every = 5 * time.Second
	// overlap is how far back each read starts before the last one
	// ended, so that an entry stamped by a web server whose clock is
	// behind, or written while a read ran, is still seen.
	overlap = 2 * time.Minute
	// maxBackoff caps the wait between two tries of a failing hook.
	maxBackoff = 30 * time.Second
	// clock is Deliver's time.
	clock = time.Now
)

// Deliver calls hook with every entry st holds whose At is since or later,
// and then with each entry written after, until ctx ends (it returns
// ctx's error). Delivery is at least once: hook may see an entry again
// (after a restart, or when a read overlaps the last one), so it must do
// nothing more the second time, keyed on Entry.ID:
//
//	go audit.Deliver(ctx, st, lastAtInMyDatabase, func(ctx context.Context, e store.Entry) error {
//		_, err := db.ExecContext(ctx, `INSERT INTO ledger (id, what, at, operation_id, agent, user_id, body)
//			VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`, e.ID, e.What, e.At,
//			e.Operation.ID, e.Agent, e.User, mustJSON(e))
//		return err
//	})
//
// Entries go to hook one at a time, oldest first in each read. When hook
// returns an error, Deliver tries the same entry again, waiting longer
// each time (up to 30 seconds), and never skips it. Pass as since the
// newest At the sink holds (minus nothing: a repeat is harmless), or the
// zero time for every entry the store still holds.
//
// Run it in one process, or in every web server (each then pushes every
// entry, and the sink keeps one of each). It reads every few seconds, each
// read from two minutes before the last one ended: an entry stamped by a
// web server whose clock is more than two minutes behind may be missed,
// and stays readable with Store.Entries.
func Deliver(ctx context.Context, st store.Store, since time.Time, hook func(context.Context, store.Entry) error) error {
	from := since
	seen := map[string]time.Time{} // IDs delivered at or after from, with their At
	backoff := time.Second
	for {
		to := clock()
		var batch []store.Entry
		var err error
		for e, rerr := range st.Entries(ctx, "", from, to) {
			if rerr != nil {
				err = rerr
				break
			}
			if _, ok := seen[e.ID]; !ok {
				batch = append(batch, e)
			}
		}
		// Oldest first; an operation's entries of one instant in the
		// order the store wrote them.
		slices.SortStableFunc(batch, func(a, b store.Entry) int { return a.At.Compare(b.At) })
		for _, e := range batch {
			for {
				if err := ctx.Err(); err != nil {
					return err
				}
				herr := hook(ctx, e)
				if herr == nil {
					backoff = time.Second
					break
				}
				if !sleep(ctx, backoff) {
					return ctx.Err()
				}
				backoff = min(2*backoff, maxBackoff)
			}
			seen[e.ID] = e.At
		}
		if err == nil {
			// The next read starts overlap before this one ended; what it
			// finds again is skipped by its ID.
			from = later(from, to.Add(-overlap))
			for id, at := range seen {
				if at.Before(from) {
					delete(seen, id)
				}
			}
		}
		if !sleep(ctx, every) {
			return ctx.Err()
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
