package memstore

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPUTime is the calling OS thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), as store_test's threadCPU reads it.
func threadCPUTime() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
