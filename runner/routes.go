package runner

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/outbox"
)

// routeList is the repeatable --route TYPE=STREAM: the events of TYPE go
// to STREAM instead of --stream (outbox.Routes).
type routeList struct {
	routes outbox.Routes
}

func (l *routeList) String() string {
	if l == nil {
		return ""
	}
	var out []string
	for _, typ := range slices.Sorted(maps.Keys(l.routes)) {
		out = append(out, typ+"="+l.routes[typ])
	}
	return strings.Join(out, ",")
}

// Set adds one route; a type routed twice is refused.
func (l *routeList) Set(v string) error {
	typ, s, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("must be TYPE=STREAM (got %q)", v)
	}
	if was, dup := l.routes[typ]; dup {
		return fmt.Errorf("type %q is routed twice (to %q and %q)", typ, was, s)
	}
	if l.routes == nil {
		l.routes = outbox.Routes{}
	}
	l.routes[typ] = s
	return nil
}

// routeFlag registers --route, once (dev has the groups of every role that
// writes or publishes messages).
func (o *options) routeFlag(fs *flag.FlagSet) {
	if fs.Lookup("route") == nil {
		fs.Var(&o.routes, "route", "TYPE=STREAM (repeatable): the events of TYPE go to STREAM, a stream of its own like --stream, instead of --stream; "+
			"give every role that writes or publishes (ingest, dispatch, reconcile, dev, and work for the replays it serves) the same routes (docs/projections.md)")
	}
}

// validateRoutes checks --route.
func (o *options) validateRoutes() error {
	if err := o.routes.routes.Validate(); err != nil {
		return config.Invalid("route", "%v", err)
	}
	return nil
}

// streams returns --stream and each routed stream (--route), each once:
// the streams whose entries the dispatch role relays.
func (a *app) streams() []string { return a.o.routes.routes.Streams(a.o.stream) }
