package store_test

import (
	"context"
	"testing"

	"github.com/opsgate/opsgate/store"
	"github.com/opsgate/opsgate/store/storetest"
)

func memoryHarness(t testing.TB) storetest.Harness {
	m := store.NewMemory()
	return storetest.Harness{
		Store: m,
		// Two more "web servers" over the same Memory: one process, one
		// store, reached from several goroutines.
		Clients: []store.Store{m, m},
		Size:    func(context.Context) (int, error) { return m.Len(), nil },
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness { return memoryHarness(t) })
}

func TestMemoryZeroValue(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		var m store.Memory
		return storetest.Harness{Store: &m, Size: func(context.Context) (int, error) { return m.Len(), nil }}
	})
}
