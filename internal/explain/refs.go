package explain

import (
	"crypto/sha256"
	"sync"
	"time"
)

// The refs a Gate issued, remembered so that a refused ref can be told
// apart: one issued to another agent's or User's Session, one of this
// Session's agent and User whose operation was forgotten, or one the site
// never issued (altered or made up). A store files an operation under its
// owner's agent and User only (and a computed ref opens only for them), so
// only the Gate that issued a ref can say whose it was.
//
// Only a Kit with ExplainRefusals remembers its refs, in this process:
// a ref issued by another server of the website is not known here, and
// is explained as one the site did not issue. The memory is bounded
// (maxIssued refs; an arbitrary one is forgotten to make room), and keeps
// of each ref only its digest, digests of its owner and its expiry.

// maxIssued bounds the refs remembered.
const maxIssued = 1 << 14

// Issue is what is remembered of an issued ref.
type Issue struct {
	agent, user, account [8]byte // digests of the owner's parts
	Expires              time.Time
}

// Owner says how the owner of an issued ref compares with another's:
// which of agent, User and account differ.
func (i Issue) Owner(agent, user, account string) (sameAgent, sameUser, sameAccount bool) {
	return i.agent == short(agent), i.user == short(user), i.account == short(account)
}

var issued struct {
	sync.Mutex
	m map[[32]byte]Issue
}

func short(s string) [8]byte {
	sum := sha256.Sum256([]byte(s))
	return [8]byte(sum[:8])
}

// Issued remembers that ref was issued to agent's User user (signed in to
// account, or "") and expires at expires.
func Issued(ref, agent, user, account string, expires time.Time) {
	key := sha256.Sum256([]byte(ref))
	i := Issue{agent: short(agent), user: short(user), account: short(account), Expires: expires}
	issued.Lock()
	defer issued.Unlock()
	if issued.m == nil {
		issued.m = make(map[[32]byte]Issue)
	}
	if _, ok := issued.m[key]; !ok && len(issued.m) >= maxIssued {
		for k := range issued.m { // an arbitrary one makes room
			delete(issued.m, k)
			break
		}
	}
	issued.m[key] = i
}

// IssuedRef returns what is remembered of ref, if it was issued here.
func IssuedRef(ref string) (Issue, bool) {
	key := sha256.Sum256([]byte(ref))
	issued.Lock()
	defer issued.Unlock()
	i, ok := issued.m[key]
	return i, ok
}
