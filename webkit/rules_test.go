package webkit

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateRules = flag.Bool("update-rules", false, "rewrite RULES.md's \"built in\" and \"proven by\" columns from the files that cite each rule")

// Every rule ID the code and tests cite is explained in RULES.md, the
// file users have: a comment that says "W64" must lead somewhere, in Go,
// Lua, JavaScript or templ.
func TestRulesExplainEveryCitedID(t *testing.T) {
	rules, err := os.ReadFile("RULES.md")
	if err != nil {
		t.Fatal(err)
	}
	explained := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| ((?:[WA][0-9]{2,3}|[PM][0-9]{2})) \|`).FindAllStringSubmatch(string(rules), -1) {
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
	built, proven := citations(t, "..")
	for _, m := range []map[string][]string{built, proven} {
		for cited, files := range m {
			for _, f := range files {
				if !explained[cited] {
					t.Errorf("%s cites %s, which RULES.md does not explain", f, cited)
				}
			}
		}
	}
}

// ruleID is a rule's ID as the code cites it (W64, A07, P44, M46; P256
// and P384 are curves).
var ruleID = regexp.MustCompile(`\b(?:[WA][0-9]{2,3}|[PM][0-9]{2})\b`)

// citations maps each rule ID to the files under root that cite it, as
// slash-separated paths relative to root: the code (Go, Lua, JavaScript
// and templ sources; not the Go that templ generates from them) in built,
// the tests in proven. This file names IDs only as examples.
func citations(t *testing.T, root string) (built, proven map[string][]string) {
	t.Helper()
	built, proven = map[string][]string{}, map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(name, "_templ.go"):
			return nil
		case strings.HasSuffix(name, ".go"), strings.HasSuffix(name, ".lua"), strings.HasSuffix(name, ".js"), strings.HasSuffix(name, ".templ"):
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "webkit/rules_test.go" {
			return nil
		}
		into := built
		if strings.HasSuffix(name, "_test.go") || isSuite(rel) {
			into = proven
		}
		for _, id := range ruleID.FindAllString(string(b), -1) {
			if !slices.Contains(into[id], rel) {
				into[id] = append(into[id], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string][]string{built, proven} {
		for _, files := range m {
			slices.Sort(files)
		}
	}
	return built, proven
}

// suites are the folders whose Go files are test cases, though not named
// _test.go: the store conformance suite every store runs from its own
// tests (storetest.Run). A rule they cite is proven there.
var suites = []string{"internal/storetest/"}

// isSuite reports whether rel (slash-separated, from the repository's
// root) is a file of a conformance suite.
func isSuite(rel string) bool {
	for _, dir := range suites {
		if strings.HasPrefix(rel, dir) && strings.HasSuffix(rel, ".go") {
			return true
		}
	}
	return false
}

// The suites listed above still exist and hold test cases, so that the
// rules they prove are never listed as built there, nor as unproven.
func TestRulesSuitesAreSuites(t *testing.T) {
	for _, dir := range suites {
		files, err := filepath.Glob(filepath.Join("..", filepath.FromSlash(dir), "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("suite %s: no Go files (%v)", dir, err)
		}
		cases := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cases += strings.Count(string(b), "*testing.T")
		}
		if cases == 0 {
			t.Errorf("suite %s holds no test cases", dir)
		}
	}
}

// fileList is a "built in" or "proven by" cell: the first five files,
// then how many more ("–" for none).
func fileList(files []string) string {
	if len(files) == 0 {
		return "–"
	}
	shown := make([]string, 0, 5)
	for _, f := range files[:min(len(files), 5)] {
		shown = append(shown, "`"+f+"`")
	}
	cell := strings.Join(shown, ", ")
	if len(files) > 5 {
		cell += fmt.Sprintf(" and %d more", len(files)-5)
	}
	return cell
}

// RULES.md says, for every rule, which files build it and which prove it:
// the tables must name the files that cite each ID today, so a reader who
// follows them finds the rule there. After citing a rule somewhere new,
// run: go test ./webkit -run TestRulesListTheFilesThatCiteThem -update-rules
func TestRulesListTheFilesThatCiteThem(t *testing.T) {
	rules, err := os.ReadFile("RULES.md")
	if err != nil {
		t.Fatal(err)
	}
	built, proven := citations(t, "..")
	row := regexp.MustCompile(`^\| ((?:[WA][0-9]{2,3}|[PM][0-9]{2})) \|`)
	lines := strings.Split(string(rules), "\n")
	changed := 0
	for i, line := range lines {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// | ID | level | the rule | built in | proven by |
		cells := strings.Split(line, " | ")
		if len(cells) != 5 || !strings.HasSuffix(cells[4], " |") {
			t.Errorf("RULES.md line %d: a rule's row has 5 cells: %.80s", i+1, line)
			continue
		}
		id := m[1]
		want := strings.Join(append(cells[:3:3], fileList(built[id]), fileList(proven[id])+" |"), " | ")
		if line == want {
			continue
		}
		changed++
		if *updateRules {
			lines[i] = want
			continue
		}
		if got := cells[3]; got != fileList(built[id]) {
			t.Errorf("%s is built in %s, RULES.md says %s", id, fileList(built[id]), got)
		}
		if got := strings.TrimSuffix(cells[4], " |"); got != fileList(proven[id]) {
			t.Errorf("%s is proven by %s, RULES.md says %s", id, fileList(proven[id]), got)
		}
	}
	if changed > 0 && *updateRules {
		if err := os.WriteFile("RULES.md", []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %d rows of RULES.md", changed)
	} else if changed > 0 {
		t.Errorf("%d rows of RULES.md name other files than cite their rule: go test ./webkit -run TestRulesListTheFilesThatCiteThem -update-rules", changed)
	}
}
