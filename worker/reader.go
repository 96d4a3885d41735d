package worker

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/leader"
	"github.com/outboxd/outboxd/internal/pause"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// reader is the worker's reader and scheduler, and its run goroutine: the
// loop that reads the stream and its replay lane (lanes, the read-ahead,
// the operator's pauses and the replay rate), delivers the entries it
// holds when due, reclaims idle entries and recovers its own lost ones,
// and hands each batch to the processor (handle) and its tail to the tail
// writer (write). The fields below proc and tail are the run goroutine's
// own: nothing else touches them.
type reader struct {
	*shared
	st store.Store
	rc *stream.Client
	// group is the consumer on the stream; replay the consumer on its
	// replay lane (stream.Keys.ReplayLane), read only when the stream has
	// no backlog, at most at limiter's rate.
	group, replay *stream.Group
	limiter       *rate.Limiter
	// size is the batch size the reader reads with.
	size *sizing
	// elector holds the partition's lease of an Ordered worker; nil
	// otherwise.
	elector *leader.Elector
	// livePause and lanePause tell whether an operator paused the group's
	// live projection or its replay lane (store.Pause).
	livePause, lanePause *pause.Gate
	// wake tells the run goroutine that retries were resumed
	// (Worker.ResumeRetries, or another process through the group's
	// streak).
	wake chan struct{}
	proc *processor
	tail *tailWriter

	// liveOff and laneOff are what the loop last read of the pauses.
	liveOff, laneOff bool
	// cancelledBefore is the last cancel of the replays (store.
	// LastReplayCancel), read at most every pause.RefreshEvery
	// (cancelRead): entries the lane took before it are not projected.
	cancelledBefore, cancelRead time.Time
	// held are the entries this worker keeps pending for a later delivery,
	// by heldKey.
	held map[string]heldEntry
	// ahead delivers the batch a read-ahead is reading, or is nil.
	ahead chan aheadBatch
	// laneTurn is set when the last read of the stream found no backlog:
	// the replay lane gets the next turn.
	laneTurn bool
}

// wakeUp tells the run goroutine that retries were resumed: its held
// entries become due now.
func (r *reader) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// heldEntry is an entry of g kept pending until due.
type heldEntry struct {
	g   *stream.Group
	msg stream.Entry
	due time.Time
	// group is the message group of the entry (messageGroup), set by
	// hold: Ordered, a held entry holds only the later entries of its
	// group.
	group string
}

// messageGroup names the message group of a device's events: the events
// an Ordered worker projects in order, and that one failing event holds.
func messageGroup(sourceKey, deviceKey string) string { return sourceKey + "\x00" + deviceKey }

// entryGroup is the message group of the event m carries ("" when m does
// not decode).
func entryGroup(m stream.Entry) string {
	if m.Values == nil {
		return ""
	}
	msg, err := m.Message()
	if err != nil {
		return ""
	}
	return messageGroup(msg.SourceKey, msg.DeviceKey)
}

// heldKey is the key of entry id of g in held: the ids of two streams may
// be equal.
func heldKey(g *stream.Group, id string) string { return g.Keys().Stream() + "\x00" + id }

// hold keeps h for a later delivery (replacing an earlier hold of its
// entry).
func (r *reader) hold(h heldEntry) {
	if r.cfg.Ordered && h.g == r.group && h.group == "" {
		h.group = entryGroup(h.msg)
	}
	k := heldKey(h.g, h.msg.ID)
	if _, ok := r.held[k]; !ok {
		r.metrics.held.Inc()
	}
	r.held[k] = h
}

