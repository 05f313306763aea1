package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr kills the server when the test binary dies, so that a crashed
// test run leaves no redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// The signals that pause and resume a server (Instance.Pause, Resume).
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
