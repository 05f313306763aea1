//go:build race

package store_test

// raceSlowdown is how much slower the race detector makes the store's calls.
const raceSlowdown = 10