func (r *reader) run(fetchCtx, workCtx context.Context) error {
	r.logger.Debug("worker started")
	r.held = map[string]heldEntry{}
	r.alive()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { r.keepHeld(workCtx, stop) })
	var err error
	if r.elector != nil {
		err = r.elector.Run(fetchCtx, workCtx, func(leaseCtx context.Context, _ store.Lease) error {
			return r.own(leaseCtx, workCtx)
		})
	} else {
		err = r.loop(fetchCtx, workCtx)
	}
	if unlessStopped(err) != nil {
		r.tail.abandon(err) // pending, as after a crash
	}
	if berr := r.tail.settle(fetchCtx, workCtx); err == nil {
		err = berr
	}
	if a, ok := r.takeAhead(); ok {
		if err == nil && a.err == nil {
			// Read before the stop: in flight like the batch before it. After
			// an abrupt stop its entries stay pending, as after a crash.
			err = r.process(fetchCtx, workCtx, r.group, a.msgs, a.pre)
		}
	}
	close(stop)
	wg.Wait()
	r.metrics.held.Sub(float64(len(r.held)))
	if err != nil && classify(err) != classStopped {
		r.logger.Error("worker stopped abruptly", zap.Error(err))
		return err
	}
	r.logger.Debug("worker stopped")
	return nil
}

// own runs the loop of an Ordered worker while it holds its partition's
// lease (leaseCtx ends when the lease is lost or the worker stops). A lost
// lease abandons the batch in flight at once: its entries stay pending, and
// the next owner claims them before anything newer. Entries held from an
// earlier tenure are forgotten: they are pending, claimed again.
func (r *reader) own(leaseCtx, workCtx context.Context) error {
	r.metrics.held.Sub(float64(len(r.held)))
	clear(r.held)
	ctx, cancel := context.WithCancel(workCtx)
	defer cancel()
	stopLost := context.AfterFunc(leaseCtx, func() {
		if errors.Is(context.Cause(leaseCtx), leader.ErrLost) {
			cancel()
		}
	})
	defer stopLost()
	err := r.loop(leaseCtx, ctx)
	if err != nil && classify(err) != classStopped {
		return leader.Abort(err) // a fault point: stop at once, as a crash
	}
	return nil
}

// claimAll makes every entry pending in the partition's stream (the
// previous owner's) this consumer's, so that drainOwn then projects them
// in id order with its own.
func (r *reader) claimAll(fetchCtx context.Context) error {
	start := "0-0"
	for fetchCtx.Err() == nil {
		var next string
		err := r.retry(fetchCtx, "claiming the partition's pending entries", func() error {
			var err error
			_, next, err = r.group.Reclaim(fetchCtx, start, 0, r.size.get())
			return r.redisDone(err)
		})
		if err != nil || next == "" || next == "0-0" {
			return err
		}
		start = next
	}
	return nil
}

