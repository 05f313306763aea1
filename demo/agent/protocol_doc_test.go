package main

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/agentside"
	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/internal/jose"
	"github.com/opsgate/opsgate/store"
)

// decode returns a compact JWS's JOSE header and claims.
func decode(t *testing.T, tok string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(tok, ".")
	for i, v := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(raw, v) != nil {
			t.Fatalf("part %d of %q", i, tok)
		}
	}
	return header, claims
}

// PROTOCOL.md's decoded examples are what the agent's side makes: the same
// members in each JOSE header and claims set, the same typ; its
// Poppy-Approval parses; and its error_description examples are the kit's
// own words.
func TestProtocolDocExamples(t *testing.T) {
	doc, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string]map[string]any{}
	for _, m := range regexp.MustCompile("(?s)<!-- example: ([a-z ]+) -->\n```json\n(.*?)\n```").FindAllSubmatch(doc, -1) {
		var v map[string]any
		if err := json.Unmarshal(m[2], &v); err != nil {
			t.Fatalf("example %s: %v", m[1], err)
		}
		examples[string(m[1])] = v
	}
	keys, err := agentside.NewAgentKeys("https://agent.example/poppy/agent.json", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	d, err := keys.Delegate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := d.SessionJWT(agentside.SessionClaims{Audience: "http://localhost:8080", SID: "ses_1", User: "usr_alice", AccessToken: "at"})
	if err != nil {
		t.Fatal(err)
	}
	join, err := d.BrowserAssertion(agentside.BrowserClaims{SessionClaims: agentside.SessionClaims{Audience: "http://localhost:8080/poppy/join", SID: "ses_1", User: "usr_alice"},
		ReturnTo: "http://localhost:8080/", Extensions: `"operations";v="3"`})
	if err != nil {
		t.Fatal(err)
	}
	real := map[string]string{"delegation": d.Compact(), "session": sess, "join": join}
	for name, tok := range real {
		h, c := decode(t, tok)
		for part, got := range map[string]map[string]any{"header": h, "claims": c} {
			ex, ok := examples[name+" "+part]
			if !ok {
				t.Errorf("PROTOCOL.md has no decoded %s %s", name, part)
				continue
			}
			if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(ex)); !slices.Equal(g, w) {
				t.Errorf("the %s's %s has %v; PROTOCOL.md shows %v", name, part, g, w)
			}
			if part == "header" && ex["typ"] != got["typ"] {
				t.Errorf("the %s's typ is %v; PROTOCOL.md shows %v", name, got["typ"], ex["typ"])
			}
		}
	}
	for _, line := range regexp.MustCompile(`(?m)^Poppy-Approval: (.*)$`).FindAllStringSubmatch(string(doc), -1) {
		a, err := headers.ParseApproval([]string{line[1]})
		if err != nil || headers.ValidateApproval(a) != nil || (a.Approver == store.ApproverAgent && a.InputType != "") {
			t.Errorf("PROTOCOL.md's Poppy-Approval %q: %+v %v", line[1], a, err)
		}
	}
	aud, _ := json.Marshal(jose.AudienceWords([]string{"http://127.0.0.1:8080"}, "http://localhost:8080"))
	if !strings.Contains(string(doc), strings.Trim(string(aud), `"`)) {
		t.Errorf("PROTOCOL.md's aud example is not the kit's words: %s", aud)
	}
}
