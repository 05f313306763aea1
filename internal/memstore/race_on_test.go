//go:build race

package memstore_test

// raceSlowdown is how much slower the race detector makes the store's calls.
const raceSlowdown = 10