// loop drains this consumer's own pending entries, then alternates reading
// new entries with delivering held ones when due and reclaiming idle ones.
// It returns nil or a context error when asked to stop, and any other error
// to stop abruptly.
func (r *reader) loop(fetchCtx, workCtx context.Context) error {
	r.readPauses(fetchCtx)
	if r.cfg.Ordered {
		if err := r.claimAll(fetchCtx); err != nil {
			return err
		}
	}
	if err := r.drainOwn(fetchCtx, workCtx); err != nil {
		return err
	}
	nextClaim := time.Now()
	nextRecover := time.Now().Add(r.cfg.ClaimIdle)
	housekeeping := r.housekeepingEvery()
	nextHousekeeping := time.Now().Add(housekeeping)
	for fetchCtx.Err() == nil {
		r.alive()
		r.streak.Refresh(fetchCtx)
		select {
		case <-r.wake:
			r.makeDue()
		default:
		}
		r.readPauses(fetchCtx)
		if until, ok := r.tail.gatherDeadline(); ok && !time.Now().Before(until) {
			if err := r.tail.flushGather(fetchCtx, workCtx); err != nil {
				return err
			}
		}
		if r.liveOff && r.laneOff {
			// Both lanes paused by an operator: project nothing (what was
			// read is held, touched, until the resume).
			if err := r.tail.settle(fetchCtx, workCtx); err != nil {
				return err
			}
			r.holdAhead()
			r.waitResumed(fetchCtx)
			continue
		}
		if g, due := r.takeDue(time.Now()); len(due) > 0 {
			if err := r.process(fetchCtx, workCtx, g, due, nil); err != nil {
				return err
			}
			continue
		}
		if r.paused() {
			if err := r.tail.settle(fetchCtx, workCtx); err != nil {
				return err
			}
			r.holdAhead()
			r.waitHeld(fetchCtx)
			continue
		}
		if !time.Now().Before(nextClaim) {
			// Entries the tail behind holds are not reclaimed.
			if err := r.tail.settle(fetchCtx, workCtx); err != nil {
				return err
			}
			if err := r.reclaim(fetchCtx, workCtx); err != nil {
				return err
			}
			nextClaim = time.Now().Add(r.cfg.ClaimInterval)
		}
		if !time.Now().Before(nextRecover) {
			if err := r.tail.flushGather(fetchCtx, workCtx); err != nil {
				return err
			}
			if err := r.recoverOwn(fetchCtx); err != nil {
				return err
			}
			nextRecover = time.Now().Add(r.cfg.ClaimIdle)
			continue // the recovered entries are due now
		}
		if !time.Now().Before(nextHousekeeping) {
			r.housekeep(fetchCtx)
			nextHousekeeping = time.Now().Add(housekeeping)
		}
		block := min(r.cfg.Block, max(time.Until(nextClaim), time.Millisecond))
		if next, ok := r.nextDue(); ok {
			block = min(block, max(time.Until(next), time.Millisecond))
		}
		if until, ok := r.tail.gatherDeadline(); ok {
			block = min(block, max(time.Until(until), time.Millisecond))
		}
		g, msgs, pre, err := r.next(fetchCtx, block)
		if err != nil {
			return err
		}
		if r.readPauses(fetchCtx); !r.open(g) {
			// Paused while the read waited: hold what it read, touched,
			// until the resume.
			now := time.Now()
			for _, m := range msgs {
				r.hold(heldEntry{g: g, msg: m, due: now})
			}
			continue
		}
		if g == r.group && len(msgs) == r.size.get() && !r.paused() && !r.cfg.Ordered && !r.liveOff {
			r.readAhead(fetchCtx, workCtx)
		}
		if err := r.process(fetchCtx, workCtx, g, msgs, pre); err != nil {
			return err
		}
		if g == r.group {
			r.throttle(fetchCtx, len(msgs))
		}
	}
	return nil
}

// throttle takes n live events from the group's projection rate
// (Config.ProjectionRate) and waits while the group is ahead of it.
func (r *reader) throttle(fetchCtx context.Context, n int) {
	limit := r.cfg.ProjectionRate
	if limit <= 0 || limit == rate.Inf || n == 0 {
		return
	}
	burst := max(1, int(math.Ceil(float64(limit)/20)))
	d, err := r.rc.Throttle(fetchCtx, r.group.Keys(), float64(limit), burst, n)
	if err != nil {
		r.logger.Debug("projection rate not read; going on unthrottled", zap.Error(err))
		return
	}
	if d > 0 {
		r.metrics.throttled.Add(d.Seconds())
		r.sleep(fetchCtx, d)
	}
}

// aheadBatch is what a read-ahead read and prepared.
type aheadBatch struct {
	msgs []stream.Entry
	pre  *batch // nil when preparing failed: process prepares again
	err  error
}

// readAhead reads the next batch of new entries, without blocking, and
// prepares it (decode and one store read) while the loop writes the
// current one, so that a backlog costs the store read and the Redis round
// trip of each batch in parallel with the PostgreSQL transaction of the
// one before. The loop takes the result with next; the entries wait in this
// consumer's PEL meanwhile, like those of a batch being written.
func (r *reader) readAhead(fetchCtx, workCtx context.Context) {
	ch := make(chan aheadBatch, 1)
	r.ahead = ch
	go func() {
		msgs, err := r.read(fetchCtx, r.group, ">", r.size.get(), -1)
		var pre *batch
		if err == nil && len(msgs) > 0 {
			pre, _ = r.proc.prepare(workCtx, msgs) // on failure process prepares again, through its retries
		}
		ch <- aheadBatch{msgs: msgs, pre: pre, err: err}
	}()
}

