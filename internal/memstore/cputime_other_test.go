//go:build !linux

package memstore_test

import "time"

// threadCPU falls back to the wall clock where the thread's CPU time isn't
// at hand.
func threadCPU() (now func() time.Duration, done func()) {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }, func() {}
}
