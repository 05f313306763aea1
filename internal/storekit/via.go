package storekit

import "strings"

// The interfaces an operation's revisions are issued through, besides
// the website (operations-v3 §4 and §6 "APIs" and "MCP"). An operation
// is one action's, whichever interface returned it (§3: its operation_id
// identifies the action, so that at most once holds across them all,
// §7); each revision is one interface's, the one that returned it, and
// only that interface accepts an approval of it: the Company MUST NOT
// accept an approval of a website's operation at an API or MCP server,
// nor another interface's at `endpoint` (§6 "Websites"; P61, P62, M61,
// M62).
const (
	ViaAPI = "api"
	ViaMCP = "mcp"
)

// revisionSuffixLen is the length of a revision's part after its "-":
// NewRevision's 16 random characters, or a computed revision's 16
// (internal/computed).
const revisionSuffixLen = 16

// ViaRevision is rev, a website revision's name (NewRevision, or one a
// store computed), as interface via names it: "<expires>-<16>_<via>".
// A website's revision ("" via) keeps its name.
func ViaRevision(rev, via string) string {
	if via == "" {
		return rev
	}
	return rev + "_" + via
}

// RevisionVia is the interface whose revision rev is (ViaRevision): "" for
// the website's, "api" or "mcp" for another's. A name of any other shape
// (not one this kit issued) is the website's, which no other interface
// accepts.
func RevisionVia(rev string) string {
	dash := strings.IndexByte(rev, '-')
	if dash < 0 || len(rev) <= dash+1+revisionSuffixLen+1 || rev[dash+1+revisionSuffixLen] != '_' {
		return ""
	}
	return rev[dash+1+revisionSuffixLen+1:]
}

// MaxAnswer is the longest answer a store keeps with a performed
// operation (storedriver.WithAnswer): an API's response, or an MCP tool's
// result, that a retry with the same approval gets again (§7 P90, M90).
// A longer one is not kept: the retry then gets an answer that says the
// same (the operation's status), as §7 allows.
const MaxAnswer = 8 << 10