// holdAhead keeps the entries of a read-ahead as held ones, due now, when
// the worker pauses: they were read before the pause, and held they are
// touched (not taken over by another consumer) and delivered with the
// others when the pause ends.
func (r *reader) holdAhead() {
	a, _ := r.takeAhead()
	now := time.Now()
	for _, m := range a.msgs {
		r.hold(heldEntry{g: r.group, msg: m, due: now})
	}
}

// takeAhead waits for the read-ahead in flight, if any, and returns what it
// read.
func (r *reader) takeAhead() (aheadBatch, bool) {
	if r.ahead == nil {
		return aheadBatch{}, false
	}
	a := <-r.ahead
	r.ahead = nil
	return a, true
}

// next returns the batch a read-ahead prepared, or else new entries of the
// stream, or else, when the stream has no backlog for the worker, new
// entries of the replay lane within the lane's rate; with neither it waits
// at most block for entries of the stream or, when the rate allows, of the
// lane (one XREADGROUP over both: entries of the lane that come with
// entries of the stream are held, due now, for the next turn). It returns
// the consumer whose entries it returns.
//
// The stream has no backlog when a read of it comes back empty, or with
// less than a batch: then the lane gets the next turn (r.laneTurn), so
// that a trickle of live events, which leaves the stream empty only for
// moments, does not starve the lane. A live event then waits for at most
// one batch of the lane (a twentieth of a second of the rate).
func (r *reader) next(fetchCtx context.Context, block time.Duration) (*stream.Group, []stream.Entry, *batch, error) {
	if a, ok := r.takeAhead(); ok && (a.err != nil || len(a.msgs) > 0) {
		r.laneTurn = len(a.msgs) < r.size.get()
		return r.group, a.msgs, a.pre, a.err
	}
	if r.liveOff || r.laneOff {
		return r.nextOpen(fetchCtx, block)
	}
	if r.laneTurn {
		r.laneTurn = false
		if n, _ := r.replayAllowance(); n > 0 {
			msgs, err := r.read(fetchCtx, r.replay, ">", n, -1)
			if err != nil || len(msgs) > 0 {
				r.spendReplay(len(msgs))
				return r.replay, msgs, nil, err
			}
		}
	}
	msgs, err := r.read(fetchCtx, r.group, ">", r.size.get(), -1)
	if err != nil || len(msgs) > 0 {
		r.laneTurn = len(msgs) < r.size.get()
		return r.group, msgs, nil, err
	}
	// Nothing to project: settle the tail behind (its holds and counts)
	// before waiting for entries.
	if err := r.tail.settleBehind(); err != nil {
		return r.group, nil, nil, err
	}
	n, wait := r.replayAllowance()
	if n == 0 {
		msgs, err = r.read(fetchCtx, r.group, ">", r.size.get(), min(block, max(wait, time.Millisecond)))
		return r.group, msgs, nil, err
	}
	if msgs, err = r.read(fetchCtx, r.replay, ">", n, -1); err != nil || len(msgs) > 0 {
		r.spendReplay(len(msgs))
		return r.replay, msgs, nil, err
	}
	var both [][]stream.Entry
	err = r.retry(fetchCtx, "reading the stream and the replay lane", func() error {
		var err error
		both, err = stream.ReadNew(fetchCtx, n, block, r.group, r.replay)
		return r.redisDone(err)
	})
	if err != nil {
		return r.group, nil, nil, err
	}
	r.spendReplay(len(both[1]))
	if len(both[0]) == 0 {
		return r.replay, both[1], nil, nil
	}
	now := time.Now()
	for _, m := range both[1] {
		r.hold(heldEntry{g: r.replay, msg: m, due: now})
	}
	return r.group, both[0], nil, nil
}

