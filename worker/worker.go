package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/store"
)

// Fault points (tests only). When one fires the worker stops at once, as if
// its process had crashed: nothing more is written and nothing acknowledged.
const (
	// FaultAfterCommit fires after the PostgreSQL commit, before syncedAt.
	FaultAfterCommit = "worker.after-commit"
	// FaultAfterSyncedAt fires after syncedAt is set, before XACK.
	FaultAfterSyncedAt = "worker.after-synced"
)

// ErrRecord is wrapped by errors that are the record's own fault and will
// not go away by retrying (the default projector's invalid payload, or a
// custom Projector saying "do not retry"). Such records are parked as poison
// after Config.MaxDeliveries deliveries.
var ErrRecord = errors.New("record cannot be projected")

// Worker consumes a stream through a consumer group and projects each
// entry's original into PostgreSQL, then sets its syncedAt and acknowledges
// the entry. Any number of Workers (in one process or many) may share a
// group.
//
// Its lifecycle is package startstop's: Start checks that Redis,
// PostgreSQL and the store answer, creates the consumer group (and the
// stream) when missing and consumes in the background; Stop stops reading
// and waits until the batch in flight is projected, marked and
// acknowledged, or abandons it when its context ends first (the entries
// stay pending and are reclaimed later); Err reports a fault point that
// stopped it abruptly.
type Worker struct {
	startstop.Base

	st      store.Store
	rdb     redis.UniversalClient
	pool    *pgxpool.Pool
	cfg     *Config
	logger  *zap.Logger
	metrics *metrics
	breaker *gobreaker.CircuitBreaker[struct{}]
}

// New returns a Worker reading cfg.Stream as cfg.Group. A nil cfg means all
// defaults. It does not touch the stores; Start does.
func New(st store.Store, rdb redis.UniversalClient, pool *pgxpool.Pool, cfg *Config, logger *zap.Logger) (*Worker, error) {
	if st == nil || rdb == nil || pool == nil {
		return nil, errors.New("worker: a store, a Redis client and a PostgreSQL pool are required")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid worker config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m, err := newMetrics(c.Registerer, c.Stream)
	if err != nil {
		return nil, fmt.Errorf("error registering worker metrics: %w", err)
	}
	w := &Worker{
		st: st, rdb: rdb, pool: pool, cfg: c, metrics: m,
		logger: logger.Named("worker").With(zap.String("stream", c.Stream), zap.String("group", c.Group), zap.String("consumer", c.Consumer)),
	}
	w.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:    "postgres",
		Timeout: 5 * time.Second,
		// Only infrastructure failures open the circuit; a bad record does not.
		IsSuccessful: func(err error) bool { return err == nil || classify(err) != classInfra },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			w.logger.Info("postgres circuit changed state", zap.Stringer("from", from), zap.Stringer("to", to))
		},
	})
	w.Init(w.preflight, w.run)
	return w, nil
}

// Consumer returns the worker's consumer name.
func (w *Worker) Consumer() string { return w.cfg.Consumer }

func (w *Worker) preflight(ctx context.Context) error {
	if err := w.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("error pinging Redis: %w", err)
	}
	if err := w.pool.Ping(ctx); err != nil {
		return fmt.Errorf("error pinging PostgreSQL: %w", err)
	}
	if err := w.st.Ping(ctx); err != nil {
		return fmt.Errorf("error reaching the store: %w", err)
	}
	return w.ensureGroup(ctx)
}

func (w *Worker) run(fetchCtx, workCtx context.Context) error {
	w.logger.Debug("worker started")
	err := w.loop(fetchCtx, workCtx)
	if err != nil && classify(err) != classStopped {
		w.logger.Error("worker stopped abruptly", zap.Error(err))
		return err
	}
	w.logger.Debug("worker stopped")
	return nil
}

// loop drains this consumer's own pending entries, then alternates reading
// new entries with reclaiming idle ones. It returns nil or a context error
// when asked to stop, and any other error to stop abruptly.
func (w *Worker) loop(fetchCtx, workCtx context.Context) error {
	if err := w.drainOwn(fetchCtx, workCtx); err != nil {
		return err
	}
	nextClaim := time.Now()
	for fetchCtx.Err() == nil {
		if !time.Now().Before(nextClaim) {
			if err := w.reclaim(fetchCtx, workCtx); err != nil {
				return err
			}
			nextClaim = time.Now().Add(w.cfg.ClaimInterval)
		}
		block := min(w.cfg.Block, max(time.Until(nextClaim), time.Millisecond))
		msgs, err := w.read(fetchCtx, ">", block)
		if err != nil {
			return err
		}
		if err := w.process(fetchCtx, workCtx, msgs); err != nil {
			return err
		}
	}
	return nil
}

