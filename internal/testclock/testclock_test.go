package testclock

import (
	"testing"
	"time"
)

func TestAt(t *testing.T) {
	t0 := time.Date(2026, 10, 8, 19, 0, 0, 0, time.UTC)
	c := At(t0)
	if got := c.Now(); !got.Equal(t0) || got.Location() != time.UTC {
		t.Fatalf("Now = %v, want %v", got, t0)
	}
	c.Add(time.Minute)
	if got := c.Now(); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after Add: %v", got)
	}
	c.Set(t0)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("after Set: %v", got)
	}
}

func TestReal(t *testing.T) {
	c := Real()
	c.Add(time.Hour)
	if d := time.Until(c.Now()); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("Real clock after Add(1h) is %v ahead", d)
	}
}
