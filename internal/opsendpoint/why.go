package opsendpoint

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opsgate/opsgate/internal/explain"
	"github.com/opsgate/opsgate/internal/storedriver"
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)

// Why a refusal was made, in words for the agent's developer, when the
// endpoint explains (Explain, Kit.ExplainRefusals): made only on a
// refusal, never on the path of an answer that works. The words name what
// the request itself sent and the website's own rules, never another
// agent's, User's or account's data.

// whenWords is a time as the reasons show it.
func whenWords(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// extensionsWhy says what a request's Poppy-Extensions lacked.
func extensionsWhy(values []string) string {
	if len(values) == 0 {
		return `the request has no Poppy-Extensions header: a request to the operations endpoint declares "operations";v="3" (§2)`
	}
	return fmt.Sprintf(`Poppy-Extensions %.200q does not declare "operations";v="3" (§2)`, strings.Join(values, ", "))
}

// replayWhy says why a Session JWT used before is refused.
func (e *Endpoint) replayWhy() string {
	if !e.explaining() {
		return ""
	}
	return "Session JWT: jti was used before (a replay): a Session JWT is good for one request; sign a new one, with a new jti, for every request"
}

// refAgain is what an agent does about a ref it can't use (A15).
const refAgain = "; have the browser make its request again for a new ref (§4, A15)"

// refWhy says why ref can't be used in the Session of owner at now: rec
// is what the store found of it (nil: nothing).
func (e *Endpoint) refWhy(ref string, owner store.Owner, rec *storedriver.Found, now time.Time) string {
	if !e.explaining() {
		return ""
	}
	return explain.Clip(refWords(ref, owner, rec, now))
}

func refWords(ref string, owner store.Owner, rec *storedriver.Found, now time.Time) string {
	if rec != nil {
		switch {
		case rec.Owner.Account == "" && owner.Account != "":
			return "the ref's operation was returned to a signed-out Session: only a signed-out Session of the same agent and User can approve it, and this one is signed in (§3 \"Who can approve it\")"
		case rec.Owner.Account != owner.Account:
			return "the ref's operation belongs to another account than the one this Session's access token names (§3 \"Who can approve it\")"
		case rec.Expired:
			return fmt.Sprintf("the ref's operation expired at %s (its expires_at, §3 \"Expiry\")", whenWords(rec.Current.ExpiresAt)) + refAgain
		}
	}
	_, rev, ok := storekit.SplitRef(ref)
	if !ok {
		return "the ref is not of this website's form (an operation_id, \".\", a revision, and for some a sealed part after one more \".\"): send it exactly as the Poppy-Operation header gave it"
	}
	if i, ok := explain.IssuedRef(ref); ok {
		sameAgent, sameUser, sameAccount := i.Owner(owner.Agent, owner.User, owner.Account)
		switch {
		case !sameAgent:
			return "the ref was issued to a Session of another agent (another client_id): a ref works only in a Session of the agent and User that its browser's Session belongs to (§3 \"Who can approve it\", §8.2)"
		case !sameUser:
			return "the ref was issued to a Session of this agent for another User (another sub): a ref works only in a Session of the same agent and User (§3 \"Who can approve it\", §8.2)"
		case !sameAccount && owner.Account != "":
			return "the ref was issued to a Session signed in to another account, or signed out, and this Session is signed in: only a Session in the same account (or signed out, for a signed-out operation) can use it (§3)"
		case now.After(i.Expires):
			return fmt.Sprintf("the ref's operation expired at %s, and the website no longer remembers it (§3 \"Expiry\")", whenWords(i.Expires)) + refAgain
		}
		return "the ref is stale: it was issued to this agent and User, but the website no longer knows its operation (performed and forgotten, or its store was cleared)" + refAgain
	}
	if exp, ok := revisionExpiry(rev); ok && now.After(exp) {
		return fmt.Sprintf("the ref's revision expired at %s (§3 \"Expiry\")", whenWords(exp)) + refAgain
	}
	return "this website issued no such ref to this Session's agent and User: it was altered or made up (copy it whole from the Poppy-Operation header of the browser's own response, A08), or another of the website's servers issued it to another agent's or User's Session"
}

// revisionExpiry reads expires_at from a revision of the kit's form: its
// Unix seconds, "-", and random characters (storekit.NewRevision,
// internal/computed).
func revisionExpiry(rev string) (time.Time, bool) {
	secs, _, ok := strings.Cut(rev, "-")
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}

// staleWhy says, beside the operation a lookup returns, that ref named an
// earlier revision of it: the terms changed since the browser got it.
func (e *Endpoint) staleWhy(ref string, cur store.Operation) string {
	if !e.explaining() {
		return ""
	}
	_, rev, ok := storekit.SplitRef(ref)
	if !ok || rev == cur.Revision {
		return ""
	}
	return fmt.Sprintf("the ref names revision %q, which is stale: the operation's current revision is %q (its terms changed, §3 \"New terms\"); these are the current terms, and they need an approval of their own", rev, cur.Revision)
}

// check3Why says why an approval failed check 3 and the answer is the
// operation's current revision (W100).
func (e *Endpoint) check3Why(a store.Approval, cur store.Operation) string {
	if !e.explaining() {
		return ""
	}
	return fmt.Sprintf("check 3 failed: the approval names revision %q of operation %q, and the ref's operation is %q at revision %q "+
		"(an approval's revision must be one the website returned for the ref's operation, unexpired, its approval not used up); "+
		"nothing was recorded: these are the current terms, and they need an approval of their own (A29)", a.Revision, a.OperationID, cur.ID, cur.Revision)
}

// recordWhy says why an approval of ref was answered invalid_request:
// the store's reply does not say which check found the ref unusable, so
// the ref is looked up to tell.
func (e *Endpoint) recordWhy(ctx context.Context, session webkit.Session, ref string, a store.Approval, reply storedriver.RecordReply) string {
	if !e.explaining() {
		return ""
	}
	owner, now := session.Owner(), e.now()
	rec, found, err := e.store().Lookup(ctx, owner, ref, now)
	var words string
	switch {
	case err != nil:
		words = "the ref can't be used in this Session (the website could not look it up again to say why)"
	case reply.Result == storedriver.OperationExpired && found:
		words = fmt.Sprintf("the operation expired at %s: an approval of it is no longer accepted (§6 check 3, W101)", whenWords(rec.Current.ExpiresAt)) + refAgain
	case found && rec.Owner.Account == owner.Account && !rec.Expired && a.OperationID != rec.Current.ID:
		words = fmt.Sprintf("the approval names operation_id %q, and the ref's operation is %q: approve the operation the ref gave", a.OperationID, rec.Current.ID)
	case found:
		words = refWords(ref, owner, &rec, now)
	default:
		words = refWords(ref, owner, nil, now)
	}
	return explain.Clip(words)
}
