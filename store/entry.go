package store

import "time"

// Entry is the audit record of one store step that committed (§6, §8.1):
// who approved what and how, who declined it and why, when the browser's
// request claimed it, how it ended, and who settled an outcome nobody
// reported. A store writes it in the same atomic step as the change it
// records (one critical section in memory, one Lua script in the
// operation's Cluster slot on Redis), so an entry exists if and only if
// its step committed, and a web server that dies right after a step loses
// none. Read them with Store.Entries; push them to a database or a log
// of the site's own with package store/audit.
//
// It never carries a Session JWT, an access token, a cookie or a claim's
// token: the terms are kept as their digest.
type Entry struct {
	// ID is unique to this entry: the idempotency key of a push.
	ID string
	// What happened, in the protocol's words: "approval recorded",
	// "approval declined", "claimed", "released" (a claim undone before
	// the action started, W144), "performed", "not performed", "outcome
	// unknown", "resolved as performed", "resolved as not performed".
	What string
	// At is the step's time (the caller's clock); Instance the web server
	// that made it (its host name).
	At       time.Time
	Instance string
	// Owner is whom the operation belongs to: the agent's client_id, the
	// pairwise User ID and the account ("" when signed out).
	Owner
	// Session is the sid of the Session the step was made for ("" for
	// Resolve). Kind is the action's kind (webkit.Action.Kind) on the
	// steps of the Gate (claimed, released, performed, not performed,
	// outcome unknown); "" on the endpoint's, which see only a ref.
	Session, Kind string
	// Operation is the revision the step was about: operation_id,
	// revision, summary and expires_at. Its Terms are left out;
	// TermsDigest is the SHA-256 of the canonical terms, base64url.
	Operation   Operation
	TermsDigest string
	// Approval is the approval the step recorded, declined or used up,
	// with approver, approved_at, input_type and reference exactly as the
	// Personal Agent sent them (§6).
	Approval Approval
	// Reason is why the site declined the approval; By is who resolved
	// the outcome, as the site says (Store.Resolve).
	Reason, By string
}
