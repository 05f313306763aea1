package main

import "testing"

func TestRegroup(t *testing.T) {
	mixed := `package p

import (
	"fmt"
	"github.com/opsgate/opsgate/store"
	"net/http"

	"github.com/opsgate/opsgate/webkit"
	x "github.com/a-h/templ"
)
`
	want := `package p

import (
	"fmt"
	"net/http"

	x "github.com/a-h/templ"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/webkit"
)
`
	got, changed, err := regroup("p.go", []byte(mixed))
	if err != nil || !changed || string(got) != want {
		t.Fatalf("regroup: changed %v err %v\n%s", changed, err, got)
	}
	if _, changed, err := regroup("p.go", got); err != nil || changed {
		t.Errorf("a grouped file changed again: %v %v", changed, err)
	}
	commented := "package p\n\nimport (\n\t\"fmt\"\n\t// why\n\t\"github.com/opsgate/opsgate/store\"\n)\n"
	if _, changed, _ := regroup("p.go", []byte(commented)); changed {
		t.Errorf("a block with a comment in it was rewritten")
	}
}
