package memstore_test

import (
	"testing"

	"github.com/opsgate/opsgate/internal/storetest"
)

func BenchmarkMemory(b *testing.B) {
	storetest.Bench(b, memoryHarness)
}
