package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// PartitionLeaseName is the name of the lease (and checkpoint) of part of
// stream: LeaseName(stream) for the whole stream, so that one partition
// keeps today's lease and position, else "<stream>:<index>".
func PartitionLeaseName(stream string, part store.Partition) string {
	return store.PartitionLeaseName(stream, part)
}

// MemberLeaseName is the name of member slot i of the dispatchers of a
// partitioned stream: each running Dispatcher holds one slot, and the
// number of slots held is the number of live dispatchers that the fair
// share divides the partitions by.
func MemberLeaseName(stream string, i int) string { return store.MemberLeaseName(stream, i) }

// sharing runs the Dispatcher of a partitioned stream: one Dispatcher per
// partition (each with its lease, fencing term, checkpoint, feed and
// stream), of which this process relays at most its fair share.
//
// The share is ceil(P / N), N the dispatchers alive: each holds one member
// slot (MemberLeaseName, the lowest one free) and renews it every third of
// the lease TTL, and each counts the slots whose lease has not expired.
// A partition's Dispatcher takes its lease only while this process holds
// fewer partitions than its share (leader.Config.Gate); when a dispatcher
// joins, the share shrinks and each process hands back (releases) the
// partitions above it, which the newcomer then takes. A dead dispatcher's
// partitions and slot expire after the lease TTL; the others' shares grow
// and they take the partitions over within another third of it.
type sharing struct {
	d      *Dispatcher
	st     store.Store
	cfg    *Config
	parts  []*Dispatcher
	logger *zap.Logger

	mu    sync.Mutex
	share int
}

// newSharing returns the Dispatcher of a stream with c.Partitions > 1.
func newSharing(st store.Store, rc *stream.Client, c *Config, logger *zap.Logger) (*Dispatcher, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	d := &Dispatcher{st: st, rc: rc, cfg: c,
		logger: logger.Named("dispatcher").With(zap.String("stream", c.Stream), zap.String("owner", c.Owner))}
	s := &sharing{d: d, st: st, cfg: c, logger: d.logger}
	for p := range c.Partitions {
		pc := *c
		pc.part = store.Partition{Index: p, Count: c.Partitions}
		pc.gate = s.gate
		inner, err := newDispatcher(st, rc, &pc, logger.With(zap.Int("partition", p)))
		if err != nil {
			return nil, fmt.Errorf("error creating the dispatcher of partition %d: %w", p, err)
		}
		s.parts = append(s.parts, inner)
	}
	d.sharing = s
	d.life.Init(d.preflight, s.run)
	return d, nil
}

// held returns the partitions this process holds the lease of.
func (s *sharing) held() []int {
	var out []int
	for p, d := range s.parts {
		if d.leader.Load() {
			out = append(out, p)
		}
	}
	return out
}

// gate lets a partition's Dispatcher take its lease while this process
// holds fewer partitions than its share.
func (s *sharing) gate() bool {
	s.mu.Lock()
	share := s.share
	s.mu.Unlock()
	return len(s.held()) < share
}

// Share returns how many partitions this dispatcher may hold now (its fair
// share; 0 while it holds no member slot, or for an unpartitioned stream).
func (d *Dispatcher) Share() int {
	if d.sharing == nil {
		return 0
	}
	d.sharing.mu.Lock()
	defer d.sharing.mu.Unlock()
	return d.sharing.share
}

// HeldPartitions returns the partitions whose lease this dispatcher holds
// (nil for an unpartitioned stream).
func (d *Dispatcher) HeldPartitions() []int {
	if d.sharing == nil {
		return nil
	}
	return d.sharing.held()
}

func (s *sharing) stats() Stats {
	var out Stats
	for _, d := range s.parts {
		st := d.Stats()
		out.Relayed += st.Relayed
		out.CaughtUp += st.CaughtUp
		out.Dispatched += st.Dispatched
		out.Batches += st.Batches
		out.Writes += st.Writes
		out.HistoryLost += st.HistoryLost
		out.Invalidated += st.Invalidated
		out.RedisRetries += st.RedisRetries
		out.Fenced += st.Fenced
		out.Leader = out.Leader || st.Leader
		out.Term = max(out.Term, st.Term)
	}
	return out
}

// partRun is one partition's Dispatcher running.
type partRun struct {
	cancel context.CancelFunc
	// done is closed when the run ended, with err set.
	done chan struct{}
	err  error
}

// wait stops r and returns why it ended.
func (r *partRun) wait() error {
	r.cancel()
	<-r.done
	return r.err
}

