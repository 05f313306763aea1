package agentside

import (
	"os"
	"path/filepath"
	"testing"
)

// An agent that keeps its key file keeps its key and kid across runs; a
// new file makes a new key, readable by the user only.
func TestLoadAgentKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "keys", "alice.pem")
	first, created, err := LoadAgentKeys("https://agent.example/agent.json", path)
	if err != nil || !created {
		t.Fatalf("first run: %v, created %v", err, created)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	again, created, err := LoadAgentKeys("https://agent.example/agent.json", path)
	if err != nil || created {
		t.Fatalf("second run: %v, created %v", err, created)
	}
	if first.Kid() != again.Kid() || string(first.JWKS()) != string(again.JWKS()) || first.Alg() != "ES256" {
		t.Errorf("the key changed across runs: %s %s", first.JWKS(), again.JWKS())
	}
	if _, err := again.Delegate(0); err != nil {
		t.Fatal(err)
	}
	other, _, err := LoadAgentKeys("https://agent.example/agent.json", filepath.Join(filepath.Dir(path), "bob.pem"))
	if err != nil || other.Kid() == first.Kid() {
		t.Errorf("another file, the same key: %v", err)
	}
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadAgentKeys("https://agent.example/agent.json", path); err == nil {
		t.Error("a file that is not a key was read")
	}
}