// nextOpen is next while an operator paused one of the lanes: it reads
// the other one only, waiting at most block (the replay lane within its
// rate).
func (r *reader) nextOpen(fetchCtx context.Context, block time.Duration) (*stream.Group, []stream.Entry, *batch, error) {
	if err := r.tail.settleBehind(); err != nil {
		return r.group, nil, nil, err
	}
	if r.laneOff {
		msgs, err := r.read(fetchCtx, r.group, ">", r.size.get(), min(block, pause.RefreshEvery))
		return r.group, msgs, nil, err
	}
	n, wait := r.replayAllowance()
	if n == 0 {
		r.sleep(fetchCtx, min(block, max(wait, time.Millisecond)))
		return r.replay, nil, nil, nil
	}
	msgs, err := r.read(fetchCtx, r.replay, ">", n, min(block, pause.RefreshEvery))
	r.spendReplay(len(msgs))
	return r.replay, msgs, nil, err
}

// readPauses reads whether an operator paused the group's live
// projection or its replay lane (at most every pause.RefreshEvery), and
// logs a change.
func (r *reader) readPauses(ctx context.Context) {
	for _, l := range []struct {
		gate *pause.Gate
		off  *bool
		lane string
	}{{r.livePause, &r.liveOff, "live"}, {r.lanePause, &r.laneOff, "replay"}} {
		p := l.gate.Paused(ctx)
		if off := p != nil; off != *l.off {
			*l.off = off
			if off {
				r.logger.Info("paused by an operator: projecting nothing of this lane until resumed", zap.String("lane", l.lane),
					zap.String("stage", p.Stage), zap.String("by", p.By))
			} else {
				r.logger.Info("resumed by an operator", zap.String("lane", l.lane))
			}
		}
	}
}

// open reports whether g's lane is not paused by an operator.
func (r *reader) open(g *stream.Group) bool {
	if g == r.replay {
		return !r.laneOff
	}
	return !r.liveOff
}

// waitResumed waits while both lanes are paused: until a pause may have
// ended (pause.RefreshEvery), or fetchCtx ends.
func (r *reader) waitResumed(fetchCtx context.Context) { r.sleep(fetchCtx, pause.RefreshEvery) }

// sleep waits d or until fetchCtx ends.
func (r *reader) sleep(fetchCtx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-fetchCtx.Done():
	case <-t.C:
	}
}

// replayAllowance returns how many entries of the replay lane the rate
// allows now: a batch of the lane (a batch, at most the limiter's burst:
// a twentieth of a second of the rate), or 0 and how long until one. Reading
// whatever the rate allowed since the last read would read the lane an
// entry at a time.
func (r *reader) replayAllowance() (int, time.Duration) {
	size := r.size.get()
	if r.limiter.Limit() == rate.Inf {
		return size, 0
	}
	want := float64(min(size, max(r.limiter.Burst(), 1)))
	if tokens := r.limiter.TokensAt(time.Now()); tokens < want {
		return 0, time.Duration((want - tokens) / float64(r.limiter.Limit()) * float64(time.Second))
	}
	return int(want), 0
}

// spendReplay takes n entries of the replay lane from its rate.
func (r *reader) spendReplay(n int) {
	if n > 0 && r.limiter.Limit() != rate.Inf {
		r.limiter.ReserveN(time.Now(), n)
	}
}

// paused reports whether the worker holds entries while retries of the
// unknown class are halted (a streak of record errors holds nothing): it
// reads nothing new until they go through or the halt clears. (Ordered, a
// held entry holds only its own message group: see heldFirst.)
func (r *reader) paused() bool {
	if len(r.held) == 0 {
		return false
	}
	return r.streak.Halted(failpolicy.ClassUnknown)
}

// heldFirst returns, Ordered, the first entry of the stream held for
// each message group: a newer entry of that group waits behind it. It
// returns nil without Ordered.
func (r *reader) heldFirst() map[string]heldEntry {
	if !r.cfg.Ordered {
		return nil
	}
	first := map[string]heldEntry{}
	for _, h := range r.held {
		if h.g != r.group {
			continue
		}
		if f, ok := first[h.group]; !ok || stream.CompareIDs(h.msg.ID, f.msg.ID) < 0 {
			first[h.group] = h
		}
	}
	return first
}

