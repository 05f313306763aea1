package opsendpoint

import (
	"testing"

	"github.com/opsgate/opsgate/internal/headers"
)

// W14: the kept verdict on the last Poppy-Extensions line is the one
// parsing it gives, whichever line came before, and a repeated line costs
// no allocation.
func TestDeclaresOperationsKeepsTheVerdict(t *testing.T) {
	lines := [][]string{
		{`"operations";v="3"`}, {`"operations";v="2"`}, {`"operations";v="3"`}, {`operations;v=3.1`},
		{`"operations";v="4"`}, {`"operations"`}, {`"operations";v=`}, {`"operations";v="2"`, `"operations";v="3"`},
		{`"other";v="1"`}, nil, {`"operations";v="3"`}, {`"operations";v="3"`},
	}
	for round := range 2 {
		for _, l := range lines {
			ext, err := headers.ParseExtensions(l)
			want := err == nil && headers.DeclaresOperations(ext)
			if got := declaresOperations(l); got != want {
				t.Errorf("round %d: %q: %v, parsing says %v", round, l, got, want)
			}
		}
	}
	line := []string{`"operations";v="3"`}
	declaresOperations(line)
	if n := testing.AllocsPerRun(100, func() { declaresOperations(line) }); n != 0 {
		t.Errorf("a repeated line: %v allocations", n)
	}
}
