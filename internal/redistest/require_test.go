package redistest_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/opsgate/opsgate/internal/redistest"
)

// recorder is a testing.TB that notes whether the test skipped or failed.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run runs f on a recorder, on a goroutine of its own (Goexit ends it).
func run(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r
}

// A replica that can't start skips the test, and fails it when
// OPSGATE_REQUIRE names redis: CI can't pass a durability test by skipping.
func TestReplicaRequired(t *testing.T) {
	bad := &redistest.Instance{Addr: "127.0.0.1:no-such-port"} // redis-server refuses --replicaof with it
	start := func(tb testing.TB) { redistest.Replica(tb, bad) }

	t.Setenv("OPSGATE_REQUIRE", "")
	if r := run(t, start); !r.skipped || r.failed {
		t.Errorf("without OPSGATE_REQUIRE: skipped %v failed %v (%s), want a skip", r.skipped, r.failed, r.msg)
	}
	t.Setenv("OPSGATE_REQUIRE", "chromium,redis")
	if r := run(t, start); !r.failed || r.skipped {
		t.Errorf("OPSGATE_REQUIRE=chromium,redis: skipped %v failed %v (%s), want a failure", r.skipped, r.failed, r.msg)
	}
}
