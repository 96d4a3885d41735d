// Package startstop is the one lifecycle of outboxd's long-running
// services (dispatcher, worker, reconciler), after river's startstop:
//
//   - Start(ctx) checks the service's backends (fail fast: an error means
//     nothing runs), then runs it in the background and returns. Start on a
//     running service does nothing and returns nil; a stopped service may be
//     started again.
//   - Stop(ctx) asks the service to stop reading new work and waits until
//     the work in flight is finished (acknowledged, checkpointed). When ctx
//     ends first, the work in flight is abandoned (it is redelivered later),
//     Stop waits for the service to notice and returns ctx's error. Stop is
//     idempotent, safe before Start and safe to call concurrently.
//   - Cancelling the context given to Start stops the service like Stop
//     does, without anyone waiting: it stops reading and finishes its work
//     in flight.
//   - Stopped() is closed when the service is not running (it is closed
//     before the first Start).
package startstop

import (
	"context"
	"sync"
)

// Service is the lifecycle every long-running component implements.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Stopped() <-chan struct{}
}

// Base implements the lifecycle for a service (river's BaseStartStop is
// the model). The service holds it in an unexported field, calls Init once
// in its constructor and delegates its own Start, Stop, Stopped (and Err,
// where a run can end on its own) to it; it does not embed it, so Init and
// whatever Base gains later stay out of the service's API.
type Base struct {
	preflight func(context.Context) error
	runFn     func(fetchCtx, workCtx context.Context) error

	mu         sync.Mutex
	running    bool
	stopFetch  context.CancelFunc
	abandon    context.CancelFunc
	stopped    chan struct{}
	err        error
	closedOnce sync.Once
}

func (b *Base) init() {
	b.closedOnce.Do(func() {
		b.stopped = make(chan struct{})
		close(b.stopped)
	})
}

// Init sets what Start runs: preflight(ctx) checks the backends (nil: no
// check), run does the work with two contexts: fetchCtx ends when Stop is
// called or Start's ctx ends (stop reading new work); workCtx ends only
// when a Stop gives up waiting (abandon the work in flight). run's error is
// kept for Err.
func (b *Base) Init(preflight func(context.Context) error, run func(fetchCtx, workCtx context.Context) error) {
	b.preflight, b.runFn = preflight, run
}

// Start runs the preflight check and, when it succeeds, the service in a
// new goroutine, as the package documentation says.
func (b *Base) Start(ctx context.Context) error {
	preflight, run := b.preflight, b.runFn
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if b.running {
		return nil
	}
	if preflight != nil {
		if err := preflight(ctx); err != nil {
			return err
		}
	}
	fetchCtx, stopFetch := context.WithCancel(ctx)
	workCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	b.running, b.stopFetch, b.abandon, b.stopped, b.err = true, stopFetch, abandon, stopped, nil
	go func() {
		err := run(fetchCtx, workCtx)
		stopFetch()
		abandon()
		b.mu.Lock()
		b.running, b.err = false, err
		b.mu.Unlock()
		close(stopped)
	}()
	return nil
}

// Stop stops the service as the package documentation says.
func (b *Base) Stop(ctx context.Context) error {
	b.mu.Lock()
	b.init()
	stopFetch, abandon, stopped := b.stopFetch, b.abandon, b.stopped
	b.mu.Unlock()
	if stopFetch == nil {
		return nil
	}
	stopFetch()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
	}
	abandon()
	<-stopped
	return ctx.Err()
}

// Stopped is closed when the service is not running.
func (b *Base) Stopped() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	return b.stopped
}

// Err returns what the last run returned: nil after a clean stop, or the
// error that ended it on its own (for example an injected crash).
func (b *Base) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
