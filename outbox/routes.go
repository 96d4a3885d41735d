package outbox

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Routes moves the events of some types to streams of their own: an event
// whose type is a key goes to the stream its value names, every other
// event to the default stream (WriterConfig.Stream, --stream). The writer
// records each outbox entry for its type's stream, and the reconciler and
// the replays re-publish each original to it, so every component that
// writes or publishes messages must be given the same Routes (--route
// TYPE=STREAM). Each routed stream is a stream like the default one, with
// the same number of partitions.
type Routes map[string]string

// Validate checks every route: its type is a valid key (KeyProblem), and
// its stream a non-empty name without white space at either end. It says
// which route is wrong.
func (r Routes) Validate() error {
	var errs []error
	for _, typ := range slices.Sorted(maps.Keys(r)) {
		s := r[typ]
		if reason := KeyProblem(typ); reason != "" {
			errs = append(errs, fmt.Errorf("the type of route %q=%q %s", typ, s, reason))
		}
		switch {
		case s == "":
			errs = append(errs, fmt.Errorf("the stream of route %q is empty", typ))
		case strings.TrimSpace(s) != s:
			errs = append(errs, fmt.Errorf("the stream of route %q must not start or end with white space (got %q)", typ, s))
		}
	}
	return errors.Join(errs...)
}

// StreamOf returns the stream of the events of typ: its route's, or def
// (the default stream; StreamDefault when it is "").
func (r Routes) StreamOf(typ, def string) string {
	if s, ok := r[cmp.Or(typ, TypeDefault)]; ok {
		return s
	}
	return cmp.Or(def, StreamDefault)
}

// Streams returns def (StreamDefault when it is "") and every routed
// stream other than it, each once, in that order then sorted: the streams
// whose entries a deployment with r relays.
func (r Routes) Streams(def string) []string {
	def = cmp.Or(def, StreamDefault)
	out := []string{def}
	for _, s := range slices.Sorted(maps.Values(r)) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