// drainOwn processes the entries this consumer left pending (a restart under
// the same name), reading its PEL history from the start once.
func (w *Worker) drainOwn(fetchCtx, workCtx context.Context) error {
	start := "0"
	for fetchCtx.Err() == nil {
		msgs, err := w.read(fetchCtx, start, -1)
		if err != nil || len(msgs) == 0 {
			return err
		}
		start = msgs[len(msgs)-1].ID
		w.logger.Info("draining own pending entries", zap.Int("entries", len(msgs)))
		if err := w.process(fetchCtx, workCtx, msgs); err != nil {
			return err
		}
	}
	return nil
}

// reclaim takes over entries pending longer than ClaimIdle, whichever
// consumer holds them, and processes them. Entries whose data was trimmed
// come back as deleted ids; they are dead-lettered like any unreadable entry.
func (w *Worker) reclaim(fetchCtx, workCtx context.Context) error {
	start := "0-0"
	for fetchCtx.Err() == nil {
		var msgs []redis.XMessage
		var next string
		err := w.retry(fetchCtx, "claiming idle entries", func() error {
			var deleted []string
			var err error
			msgs, next, deleted, err = w.rdb.XAutoClaimWithDeleted(fetchCtx, &redis.XAutoClaimArgs{
				Stream: w.cfg.Stream, Group: w.cfg.Group, Consumer: w.cfg.Consumer,
				MinIdle: w.cfg.ClaimIdle, Start: start, Count: int64(w.cfg.BatchSize),
			}).Result()
			for _, id := range deleted {
				msgs = append(msgs, redis.XMessage{ID: id})
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(msgs) > 0 {
			w.metrics.claimed.Add(float64(len(msgs)))
			w.logger.Info("reclaimed idle entries", zap.Int("entries", len(msgs)))
			if err := w.process(fetchCtx, workCtx, msgs); err != nil {
				return err
			}
		}
		if next == "" || next == "0-0" {
			return nil
		}
		start = next
	}
	return nil
}

// read runs XREADGROUP from id (">" for new entries, or a PEL position);
// block < 0 sends no BLOCK. An empty read returns no messages and no error.
func (w *Worker) read(fetchCtx context.Context, id string, block time.Duration) ([]redis.XMessage, error) {
	var msgs []redis.XMessage
	err := w.retry(fetchCtx, "reading the stream", func() error {
		res, err := w.rdb.XReadGroup(fetchCtx, &redis.XReadGroupArgs{
			Group: w.cfg.Group, Consumer: w.cfg.Consumer, Streams: []string{w.cfg.Stream, id},
			Count: int64(w.cfg.BatchSize), Block: block,
		}).Result()
		if errors.Is(err, redis.Nil) {
			msgs = nil
			return nil
		}
		if err != nil {
			return err
		}
		msgs = nil
		for _, s := range res {
			msgs = append(msgs, s.Messages...)
		}
		return nil
	})
	return msgs, err
}

// process handles a batch until it succeeds, retrying infrastructure
// failures with backoff. It returns nil when the batch is done or when a
// stop was requested while waiting (the entries then stay pending), and an
// error when the worker must stop abruptly.
func (w *Worker) process(fetchCtx, workCtx context.Context, msgs []redis.XMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	err := w.retry(fetchCtx, "processing a batch", func() error { return w.handle(workCtx, msgs) })
	if err != nil && classify(err) == classStopped {
		return nil
	}
	return err
}

// retry runs op until it succeeds, backing off with jitter after
// infrastructure failures and recreating the consumer group after NOGROUP.
// It stops early when fetchCtx ends (returning its error) and returns any
// other failure at once.
func (w *Worker) retry(fetchCtx context.Context, what string, op func() error) error {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(w.cfg.BackoffMax), backoff.WithMaxElapsedTime(0))
	return backoff.RetryNotify(func() error {
		err := op()
		switch classify(err) {
		case classOK:
			return nil
		case classNoGroup:
			w.metrics.retries.WithLabelValues("nogroup").Inc()
			w.logger.Warn("consumer group missing (Redis restarted empty?); recreating it")
			if gerr := w.ensureGroup(fetchCtx); gerr != nil {
				return gerr
			}
			return err
		case classInfra, classTxRetry:
			w.metrics.retries.WithLabelValues("infrastructure").Inc()
			return err
		default:
			return backoff.Permanent(err)
		}
	}, backoff.WithContext(b, fetchCtx), func(err error, d time.Duration) {
		w.logger.Warn("error "+what+"; retrying", zap.Error(err), zap.Duration("backoff", d))
	})
}

// ensureGroup creates the consumer group, and the stream when missing, at
// the start of the stream so that entries added before the group are read.
func (w *Worker) ensureGroup(ctx context.Context) error {
	err := w.rdb.XGroupCreateMkStream(ctx, w.cfg.Stream, w.cfg.Group, "0").Err()
	if err == nil {
		w.metrics.groupsCreated.Inc()
		w.logger.Info("created consumer group")
		return nil
	}
	if redis.HasErrorPrefix(err, "BUSYGROUP") {
		return nil
	}
	return fmt.Errorf("error creating consumer group %q on stream %q: %w", w.cfg.Group, w.cfg.Stream, err)
}
