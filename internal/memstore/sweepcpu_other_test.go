//go:build !linux

package memstore

import "time"

var cpuStart = time.Now()

// threadCPUTime falls back to the wall clock where the thread's CPU time
// isn't at hand.
func threadCPUTime() time.Duration { return time.Since(cpuStart) }