// takeDue removes from held, and returns in id order, at most a batch of
// entries due at now, all of one consumer (the stream's first), and that
// consumer.
//
// Ordered, the stream's held entries go in id order within their message
// group: one not due yet holds back the later ones of its group.
func (r *reader) takeDue(now time.Time) (*stream.Group, []stream.Entry) {
	var g *stream.Group
	var due []stream.Entry
	keys := slices.SortedFunc(maps.Keys(r.held), func(a, b string) int {
		ha, hb := r.held[a], r.held[b]
		if ha.g != hb.g {
			return cmp.Compare(r.lane(ha.g), r.lane(hb.g)) // "live" before "replay"
		}
		return stream.CompareIDs(ha.msg.ID, hb.msg.ID)
	})
	blocked := map[string]bool{} // Ordered: message groups held back
	for _, k := range keys {
		if len(due) == r.size.get() {
			break
		}
		h := r.held[k]
		if !r.open(h.g) {
			continue
		}
		if r.cfg.Ordered && h.g == r.group {
			if blocked[h.group] || h.due.After(now) {
				blocked[h.group] = true
				continue
			}
		}
		if !h.due.After(now) && (g == nil || h.g == g) {
			g = h.g
			due = append(due, h.msg)
			delete(r.held, k)
		}
	}
	r.metrics.held.Sub(float64(len(due)))
	return g, due
}

