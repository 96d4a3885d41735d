// Package pause lets the components see an operator's pause of their
// stage (store.Pause: the relay of a partition or of all, a consumer
// group's live projection or its replay lane), which the store records
// where every replica reads it, and exports outboxd_paused{stage}.
package pause

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/store"
)

// RefreshEvery is how often a Gate reads its stages' pauses from the
// store: how soon a component sees a pause or a resume.
const RefreshEvery = time.Second

// readTimeout bounds one read of the pauses (a Gate's, or a scrape's).
const readTimeout = 2 * time.Second

// Gate tells a component whether one of its stages is paused. It reads
// the store at most every RefreshEvery; a failed read keeps what it knew
// (a store that cannot be read pauses nothing and resumes nothing). It is
// safe for concurrent use.
type Gate struct {
	st     store.Store
	stream string
	stages []store.Stage
	now    func() time.Time

	mu      sync.Mutex
	checked time.Time
	state   *store.PauseState
}

// NewGate returns the gate of stages of stream: paused while any of them
// is. A nil now is time.Now.
func NewGate(st store.Store, stream string, now func() time.Time, stages ...store.Stage) *Gate {
	if now == nil {
		now = time.Now
	}
	return &Gate{st: st, stream: stream, stages: stages, now: now}
}

// Paused returns the pause that holds the gate (the first of its stages
// that is paused), or nil.
func (g *Gate) Paused(ctx context.Context) *store.PauseState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); now.Sub(g.checked) >= RefreshEvery {
		g.checked = now
		ctx, cancel := context.WithTimeout(ctx, readTimeout)
		defer cancel()
		if state, err := g.read(ctx); err == nil {
			g.state = state
		}
	}
	return g.state
}

func (g *Gate) read(ctx context.Context) (*store.PauseState, error) {
	for _, s := range g.stages {
		p, err := store.Paused(ctx, g.st, g.stream, s, g.now())
		if err != nil || p != nil {
			return p, err
		}
	}
	return nil, nil
}

// Wait returns nil at once when the gate is not paused; otherwise it calls
// onPause with the pause once, then waits until it is resumed (nil) or ctx
// ends (ctx's error).
func (g *Gate) Wait(ctx context.Context, onPause func(*store.PauseState)) error {
	p := g.Paused(ctx)
	if p == nil {
		return nil
	}
	if onPause != nil {
		onPause(p)
	}
	t := time.NewTicker(RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if g.Paused(ctx) == nil {
				return nil
			}
		}
	}
}

// collector exports outboxd_paused{stage} for the stages of one stream
// that the components of a process watch, read from the store at scrape
// time: every replica shows the same, leading or not.
type collector struct {
	desc   *prometheus.Desc
	st     store.Store
	stream string

	mu     sync.Mutex
	stages map[string]store.Stage
}

// Describe sends the gauge's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect reads the pauses of the stages and sends the gauge of each: 1
// while paused; a stage whose pause cannot be read is left out.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	stages := make([]store.Stage, 0, len(c.stages))
	for _, s := range c.stages {
		stages = append(stages, s)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	for _, s := range stages {
		p, err := store.Paused(ctx, c.st, c.stream, s, time.Now())
		if err != nil {
			continue
		}
		v := 0.0
		if p != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, s.String())
	}
}

// Export exports outboxd_paused{stream,stage} on reg for stages of stream
// (added to those exported before on reg: one series per stage however
// many components watch it). A nil reg exports nothing.
func Export(reg prometheus.Registerer, st store.Store, stream string, stages ...store.Stage) error {
	if reg == nil {
		return nil
	}
	c := &collector{st: st, stream: stream, stages: map[string]store.Stage{},
		desc: prometheus.NewDesc(ometrics.Namespace+"_paused",
			"1 while an operator has paused the stage (relay, relay:<partition>, projection:<group>, replay:<group>): outboxd pause / resume.",
			[]string{"stage"}, prometheus.Labels{"stream": stream})}
	got, err := ometrics.Register[*collector](reg, c)
	if err != nil {
		return err
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, s := range stages {
		got.stages[s.String()] = s
	}
	return nil
}
