//go:build race

package httpapi

// raceEnabled: the race detector allocates, and makes sync.Pool drop items
// at random, so allocation counts are not the program's.
const raceEnabled = true
