//go:build race

package httpapi

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
