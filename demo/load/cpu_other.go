//go:build !unix

package main

import "time"

// processCPU: not measured where getrusage is missing.
func processCPU() (time.Duration, bool) { return 0, false }
