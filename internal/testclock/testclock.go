// Package testclock is the clock of the module's own tests: it stands
// still until the test moves it, so that expiries (a revision's
// expires_at, a token's exp) are reached without sleeping. It is safe for
// concurrent use; pass c.Now where a Clock func() time.Time is wanted.
package testclock

import (
	"sync/atomic"
	"time"
)

// Clock is a test clock. Make one with At or Real.
type Clock struct {
	ns   atomic.Int64 // the time in Unix nanoseconds, or the offset from the real time
	real bool
}

// At returns a clock that stands at t until Add or Set moves it.
func At(t time.Time) *Clock {
	c := &Clock{}
	c.ns.Store(t.UnixNano())
	return c
}

// Real returns a clock that reads the real time plus whatever Add has
// added: for tests with a real browser or agent, whose own clocks run.
func Real() *Clock { return &Clock{real: true} }

// Now returns the clock's time, in UTC when it stands still.
func (c *Clock) Now() time.Time {
	if c.real {
		return time.Now().Add(time.Duration(c.ns.Load()))
	}
	return time.Unix(0, c.ns.Load()).UTC()
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves a clock made by At to t.
func (c *Clock) Set(t time.Time) {
	if c.real {
		panic("testclock: Set on a Real clock")
	}
	c.ns.Store(t.UnixNano())
}
