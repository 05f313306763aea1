package testenv

import "testing"

func TestRequired(t *testing.T) {
	for _, tc := range []struct {
		env, what string
		want      bool
	}{
		{"", "redis", false},
		{"redis", "redis", true},
		{"redis,chromium", "chromium", true},
		{"redis-cluster", "redis", false},
	} {
		t.Setenv("OPSGATE_REQUIRE", tc.env)
		if got := Required(tc.what); got != tc.want {
			t.Errorf("OPSGATE_REQUIRE=%q Required(%q) = %v, want %v", tc.env, tc.what, got, tc.want)
		}
	}
}
