// Package archtest checks the house's shape (issue 36): imports run
// downhill, from the packages a website imports last to those it imports
// first, and no package wires another through a function variable set in
// its init.
package archtest

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/opsgate/opsgate"

// layer is the rank of a public package by its top-level folder: a
// package may import only packages of its own rank or below
// (demo, e2e → endpoint → webkit → pages → templates; webkit → store).
var layer = map[string]int{
	"templates": 0,
	"pages":     1,
	"store":     1,
	"webkit":    2,
	"endpoint":  3,
}

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", module+"/...")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "GOWORK=off") // the kit's own module
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

func public(r string) bool {
	return r != "" && !strings.HasPrefix(r, "internal/") && !strings.Contains(r, "/internal/")
}

func rankOf(r string) (int, bool) {
	top, _, _ := strings.Cut(r, "/")
	n, ok := layer[top]
	return n, ok
}

// TestImportsRunDownhill: no public package depends, directly or through
// internal packages, on a public package of a higher layer (the gateway
// once sat in webkit and imported endpoint, which imports webkit).
func TestImportsRunDownhill(t *testing.T) {
	for _, p := range listPackages(t) {
		r, _ := rel(p.ImportPath)
		if !public(r) {
			continue
		}
		mine, ok := rankOf(r)
		if !ok {
			t.Errorf("%s: a public package outside the layers %v", r, layer)
			continue
		}
		for _, d := range p.Deps {
			dr, ok := rel(d)
			if !ok || !public(dr) {
				continue
			}
			if theirs, ok := rankOf(dr); ok && theirs > mine {
				t.Errorf("%s depends on %s, a layer above it", r, dr)
			}
		}
	}
}

// TestNoHooksSetInInit: no package's init assigns to another package's
// variable (the back doors internal/kitlink, jose.ResolveKey and
// storekit.NewMemory were function variables set so).
func TestNoHooksSetInInit(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range listPackages(t) {
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			imported := map[string]bool{}
			for _, is := range f.Imports {
				path := strings.Trim(is.Path.Value, `"`)
				n := path[strings.LastIndex(path, "/")+1:]
				if is.Name != nil {
					n = is.Name.Name
				}
				imported[n] = true
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Name.Name != "init" || fn.Recv != nil || fn.Body == nil {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					as, ok := n.(*ast.AssignStmt)
					if !ok {
						return true
					}
					for _, lhs := range as.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok {
							if id, ok := sel.X.(*ast.Ident); ok && imported[id.Name] {
								t.Errorf("%s: init sets %s.%s, a variable of another package", fset.Position(as.Pos()), id.Name, sel.Sel.Name)
							}
						}
					}
					return true
				})
			}
		}
	}
}
