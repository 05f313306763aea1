// Command apisurface counts the exported names of the kit's library
// packages, as `go doc -all` shows them: each exported constant,
// variable, function, type, method, struct field and interface method.
// CI prints it, so that a change to the public surface is seen.
//
//	go run ./internal/apisurface          # a line per package, then the totals
//	go run ./internal/apisurface -names   # every name
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// core is the path every gated request takes.
var core = map[string]bool{"webkit": true, "endpoint": true, "store": true, "store/redisstore": true}

func main() {
	names := flag.Bool("names", false, "print every exported name")
	maxCore := flag.Int("max-core", 0, "fail when the core path has more names than this (0: don't check)")
	maxAll := flag.Int("max-all", 0, "fail when all library packages have more names than this (0: don't check)")
	flag.Parse()
	root := "."
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		base := d.Name()
		if p != root && (strings.HasPrefix(base, ".") || base == "testdata") {
			return filepath.SkipDir
		}
		top := strings.SplitN(filepath.ToSlash(p), "/", 2)[0]
		if top == "demo" || top == "e2e" || top == "internal" || strings.Contains(filepath.ToSlash(p), "/internal") {
			return filepath.SkipDir
		}
		dirs = append(dirs, p)
		return nil
	})
	sort.Strings(dirs)
	var total, coreTotal int
	for _, dir := range dirs {
		pkgNames, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(2)
		}
		if pkgNames == nil {
			continue
		}
		rel := filepath.ToSlash(dir)
		total += len(pkgNames)
		mark := ""
		if core[rel] {
			coreTotal += len(pkgNames)
			mark = " (core)"
		}
		fmt.Printf("%5d %s%s\n", len(pkgNames), rel, mark)
		if *names {
			for _, n := range pkgNames {
				fmt.Printf("        %s\n", n)
			}
		}
	}
	fmt.Printf("exported names: core path %d, all library packages %d\n", coreTotal, total)
	if (*maxCore > 0 && coreTotal > *maxCore) || (*maxAll > 0 && total > *maxAll) {
		fmt.Fprintf(os.Stderr, "apisurface: over the limit (core ≤ %d, all ≤ %d)\n", *maxCore, *maxAll)
		os.Exit(1)
	}
}

// count returns the exported names of the package in dir; nil when dir
// holds no library package.
func count(dir string) ([]string, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pkgs := map[string][]*ast.File{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
	}
	var out []string
	for name, files := range pkgs {
		if name == "main" {
			continue
		}
		p, err := doc.NewFromFiles(fset, files, "x/"+name)
		if err != nil {
			return nil, err
		}
		values := func(vs []*doc.Value) {
			for _, v := range vs {
				for _, n := range v.Names {
					if ast.IsExported(n) {
						out = append(out, n)
					}
				}
			}
		}
		values(p.Consts)
		values(p.Vars)
		for _, f := range p.Funcs {
			out = append(out, f.Name+"()")
		}
		for _, t := range p.Types {
			out = append(out, t.Name)
			values(t.Consts)
			values(t.Vars)
			for _, f := range t.Funcs {
				out = append(out, f.Name+"()")
			}
			for _, m := range t.Methods {
				out = append(out, t.Name+"."+m.Name+"()")
			}
			for _, spec := range t.Decl.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				switch x := ts.Type.(type) {
				case *ast.StructType:
					for _, f := range x.Fields.List {
						for _, n := range f.Names {
							if ast.IsExported(n.Name) {
								out = append(out, t.Name+"."+n.Name)
							}
						}
						if len(f.Names) == 0 { // embedded
							if id := embeddedName(f.Type); ast.IsExported(id) {
								out = append(out, t.Name+"."+id)
							}
						}
					}
				case *ast.InterfaceType:
					for _, m := range x.Methods.List {
						for _, n := range m.Names {
							if ast.IsExported(n.Name) {
								out = append(out, t.Name+"."+n.Name+"()")
							}
						}
					}
				}
			}
		}
	}
	if out == nil && len(pkgs) == 0 {
		return nil, nil
	}
	sort.Strings(out)
	return out, nil
}

func embeddedName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.StarExpr:
		return embeddedName(x.X)
	case *ast.SelectorExpr:
		return x.Sel.Name
	}
	return ""
}
