package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -check-config says ok for a good file and names the line of a bad one.
func TestCheckConfig(t *testing.T) {
	t.Setenv("GW_CMD_HASH", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("h"), 64)))
	t.Setenv("GW_CMD_ENC", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("e"), 32)))
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(`origin: https://shop.example
upstream: http://127.0.0.1:3000
cookie_keys:
  - {hash_env: GW_CMD_HASH, encryption_env: GW_CMD_ENC}
actions:
  - match: POST /orders/{order}/cancel
    key: "cancel:{path.order}"
    terms: {order_id: "{path.order}"}
    summary: "Cancel order {path.order}."
`), 0o644)
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"-config", good, "-check-config"}, &out, &errs); err != nil || !strings.HasPrefix(out.String(), good+": ok\n") {
		t.Fatalf("%v %q %s", err, out.String(), errs.String())
	}
	// What agents' browsers may do: the gated action with its line, and
	// the refusal of every other unsafe request.
	for _, want := range []string{"gated (line 6): POST /orders/{order}/cancel", "refused (403): every other POST", "on the approved repeat alone"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-check-config does not say %q:\n%s", want, out.String())
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("origin: https://shop.example\nupstream: http://127.0.0.1:3000\nactions:\n  - match: POST /orders/{order}/cancel\n    key: \"cancel:{path.id}\"\n"), 0o644)
	err := run(context.Background(), []string{"-config", bad, "-check-config"}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), bad+":5: actions[0].key:") {
		t.Fatalf("got %v", err)
	}
}
