package webkit

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every rule ID the code and tests cite is explained in RULES.md, the
// file users have: a comment that says "W64" must lead somewhere.
func TestRulesExplainEveryCitedID(t *testing.T) {
	rules, err := os.ReadFile("RULES.md")
	if err != nil {
		t.Fatal(err)
	}
	explained := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ([WA][0-9]{2,3}) \|`).FindAllStringSubmatch(string(rules), -1) {
		explained[m[1]] = true
	}
	if len(explained) < 200 {
		t.Fatalf("RULES.md explains %d rules", len(explained))
	}
	for _, url := range []string{"https://personalagentprotocol.org/docs/1.0/extensions/operations", "https://personalagentprotocol.org/docs/1.0/spec"} {
		if !strings.Contains(string(rules), url) {
			t.Errorf("RULES.md does not link %s", url)
		}
	}
	id := regexp.MustCompile(`\b[WA][0-9]{2,3}\b`)
	root := ".."
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, cited := range id.FindAllString(string(b), -1) {
			if !explained[cited] {
				t.Errorf("%s cites %s, which RULES.md does not explain", path, cited)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
