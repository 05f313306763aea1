package webkit

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/opsgate/opsgate/internal/headers"
	"github.com/opsgate/opsgate/store"
)

func TestDeclineJSON(t *testing.T) {
	// §6 "Declining an approval": the members of the spec's example body.
	const spec = `{
  "operation_id": "cls_2Wq8",
  "revision": "1791487200-p9Lm3Rt6Vx1c",
  "reason": "Only the account holder can close this account.",
  "alternative": {
    "instructions": "The account holder can close the account in the Example app.",
    "references": [{ "type": "web", "url": "https://example.com/account/close" }]
  }
}`
	t.Run("W127 W129 the spec's decline round-trips", func(t *testing.T) {
		var d Decline
		if err := json.Unmarshal([]byte(spec), &d); err != nil {
			t.Fatal(err)
		}
		if d.Alternative == nil || len(d.Alternative.References) != 1 || d.Alternative.References[0].Type != "web" {
			t.Fatalf("decoded %+v", d)
		}
		got, _ := json.Marshal(d)
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(spec)); err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Fatalf("got  %s\nwant %s", got, want.String())
		}
	})
	t.Run("W127 W131 minimal decline has only the approval's IDs", func(t *testing.T) {
		got, _ := json.Marshal(Decline{OperationID: "o", Revision: "r"})
		if want := `{"operation_id":"o","revision":"r"}`; string(got) != want {
			t.Fatalf("got %s", got)
		}
	})
}

func TestExtensionsOperations(t *testing.T) {
	tests := []struct {
		name string
		ext  map[string]string
		want bool
	}{
		{"W09 declares 3", map[string]string{"operations": "3"}, true},
		{"W13 minor version 3.1 counts", map[string]string{"operations": "3.1"}, true},
		{"W13 other major version 2", map[string]string{"operations": "2"}, false},
		{"W13 other major version 4", map[string]string{"operations": "4"}, false},
		{"W13 other major version 30", map[string]string{"operations": "30"}, false},
		{"W13 no version", map[string]string{"operations": ""}, false},
		{"W11 not declared", map[string]string{"payments": "3"}, false},
		{"W11 nil", nil, false},
		{"name is case-sensitive", map[string]string{"Operations": "3"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := headers.DeclaresOperations(tt.ext); got != tt.want {
				t.Fatalf("Operations() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSession(t *testing.T) {
	signedOut := Session{ID: "ses_1", Agent: "https://agent.example/client", User: "u1"}
	if signedOut.Account != "" {
		t.Fatal("signed-out Session reports signed in")
	}
	if got := signedOut.Owner(); got != (store.Owner{Agent: "https://agent.example/client", User: "u1"}) {
		t.Fatalf("Owner() = %+v", got)
	}
	signedIn := signedOut
	signedIn.Account = "acct_9"
	if !(signedIn.Account != "") || signedIn.Owner().Account != "acct_9" {
		t.Fatalf("signed-in Session %+v", signedIn.Owner())
	}
}
