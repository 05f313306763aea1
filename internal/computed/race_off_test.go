//go:build !race

package computed

const raceOn = false
