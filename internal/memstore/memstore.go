// Package memstore builds the memory store of store.NewMemory with the
// settings a test needs: a retention and caps of open operations
// (storekit.MemoryConfig). A website gets the
// defaults from store.NewMemory.
package memstore

import (
	"github.com/opsgate/opsgate/internal/storekit"
	"github.com/opsgate/opsgate/store"
)

// Config is what New sets; zero fields are the defaults, a negative cap
// is none.
type Config = storekit.MemoryConfig

// New returns a memory store with cfg (a store.Store and a
// ) and a function that reports how many records it
// holds (operations, actions, single-use marks and claim tokens).
func New(cfg Config) (st store.Store, size func() int) {
	s, size := storekit.NewMemory(cfg)
	return s.(store.Store), size
}
