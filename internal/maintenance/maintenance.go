// Package maintenance holds the jobs a dispatcher's leader runs beside the
// relay, each a service of its own: Retention deletes what is past its
// retention in the store (dispatched outbox entries, synced originals, by
// type, by source or globally), Watch trims the stream and watches Redis's
// memory and the consumer groups' lag, and gives its verdict on Redis's
// memory to the relay (Watch.High).
//
// A service runs only while its dispatcher leads: the dispatcher starts
// its services when it takes the lead and stops them when it loses it
// (Start, Stop). A round's failure is logged and the next round tries
// again; it never ends the relay, which runs apart.
package maintenance

import (
	"context"
	"time"
)

// Service is one leader-run job. Start runs it in the background, a round
// every interval, until Stop or the end of ctx; Stop waits for the round in
// flight and clears what the service exported (a standby exports none of
// the leader's figures). A stopped service may be started again; Start on
// a running one and Stop on a stopped one do nothing.
type Service interface {
	Start(ctx context.Context)
	Stop()
}

// StartAll starts services and returns what stops them all (in the reverse
// order).
func StartAll(ctx context.Context, services ...Service) (stop func()) {
	for _, s := range services {
		s.Start(ctx)
	}
	return func() {
		for i := len(services) - 1; i >= 0; i-- {
			services[i].Stop()
		}
	}
}

// every runs round every interval until ctx ends: at once when first,
// else after the first interval. A tick that comes with the end of ctx
// runs no round. It is the run of a service's startstop.Base.
func every(ctx context.Context, interval time.Duration, first bool, round func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	if first {
		round(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil {
				return
			}
			round(ctx)
		}
	}
}

// runEvery is a startstop.Base run of every (its work context unused: a
// round ends with the fetch context, as Stop asks).
func runEvery(interval time.Duration, first bool, round func(context.Context)) func(fetchCtx, workCtx context.Context) error {
	return func(ctx, _ context.Context) error {
		every(ctx, interval, first, round)
		return nil
	}
}
