//go:build race

package computed

// raceOn: the race detector allocates where the code alone does not.
const raceOn = true
