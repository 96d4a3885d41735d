package operator

import (
	"slices"

	"github.com/outboxd/outboxd/outbox"
)

// TypedReadModel is a read model that holds rows of some event types only
// (readmodel.Keyed over a worker.TypeChecker, such as a projection file):
// verify, repair and the audit check only the originals of the types it
// Checks.
type TypedReadModel interface {
	Checks(eventType string) bool
}

// checkScope is which synced originals a read model should hold a row of:
// those of a type it checks (TypedReadModel), routed to a stream whose
// workers project into it.
type checkScope struct {
	rm      any
	routes  outbox.Routes
	stream  string
	streams []string
}

// newCheckScope returns the scope of rm, whose workers read streams
// (stream alone when streams is empty); routes sends types to streams.
func newCheckScope(rm any, routes outbox.Routes, stream string, streams []string) checkScope {
	if len(streams) == 0 {
		streams = []string{stream}
	}
	return checkScope{rm: rm, routes: routes, stream: stream, streams: streams}
}

// holds reports whether the read model should hold a row of ev.
func (s checkScope) holds(ev *outbox.Event) bool {
	if t, ok := s.rm.(TypedReadModel); ok && !t.Checks(ev.Type) {
		return false
	}
	return slices.Contains(s.streams, s.routes.StreamOf(ev.Type, s.stream))
}

// filter returns those of events the read model should hold a row of, in
// their order (events is not changed).
func (s checkScope) filter(events []*outbox.Event) []*outbox.Event {
	out := make([]*outbox.Event, 0, len(events))
	for _, ev := range events {
		if s.holds(ev) {
			out = append(out, ev)
		}
	}
	return out
}
