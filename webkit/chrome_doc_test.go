package webkit

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The kit's stylesheet names its variables --opsgate-… (a website's own
// --fg or --accent is not the kit's), and each is documented where a
// website reads about them: the comment at the top of opsgate.css and the
// doc of templates.Chrome (templates.Chrome), with its light and dark default.
func TestStylesheetVariablesAreDocumented(t *testing.T) {
	css, err := static.ReadFile("static/opsgate.css")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../templates/view.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(css)
	end := strings.Index(text, "*/")
	if !strings.HasPrefix(text, "/*") || end < 0 {
		t.Fatal("opsgate.css doesn't open with its comment block")
	}
	header, rules := text[:end], text[end:]
	defaults := map[string]bool{}
	for _, m := range cssVariable.FindAllStringSubmatch(rules, -1) {
		name := m[1]
		if !strings.HasPrefix(name, "--opsgate-") {
			t.Errorf("opsgate.css uses %s: the kit's variables are named --opsgate-…", name)
			continue
		}
		if m[2] == ":" && strings.HasPrefix(strings.TrimSpace(rules[strings.Index(rules, m[0])+len(m[0]):]), "light-dark(") {
			defaults[name] = true
		}
	}
	if len(defaults) < 5 {
		t.Fatalf("found only %d variables with a light-dark() default in opsgate.css: %v", len(defaults), defaults)
	}
	for name := range defaults {
		// name  what it colours  #light  #dark
		row := regexp.MustCompile(`(?m)^\s*(//\s*)?` + regexp.QuoteMeta(name) + `\s+\S.*#[0-9a-f]{6}\s+#[0-9a-f]{6}\s*$`)
		if !row.MatchString(header) {
			t.Errorf("the comment at the top of opsgate.css doesn't document %s with its light and dark default", name)
		}
		if !row.MatchString(string(doc)) {
			t.Errorf("the doc of templates.Chrome doesn't document %s with its light and dark default", name)
		}
	}
}

// cssVariable is a custom property's name, declared (followed by ":") or
// used (in var()).
var cssVariable = regexp.MustCompile(`(--[a-zA-Z0-9-]+)\s*([:),])`)
