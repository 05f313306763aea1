// Command importgroups checks that every Go file of the kit groups its
// imports as the standard library, then other modules, then the kit's own
// packages (github.com/opsgate/opsgate/...), each group apart from the
// next by a blank line and holding only its own kind. CI runs it; -w
// rewrites the files that don't.
//
//	go run ./internal/importgroups        # lists the files, exits 1 if any
//	go run ./internal/importgroups -w     # rewrites them
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const module = "github.com/opsgate/opsgate"

func main() {
	write := flag.Bool("w", false, "rewrite the files whose imports are not grouped")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	bad, err := check(root, *write)
	if err != nil {
		fmt.Fprintln(os.Stderr, "importgroups:", err)
		os.Exit(2)
	}
	for _, f := range bad {
		fmt.Println(f)
	}
	if len(bad) > 0 && !*write {
		fmt.Fprintf(os.Stderr, "importgroups: %d files mix import groups (standard library, other modules, %s/...): go run ./internal/importgroups -w\n", len(bad), module)
		os.Exit(1)
	}
}

// check walks root and returns the files whose imports are not grouped,
// rewriting them when write is set.
func check(root string, write bool) ([]string, error) {
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_templ.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, changed, err := regroup(path, src)
		if err != nil {
			return err
		}
		if changed {
			bad = append(bad, path)
			if write {
				return os.WriteFile(path, out, 0o644)
			}
		}
		return nil
	})
	return bad, err
}

// kind is an import's group: 0 the standard library, 1 another module,
// 2 the kit's own.
func kind(path string) int {
	first, _, _ := strings.Cut(path, "/")
	switch {
	case path == module || strings.HasPrefix(path, module+"/"):
		return 2
	case strings.Contains(first, "."):
		return 1
	}
	return 0
}

// regroup returns src with its one import block grouped, and whether that
// changed it. A file with no parenthesised import block, or with comments
// inside it, is left as it is.
func regroup(name string, src []byte) ([]byte, bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, false, err
	}
	var decl *ast.GenDecl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT && g.Lparen.IsValid() {
			if decl != nil {
				return src, false, nil // two blocks: leave it to a person
			}
			decl = g
		}
	}
	if decl == nil || len(decl.Specs) < 2 {
		return src, false, nil
	}
	start, end := fset.Position(decl.Lparen).Offset+1, fset.Position(decl.Rparen).Offset
	for _, c := range f.Comments {
		if p := fset.Position(c.Pos()).Offset; p > start && p < end {
			return src, false, nil
		}
	}
	var groups [3][]string
	for _, s := range decl.Specs {
		is := s.(*ast.ImportSpec)
		p, _ := strconv.Unquote(is.Path.Value)
		line := is.Path.Value
		if is.Name != nil {
			line = is.Name.Name + " " + line
		}
		groups[kind(p)] = append(groups[kind(p)], "\t"+line)
	}
	var b bytes.Buffer
	b.WriteString("\n")
	sep := false
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		if sep {
			b.WriteString("\n")
		}
		slices.SortFunc(g, func(x, y string) int { return strings.Compare(pathOf(x), pathOf(y)) })
		b.WriteString(strings.Join(g, "\n") + "\n")
		sep = true
	}
	out := append(append(append([]byte{}, src[:start]...), b.Bytes()...), src[end:]...)
	if out, err = format.Source(out); err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, src), nil
}

func pathOf(line string) string {
	_, p, _ := strings.Cut(line, `"`)
	return p
}