// nextDue returns when the next held entry is due. Ordered, the stream's
// held entries of a message group are due when the group's first (in id
// order) is: it holds back the others.
func (r *reader) nextDue() (time.Time, bool) {
	var next time.Time
	first := map[string]heldEntry{} // Ordered: each group's first held entry
	for _, h := range r.held {
		if !r.open(h.g) {
			continue // its lane is paused
		}
		if r.cfg.Ordered && h.g == r.group {
			if f, ok := first[h.group]; !ok || stream.CompareIDs(h.msg.ID, f.msg.ID) < 0 {
				first[h.group] = h
			}
			continue
		}
		if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	for _, h := range first {
		if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	return next, !next.IsZero()
}

// makeDue makes every held entry due now (an operator resumed retries).
func (r *reader) makeDue() {
	now := time.Now()
	for id, h := range r.held {
		h.due = now
		r.held[id] = h
	}
}

// waitHeld waits until the next held entry is due, ResumeRetries is
// called or fetchCtx ends, at most failpolicy.RefreshEvery (the loop then
// reads the group's streak: another process may have resumed).
func (r *reader) waitHeld(fetchCtx context.Context) {
	next, _ := r.nextDue()
	t := time.NewTimer(min(max(time.Until(next), time.Millisecond), failpolicy.RefreshEvery))
	defer t.Stop()
	select {
	case <-fetchCtx.Done():
	case <-t.C:
	case <-r.wake:
		r.makeDue()
	}
}

// recoverOwn holds, due now, this consumer's pending entries the worker
// does not know of. Redis can run an XREADGROUP or XAUTOCLAIM whose reply
// the worker never gets (it timed out while Redis was stopped, and Redis
// ran it when it resumed; a connection cut after the command went out):
// the entries are then pending to this consumer, and keepHeld touches
// every pending entry of the consumer, so no worker's XAUTOCLAIM would
// take them over while this one lives. The loop runs it every ClaimIdle,
// between batches, after the tail behind is written and with the
// read-ahead's entries held, so that the held entries are everything the
// worker knows is pending: the rest of its pending entries (listed with
// XPENDING, which delivers nothing) are the lost ones, and only they are
// read. An entry is thus recovered within about ClaimIdle, as a dead
// worker's would be taken over.
func (r *reader) recoverOwn(fetchCtx context.Context) error {
	if err := r.tail.settleBehind(); err != nil {
		return err
	}
	r.holdAhead()
	for _, g := range r.groups() {
		var lost []string
		for after := ""; fetchCtx.Err() == nil; {
			var ids []string
			err := r.retry(fetchCtx, "listing own pending entries", func() error {
				var err error
				ids, err = g.OwnPending(fetchCtx, after, r.size.get())
				return r.redisDone(err)
			})
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				break
			}
			after = ids[len(ids)-1]
			for _, id := range ids {
				if _, held := r.held[heldKey(g, id)]; !held {
					lost = append(lost, id)
				}
			}
		}
		if len(lost) == 0 {
			continue
		}
		var msgs []stream.Entry
		err := r.retry(fetchCtx, "reading lost entries", func() error {
			var err error
			msgs, err = g.Entries(fetchCtx, lost)
			return r.redisDone(err)
		})
		if err != nil {
			return err
		}
		now := time.Now()
		for _, m := range msgs {
			r.hold(heldEntry{g: g, msg: m, due: now})
		}
		r.metrics.recovered.Add(float64(len(msgs)))
		r.logger.Warn("recovered pending entries whose delivery the worker missed", zap.Int("entries", len(msgs)), zap.String("lane", r.lane(g)))
	}
	return nil
}

// drainOwn processes the entries this consumer left pending (a restart under
// the same name) on the stream, then on the replay lane, reading its PEL
// history from the start once.
func (r *reader) drainOwn(fetchCtx, workCtx context.Context) error {
	for _, g := range r.groups() {
		if !r.open(g) {
			continue // its pending entries are recovered after the resume (recoverOwn)
		}
		start := "0"
		for fetchCtx.Err() == nil {
			msgs, err := r.read(fetchCtx, g, start, r.size.get(), -1)
			if err != nil {
				return err
			}
			if len(msgs) == 0 {
				break
			}
			start = msgs[len(msgs)-1].ID
			r.logger.Info("draining own pending entries", zap.Int("entries", len(msgs)), zap.String("lane", r.lane(g)))
			if err := r.process(fetchCtx, workCtx, g, msgs, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// groups are the consumers of the worker: on the stream, then on its
// replay lane.
func (r *reader) groups() []*stream.Group { return []*stream.Group{r.group, r.replay} }

// lane names the lane of g for logs: "live" or "replay".
func (r *reader) lane(g *stream.Group) string { return g.Keys().Lane() }

// reclaim takes over entries pending and untouched longer than ClaimIdle,
// whichever consumer holds them (a live worker touches its own: see
// keepHeld), and processes them. Entries whose data was trimmed come back as
// deleted ids (Redis 7 has already removed them from the PEL); they are
// dead-lettered with reason trimmed.
func (r *reader) reclaim(fetchCtx, workCtx context.Context) error {
	for _, g := range r.groups() {
		if !r.open(g) {
			continue
		}
		if err := r.reclaimFrom(fetchCtx, workCtx, g); err != nil {
			return err
		}
	}
	return nil
}

// reclaimFrom is reclaim on the stream of g.
func (r *reader) reclaimFrom(fetchCtx, workCtx context.Context, g *stream.Group) error {
	start := "0-0"
	for fetchCtx.Err() == nil {
		var msgs []stream.Entry
		var next string
		err := r.retry(fetchCtx, "claiming idle entries", func() error {
			var err error
			msgs, next, err = g.Reclaim(fetchCtx, start, r.cfg.ClaimIdle, r.size.get())
			return r.redisDone(err)
		})
		if err != nil {
			return err
		}
		// This worker's own held entries are due later, not now.
		msgs = slices.DeleteFunc(msgs, func(m stream.Entry) bool { _, held := r.held[heldKey(g, m.ID)]; return held })
		if len(msgs) > 0 {
			r.metrics.claimed.Add(float64(len(msgs)))
			r.logger.Info("reclaimed idle entries", zap.Int("entries", len(msgs)), zap.String("lane", r.lane(g)))
			if err := r.process(fetchCtx, workCtx, g, msgs, nil); err != nil {
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

// read runs XREADGROUP as g from id (">" for new entries, or a PEL
// position) for at most count entries; block < 0 sends no BLOCK. An empty
// read returns no messages and no error.
func (r *reader) read(fetchCtx context.Context, g *stream.Group, id string, count int, block time.Duration) ([]stream.Entry, error) {
	var msgs []stream.Entry
	err := r.retry(fetchCtx, "reading the stream", func() error {
		var err error
		msgs, err = g.Read(fetchCtx, id, count, block)
		return r.redisDone(err)
	})
	return msgs, err
}

// process handles a batch of g's entries until it succeeds, retrying
// infrastructure failures with backoff, then keeps what the batch holds
// for later. pre is the batch as a read-ahead prepared it, or nil. It
// returns nil when the batch is done or when a stop was requested while
// waiting (the entries then stay pending), and an error when the worker
// must stop abruptly.
func (r *reader) process(fetchCtx, workCtx context.Context, g *stream.Group, msgs []stream.Entry, pre *batch) error {
	if g == r.replay {
		var err error
		if msgs, err = r.dropCancelled(fetchCtx, workCtx, msgs); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	var t *tail
	err := r.retry(fetchCtx, "processing a batch", func() error {
		var err error
		t, err = r.proc.handle(workCtx, g, msgs, pre, r.heldFirst())
		pre = nil // a retry reads the originals again
		return err
	})
	if err != nil {
		return unlessStopped(err)
	}
	return r.tail.write(fetchCtx, workCtx, t, len(msgs), r.ahead != nil)
}

// dropCancelled acknowledges, unprojected, the entries of the replay lane
// added before the last cancel of the replays (operator.CancelReplay),
// and returns the others: a cancelled replay's entries a worker had
// already read (held, or read while the cancel removed the rest) are not
// projected either. A failed read of the cancel drops nothing. The entry
// ids are Redis's times and the cancel the operator's: a skew between the
// clocks moves the line by as much.
func (r *reader) dropCancelled(fetchCtx, workCtx context.Context, msgs []stream.Entry) ([]stream.Entry, error) {
	if time.Since(r.cancelRead) >= pause.RefreshEvery {
		r.cancelRead = time.Now()
		if at, err := store.LastReplayCancel(fetchCtx, r.st, r.cfg.Stream); err == nil && at != nil {
			r.cancelledBefore = *at
		}
	}
	if r.cancelledBefore.IsZero() {
		return msgs, nil
	}
	var drop []string
	keep := msgs[:0:0]
	for _, m := range msgs {
		if at, ok := stream.IDTime(m.ID); ok && at.Before(r.cancelledBefore) {
			drop = append(drop, m.ID)
			continue
		}
		keep = append(keep, m)
	}
	if len(drop) == 0 {
		return msgs, nil
	}
	err := r.retry(fetchCtx, "acknowledging a cancelled replay's entries", func() error {
		return r.tail.finish(workCtx, r.replay, nil, drop, nil)
	})
	if err != nil {
		return nil, unlessStopped(err)
	}
	r.metrics.replayCancelled.Add(float64(len(drop)))
	r.logger.Info("entries of a cancelled replay acknowledged unprojected", zap.Int("entries", len(drop)))
	return keep, nil
}

// ensureGroup creates the consumer group, and the stream when missing, at
// the start of the stream so that entries added before the group are read;
// and the same on the replay lane. Creating the stream's group records a
// reset in the store (store.RecordReset): a group that was not there may
// have vanished with entries (the first start of a deployment records one
// too, which only lets the reconciler re-publish a few in-flight originals
// early, without a duplicate effect).
func (r *reader) ensureGroup(ctx context.Context) error {
	for _, g := range r.groups() {
		created, err := g.Ensure(ctx)
		if created {
			r.metrics.groupsCreated.Inc()
			r.logger.Info("created consumer group", zap.String("lane", r.lane(g)))
			if g == r.group {
				// Redis may have lost entries with the group: the
				// reconciler takes the unsynced originals at once.
				if err := store.RecordReset(ctx, r.st, r.cfg.Stream, r.cfg.Now()); err != nil {
					r.logger.Warn("error recording the consumer group's reset in the store", zap.Error(err))
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
