//go:build !linux

package redistest

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// Pausing a server is for Linux only here; nil makes Pause say so.
var sigStop, sigCont os.Signal
