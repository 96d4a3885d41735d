package maintenance

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/store"
)

// RetentionConfig configures a Retention. Every field but Store, Interval,
// Chunk and Max may be left zero.
type RetentionConfig struct {
	// Store is the system of record the retention deletes from.
	Store store.Store
	// Interval is the time between two rounds; the first round runs one
	// Interval after Start.
	Interval time.Duration
	// Outbox is how long a dispatched outbox entry is kept (0: forever).
	Outbox time.Duration
	// Events is how long a synced original is kept after its createdAt
	// when neither its type nor its source has a retention of its own (0:
	// forever).
	Events time.Duration
	// Types are retentions of the synced originals of a type, before
	// Sources' and Events; 0 keeps that type's originals forever.
	Types map[string]time.Duration
	// Sources are retentions of the synced originals of a sourceKey whose
	// type has none of its own, before Events; 0 keeps them forever.
	Sources map[string]time.Duration
	// Chunk is how many originals one store.Store.DeleteSynced call (one
	// store transaction) removes at most, and Max how many one retention
	// of originals removes at most a round (the rest waits for the next).
	Chunk, Max int
	// Now tells the time. Defaults to time.Now.
	Now func() time.Time
	// Deleted counts the originals deleted (optional).
	Deleted prometheus.Counter
	// Logger logs what a round deleted and its failures. Defaults to none.
	Logger *zap.Logger
}

// Retention is the service that deletes, every Interval, the dispatched
// outbox entries past their retention and the synced originals past
// theirs. A failed deletion is logged at warn level and tried again the
// next round.
type Retention struct {
	cfg    RetentionConfig
	passes []pass
	base   startstop.Base
}

// pass is one retention of originals: scope's originals are kept for
// keep (keep > 0).
type pass struct {
	name  string // for the log: "type T", "source S", "global"
	scope store.SyncedScope
	keep  time.Duration
}

// NewRetention returns the retention service of cfg.
func NewRetention(cfg RetentionConfig) *Retention {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	r := &Retention{cfg: cfg, passes: passes(cfg.Events, cfg.Types, cfg.Sources)}
	r.base.Init(nil, runEvery(cfg.Interval, false, r.Round))
	return r
}

// passes are the retentions of originals, in order: each type's, each
// source's (not of the types with their own), then the global one (of the
// rest). A retention of 0 is no pass: its originals are kept, and left out
// of the later passes all the same.
func passes(global time.Duration, types, sources map[string]time.Duration) []pass {
	typeKeys := slices.Sorted(maps.Keys(types))
	sourceKeys := slices.Sorted(maps.Keys(sources))
	var out []pass
	for _, t := range typeKeys {
		if keep := types[t]; keep > 0 {
			out = append(out, pass{name: "type " + t, scope: store.SyncedScope{Type: t}, keep: keep})
		}
	}
	for _, s := range sourceKeys {
		if keep := sources[s]; keep > 0 {
			out = append(out, pass{name: "source " + s, scope: store.SyncedScope{Source: s, ExceptTypes: typeKeys}, keep: keep})
		}
	}
	if global > 0 {
		out = append(out, pass{name: "global", scope: store.SyncedScope{ExceptTypes: typeKeys, ExceptSources: sourceKeys}, keep: global})
	}
	return out
}

// Start runs the retention's rounds in the background until Stop or the
// end of ctx.
func (r *Retention) Start(ctx context.Context) {
	_ = r.base.Start(ctx) // no preflight: it cannot fail
}

// Stop ends the rounds and waits for the one in flight.
func (r *Retention) Stop() { _ = r.base.Stop(context.Background()) }

// Round is one round: the outbox's retention, then each retention of
// originals. Its failures are logged, never returned.
func (r *Retention) Round(ctx context.Context) {
	now := r.cfg.Now()
	if r.cfg.Outbox > 0 {
		deleted, err := r.cfg.Store.DeleteDispatched(ctx, now.Add(-r.cfg.Outbox))
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("deleting dispatched entries past the retention failed; relaying goes on, the next round tries again",
				zap.Int64("entries", deleted), zap.Error(err))
		}
		if deleted > 0 {
			r.cfg.Logger.Debug("deleted dispatched entries past the retention", zap.Int64("entries", deleted))
		}
	}
	for _, p := range r.passes {
		if ctx.Err() != nil {
			return
		}
		total, err := r.purge(ctx, p.scope, now.Add(-p.keep))
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("deleting synced originals past the event retention failed; relaying goes on, the next round tries again",
				zap.String("retention", p.name), zap.Int64("originals", total), zap.Error(err))
		}
		if total > 0 {
			r.cfg.Logger.Info("deleted synced originals past the event retention", zap.String("retention", p.name),
				zap.Int64("originals", total), zap.Duration("event_retention", p.keep))
		}
	}
}

// purge deletes the synced originals of scope created before before, in
// chunks of Chunk and at most Max, and returns how many it deleted.
func (r *Retention) purge(ctx context.Context, scope store.SyncedScope, before time.Time) (int64, error) {
	var total int64
	for total < int64(r.cfg.Max) {
		n, err := r.cfg.Store.DeleteSynced(ctx, before, scope, r.cfg.Chunk)
		total += n
		if r.cfg.Deleted != nil {
			r.cfg.Deleted.Add(float64(n))
		}
		if err != nil || n < int64(r.cfg.Chunk) {
			return total, err
		}
	}
	return total, nil
}
