package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/worker"
)

// services returns the long-running components of the role, in start order:
// consumers before producers, so stopping in reverse stops producers first.
func (a *app) services() ([]service, error) {
	var out []service
	has := func(g flagGroup) bool {
		for _, x := range roles[a.o.role] {
			if x == g {
				return true
			}
		}
		return false
	}
	if has(gWork) {
		w, err := worker.New(a.db, a.rdb, a.pg, &worker.Config{
			Stream: a.o.stream, Group: a.o.group, Consumer: a.o.consumer,
			BatchSize: a.o.batchSize, ClaimIdle: a.o.claimIdle, MaxDeliveries: a.o.maxDeliveries, Registerer: a.reg,
		}, a.log)
		if err != nil {
			return nil, err
		}
		out = append(out, stopErr{w})
	}
	if has(gDispatch) && a.o.role != "migrate" {
		d, err := dispatcher.New(a.db, a.rdb, &dispatcher.Config{Stream: a.o.stream, LeaseTTL: a.o.leaseTTL, Registerer: a.reg}, a.log)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if has(gReconcile) {
		r, err := a.reconciler()
		if err != nil {
			return nil, err
		}
		out = append(out, &loop{run: func(ctx context.Context) error { return r.Run(ctx, a.o.every) }})
	}
	return out, nil
}

func (a *app) reconciler() (*reconciler.Reconciler, error) {
	return reconciler.New(a.db, a.rdb, &reconciler.Config{
		Stream: a.o.stream, MinAge: a.o.minAge, RequeueAfter: a.o.requeueAfter, Limit: a.o.limit, Registerer: a.reg,
	}, a.log)
}

// reconcileOnce runs one sweep for cron: the report goes to stdout (JSON
// with --json) and the log; any failed document makes the exit code 1.
func (a *app) reconcileOnce(ctx context.Context) error {
	r, err := a.reconciler()
	if err != nil {
		return err
	}
	rep, err := r.Sweep(ctx)
	if a.o.jsonOut {
		b, _ := json.Marshal(rep)
		fmt.Fprintln(a.stdout, string(b))
	} else {
		fmt.Fprintln(a.stdout, rep.String())
	}
	a.log.Info("sweep done", zap.Object("report", rep))
	if err != nil {
		return fmt.Errorf("sweep failed: %w", err)
	}
	if rep.Failed() {
		return errSomeFailed
	}
	return nil
}

// stopErr adapts a Stop that returns an error (logged by the component).
type stopErr struct {
	s interface {
		Start(context.Context) error
		Stop(context.Context) error
	}
}

func (s stopErr) Start(ctx context.Context) error { return s.s.Start(ctx) }
func (s stopErr) Stop(ctx context.Context)        { _ = s.s.Stop(ctx) }

// loop runs a function until Stop cancels it.
type loop struct {
	run    func(ctx context.Context) error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (l *loop) Start(ctx context.Context) error {
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		_ = l.run(ctx)
	}()
	return nil
}

func (l *loop) Stop(ctx context.Context) {
	l.cancel()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
