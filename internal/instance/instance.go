// Package instance names the instances of outboxd's components when their
// configuration names none: a worker's consumer, the lease owner of a
// dispatcher or a reconciler. It is a leaf (the standard library only), so
// the domain packages use it without importing the flag parsing of
// internal/config or one another.
package instance

import (
	"os"
	"strconv"
	"sync/atomic"
)

// Namer hands out the default names of one kind of component in this
// process. Its zero value is not usable; use NewNamer. It is safe for
// concurrent use.
type Namer struct {
	fallback string
	n        atomic.Int64
}

// NewNamer returns a Namer whose names start with the hostname, or with
// fallback when the hostname is unknown (for example "worker").
func NewNamer(fallback string) *Namer { return &Namer{fallback: fallback} }

// Next returns the next instance's name: "<hostname>-<pid>" for the first,
// with "-<n>" appended for the n-th (n > 1), so several instances of one
// process stay apart in a consumer group or a lease.
func (n *Namer) Next() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = n.fallback
	}
	name := host + "-" + strconv.Itoa(os.Getpid())
	if i := n.n.Add(1); i > 1 {
		name += "-" + strconv.FormatInt(i, 10)
	}
	return name
}
