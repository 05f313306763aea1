package memstore_test

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

// threadCPU returns a clock of the calling OS thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so that a call's cost is measured without the
// time other processes on a shared machine take from it. The caller's
// goroutine is locked to its thread until done is called.
func threadCPU() (now func() time.Duration, done func()) {
	runtime.LockOSThread()
	return func() time.Duration {
		var ts syscall.Timespec
		const clockThreadCPUTimeID = 3
		if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
			return 0
		}
		return time.Duration(ts.Nano())
	}, runtime.UnlockOSThread
}
