package views

import "time"

// SeenEntry is one request the shop saw from an agent or its browser,
// with the kit's decision and why (the "What the shop saw" page).
type SeenEntry struct {
	At       time.Time `json:"at"`
	From     string    `json:"from"` // "browser" (the joined browser) or "agent" (a Session JWT), or "join"
	SID      string    `json:"sid,omitempty"`
	Method   string    `json:"method"`
	Path     string    `json:"path"`
	Status   int       `json:"status"`
	Decision string    `json:"decision,omitempty"` // the kit's: route, outcome and reason
	Why      string    `json:"why,omitempty"`      // in words: the answer's error_description, or the kit's
	Ref      string    `json:"ref,omitempty"`      // the ref it gave or named, by its start
	// Unverified: the request's token was refused, so whose it is comes
	// from its own claims (iss, sub), which anyone could write.
	Unverified bool `json:"unverified,omitempty"`
}

// SeenView is the "What the shop saw" page: a joined browser sees the
// requests of its own agent and User only.
type SeenView struct {
	Joined  bool
	Agent   string
	User    string
	Entries []SeenEntry
}

// BenchScenario is one way the bench shop misbehaves, for one agent rule.
type BenchScenario struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Rows    []string `json:"rows"`    // the A rows it tests
	Does    string   `json:"does"`    // what the shop does wrong
	Correct string   `json:"correct"` // what a correct agent does
}

// BenchVerdict is how the agent did in its Session's scenario so far.
type BenchVerdict struct {
	Scenario string `json:"scenario"`
	Verdict  string `json:"verdict"` // "pass", "fail" or "pending"
	Why      string `json:"why"`
	// Timeline is what the bench saw, in order.
	Timeline []string `json:"timeline"`
}

// BenchView is the bench page.
type BenchView struct {
	Joined    bool
	SID       string
	Scenarios []BenchScenario
	Current   *BenchScenario
	Verdict   *BenchVerdict
}
