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
	"sync"
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

// loop runs a service's rounds in the background.
type loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs round every interval until stop or the end of ctx: at once
// when first, else after the first interval. It does nothing while a run
// is in progress.
func (l *loop) start(ctx context.Context, interval time.Duration, first bool, round func(context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done != nil {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	done := make(chan struct{})
	l.done = done
	go func() {
		defer close(done)
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
				round(ctx)
			}
		}
	}()
}

// stop ends the run and waits for its round in flight; it tells whether a
// run was in progress.
func (l *loop) stop() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		return false
	}
	l.cancel()
	<-l.done
	l.cancel, l.done = nil, nil
	return true
}
