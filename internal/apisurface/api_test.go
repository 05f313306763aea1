package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite api.txt from the code")

// TestAPIFileIsCurrent keeps api.txt, the library packages' exported names
// with their signatures, equal to the code, so that every change to the
// public surface shows in the diff of the commit that makes it (issue 23:
// a surface change is seen). After a change on purpose:
//
//	go test ./internal/apisurface -update
func TestAPIFileIsCurrent(t *testing.T) {
	got, err := API("../..")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("api.txt", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("api.txt")
	if err != nil {
		t.Fatalf("%v (run: go test ./internal/apisurface -update)", err)
	}
	if got == string(want) {
		return
	}
	gotLines, wantLines := set(got), set(string(want))
	var added, removed []string
	for l := range gotLines {
		if !wantLines[l] {
			added = append(added, "+ "+l)
		}
	}
	for l := range wantLines {
		if !gotLines[l] {
			removed = append(removed, "- "+l)
		}
	}
	t.Errorf("the public API differs from internal/apisurface/api.txt; if on purpose, run: go test ./internal/apisurface -update\n%s\n%s",
		strings.Join(removed, "\n"), strings.Join(added, "\n"))
}

func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		m[l] = true
	}
	return m
}
