// Command apisurface counts the exported names of the kit's library
// packages, as `go doc -all` shows them: each exported constant,
// variable, function, type, method, struct field and interface method.
// CI prints it, so that a change to the public surface is seen.
//
//	go run ./internal/apisurface          # a line per package, then the totals
//	go run ./internal/apisurface -names   # every name
//	go run ./internal/apisurface -api     # every name with its signature, a line each (to diff)
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
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
	api := flag.Bool("api", false, "print only 'package name signature', a line per name, for a diff of two commits")
	maxCore := flag.Int("max-core", 0, "fail when the core path has more names than this (0: don't check)")
	maxAll := flag.Int("max-all", 0, "fail when all library packages have more names than this (0: don't check)")
	maxStore := flag.Int("max-store", 0, "fail when package store alone has more names than this (0: don't check)")
	flag.Parse()
	if *api {
		out, err := API(".")
		if err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(2)
		}
		fmt.Print(out)
		return
	}
	dirs := libraryDirs(".")
	var total, coreTotal, storeTotal int
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
		if rel == "store" {
			storeTotal = len(pkgNames)
		}
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
	if (*maxCore > 0 && coreTotal > *maxCore) || (*maxAll > 0 && total > *maxAll) || (*maxStore > 0 && storeTotal > *maxStore) {
		fmt.Fprintf(os.Stderr, "apisurface: over the limit (core ≤ %d, all ≤ %d, store ≤ %d)\n", *maxCore, *maxAll, *maxStore)
		os.Exit(1)
	}
}

// libraryDirs lists the folders under root that may hold a library
// package: not demo, e2e, internal or testdata.
func libraryDirs(root string) []string {
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		top := strings.SplitN(rel, "/", 2)[0]
		if top == "demo" || top == "e2e" || top == "internal" || strings.Contains(rel, "/internal") {
			return filepath.SkipDir
		}
		dirs = append(dirs, rel)
		return nil
	})
	sort.Strings(dirs)
	return dirs
}

// API is every exported name of the library packages under root with its
// signature, a line each: "package name signature".
func API(root string) (string, error) {
	var b strings.Builder
	for _, dir := range libraryDirs(root) {
		names, err := count(filepath.Join(root, dir))
		if err != nil {
			return "", err
		}
		for _, n := range names {
			fmt.Fprintf(&b, "%s %s\n", dir, n)
		}
	}
	return b.String(), nil
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
			out = append(out, f.Name+"() "+sig(fset, f.Decl))
		}
		for _, t := range p.Types {
			out = append(out, t.Name+" "+typeKind(fset, t.Decl))
			values(t.Consts)
			values(t.Vars)
			for _, f := range t.Funcs {
				out = append(out, f.Name+"() "+sig(fset, f.Decl))
			}
			for _, m := range t.Methods {
				out = append(out, t.Name+"."+m.Name+"() "+sig(fset, m.Decl))
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
								out = append(out, t.Name+"."+n.Name+" "+expr(fset, f.Type))
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
								out = append(out, t.Name+"."+n.Name+"() "+expr(fset, m.Type))
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

// sig is a function's declaration without its body or doc.
func sig(fset *token.FileSet, d *ast.FuncDecl) string {
	return expr(fset, &ast.FuncDecl{Recv: d.Recv, Name: d.Name, Type: d.Type})
}

// typeKind is what a type is: "struct", "interface", or its definition.
func typeKind(fset *token.FileSet, d *ast.GenDecl) string {
	for _, spec := range d.Specs {
		if ts, ok := spec.(*ast.TypeSpec); ok {
			switch ts.Type.(type) {
			case *ast.StructType:
				return "struct"
			case *ast.InterfaceType:
				return "interface"
			}
			if ts.Assign != 0 {
				return "= " + expr(fset, ts.Type)
			}
			return expr(fset, ts.Type)
		}
	}
	return ""
}

func expr(fset *token.FileSet, n any) string {
	var b strings.Builder
	printer.Fprint(&b, fset, n)
	return strings.Join(strings.Fields(b.String()), " ")
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
