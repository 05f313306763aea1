package storekit

import (
	"os"
	"sync"
	"time"
)

// What an audit entry says happened (store.Entry.What), in the protocol's
// words.
const (
	EntryRecorded      = "approval recorded"
	EntryDeclined      = "approval declined"
	EntryClaimed       = "claimed"
	EntryReleased      = "released"
	EntryPerformed     = "performed"
	EntryNotPerformed  = "not performed"
	EntryUnknown       = "outcome unknown"
	EntryResolved      = "resolved as performed"
	EntryResolvedNotDo = "resolved as not performed"
)

// An operation's audit log holds at most MaxEntriesPerOperation entries
// (webkit/RULES.md "Bounded work"). The only steps whose number a client
// can drive without new approvals are a decline and a claim (a claim that
// is released can be claimed again): each is refused (RateLimited,
// ErrRateLimited) once the log holds EntriesBeforeRefusal, which leaves
// room for everything that may still follow: at most 16 approvals, and
// the last claim's outcome unknown and resolution.
const (
	MaxEntriesPerOperation = 64
	EntriesBeforeRefusal   = MaxEntriesPerOperation - MaxApprovalsPerOperation - 4
)

// DefaultAuditRetention is how long an operation's audit log is kept after
// its latest entry, at least; and never less than the operation is
// remembered at that step.
const DefaultAuditRetention = 24 * time.Hour

var instance = sync.OnceValue(func() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
})

// Instance is the web server's name in its audit entries when the caller
// named none: the host name.
func Instance() string { return instance() }
