package store_test

import (
	"testing"

	"github.com/opsgate/opsgate/store/storetest"
)

func BenchmarkMemory(b *testing.B) {
	storetest.Bench(b, memoryHarness)
}