// run keeps a member slot, computes the share every interval, runs every
// partition's Dispatcher (each takes its lease only within the share) and
// hands back the partitions above the share, until fetchCtx ends; then it
// stops them (each lets its batch finish on workCtx and releases its
// lease) and gives its slot up. A partition's Dispatcher stopped by a
// fault point stops them all.
func (s *sharing) run(fetchCtx, workCtx context.Context) error {
	runs := make([]*partRun, len(s.parts))
	start := func(p int) {
		ctx, cancel := context.WithCancel(fetchCtx)
		r := &partRun{cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(r.done)
			r.err = s.parts[p].run(ctx, workCtx)
		}()
		runs[p] = r
	}
	// The share first, so that each partition's loop starts with it (a
	// share of 0 would keep it off the leases for one interval).
	slot := s.keepSlot(fetchCtx, store.Lease{})
	s.reshare(fetchCtx, slot)
	for p := range s.parts {
		start(p)
	}
	defer func() {
		for _, r := range runs {
			r.cancel()
		}
		for _, r := range runs {
			_ = r.wait()
		}
		if slot.Held() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(workCtx), 5*time.Second)
			_, _ = s.st.ReleaseLease(ctx, slot)
			cancel()
		}
	}()
	interval := s.cfg.LeaseTTL / 3
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-fetchCtx.Done():
			return nil
		case <-ticker.C:
		}
		slot = s.keepSlot(fetchCtx, slot)
		s.reshare(fetchCtx, slot)
		for _, p := range s.excess() {
			s.logger.Info("handing a partition back: above this dispatcher's fair share", zap.Int("partition", p), zap.Int("share", s.d.Share()))
			if err := runs[p].wait(); err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
			start(p)
		}
		for p, r := range runs {
			select {
			case <-r.done:
				if r.err != nil {
					return fmt.Errorf("partition %d: %w", p, r.err)
				}
				start(p)
			default:
			}
		}
	}
}

// keepSlot renews slot, or takes the lowest free member slot when it
// holds none (or lost it); a failure leaves it without one until the next
// interval.
func (s *sharing) keepSlot(ctx context.Context, slot store.Lease) store.Lease {
	now := s.cfg.Now()
	if slot.Held() {
		renewed, err := s.st.RenewLease(ctx, slot, now, s.cfg.LeaseTTL)
		if err == nil {
			return renewed
		}
		if !errors.Is(err, store.ErrFenced) && now.Before(slot.Expires) {
			s.logger.Warn("error renewing the dispatcher's member slot", zap.String("slot", slot.Name), zap.Error(err))
			return slot
		}
	}
	for i := range s.cfg.Partitions {
		l, err := s.st.AcquireLease(ctx, MemberLeaseName(s.cfg.Stream, i), s.cfg.Owner, now, s.cfg.LeaseTTL)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("error taking a member slot", zap.Error(err))
			}
			return store.Lease{}
		}
		if l.Held() {
			return l
		}
	}
	// As many dispatchers as partitions are alive: this one stands by.
	return store.Lease{}
}

// reshare counts the live member slots and sets the share: ceil(P/N), 0
// without a slot of its own. Slots are taken lowest first, so the count
// stops at the first slot that never existed.
func (s *sharing) reshare(ctx context.Context, slot store.Lease) {
	share := 0
	if slot.Held() {
		now := s.cfg.Now()
		live := 0
		for i := range s.cfg.Partitions {
			st, err := s.st.ReadLease(ctx, MemberLeaseName(s.cfg.Stream, i))
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Warn("error counting the dispatchers; keeping the share", zap.Error(err))
				}
				return
			}
			if st == nil {
				break
			}
			if st.Expires.After(now) || st.Name == slot.Name {
				live++
			}
		}
		live = max(live, 1)
		share = (s.cfg.Partitions + live - 1) / live
	}
	s.mu.Lock()
	changed := share != s.share
	s.share = share
	s.mu.Unlock()
	if changed {
		s.logger.Info("fair share of the partitions", zap.Int("share", share), zap.Int("partitions", s.cfg.Partitions))
	}
}

// excess returns the partitions held above the share, highest first.
func (s *sharing) excess() []int {
	held := s.held()
	share := s.d.Share()
	if len(held) <= share {
		return nil
	}
	var out []int
	for i := len(held) - 1; i >= share; i-- {
		out = append(out, held[i])
	}
	return out
}
