//go:build race

package raceflag

// Enabled is true in a build with the race detector.
const Enabled = true
