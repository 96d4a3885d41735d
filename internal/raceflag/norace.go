//go:build !race

// Package raceflag tells whether the race detector is built in. The race
// detector allocates, and makes sync.Pool drop items at random, so the
// allocation tests (names ending in Allocations, which make test-allocs
// runs without it) skip themselves when it is.
package raceflag

// Enabled is true in a build with the race detector.
const Enabled = false
