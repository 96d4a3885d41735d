package worker

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// touchMax bounds how many held entries one touch refreshes; a worker holds
// at most a batch in flight plus the records waiting for a delivery.
const touchMax = 100_000

// touchScript restarts the idle time of the consumer's own pending entries
// that have been idle at least ARGV[3] ms: XCLAIM to the same consumer with
// JUSTID, which leaves the delivery count alone. Reading the consumer's
// PEL and claiming happen in one script, so an entry another consumer took
// meanwhile is never taken back. Entries whose data is gone (trimmed) are
// left alone: XCLAIM would drop them from the PEL silently, and the worker
// must see them to dead-letter them as trimmed.
//
// KEYS[1] stream; ARGV group, consumer, min idle (ms), count.
var touchScript = redis.NewScript(`
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[3], '-', '+', ARGV[4], ARGV[2])
local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
for _, e in ipairs(pending) do
	if #redis.call('XRANGE', KEYS[1], e[1], e[1]) > 0 then args[#args + 1] = e[1] end
end
if #args == 5 then return 0 end
args[#args + 1] = 'JUSTID'
redis.call(unpack(args))
return #args - 6`)

// delConsumerScript removes consumer ARGV[2] from group ARGV[1] of stream
// KEYS[1] only while nothing is pending on it (XGROUP DELCONSUMER would drop
// its pending entries), in one step. It returns 1 when it removed it.
var delConsumerScript = redis.NewScript(`
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// keepHeld touches, every ClaimIdle/4, this consumer's pending entries idle
// for ClaimIdle/4 or more (touchScript), so that no other consumer's
// XAUTOCLAIM takes a batch paused by an outage or a record waiting for its
// next delivery: an outage of any length never hands entries from worker to
// worker, and never raises their delivery counts. When the loop shows no
// sign of life for ClaimIdle plus its longest wait, the worker counts as
// wedged and stops touching: its entries are then taken over like a dead
// worker's.
func (w *Worker) keepHeld(ctx context.Context, stop <-chan struct{}) {
	every := max(w.cfg.ClaimIdle/4, time.Millisecond)
	wedged := w.cfg.ClaimIdle + max(w.cfg.Block, w.cfg.BackoffMax, w.cfg.BreakerTimeout)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, w.beat.Load())) > wedged {
			continue
		}
		err := touchScript.Run(ctx, w.rdb, []string{w.cfg.Stream}, w.cfg.Group, w.cfg.Consumer, every.Milliseconds(), touchMax).Err()
		if err != nil && ctx.Err() == nil {
			w.logger.Debug("error touching held entries", zap.Error(err))
		}
	}
}

// housekeepingEvery is how often the worker looks for expired consumers.
func (w *Worker) housekeepingEvery() time.Duration {
	return min(max(w.cfg.ConsumerExpiry/4, time.Millisecond), time.Hour)
}

// housekeep removes from the group the other consumers idle longer than
// ConsumerExpiry with nothing pending. Failures are logged and left for the
// next round.
func (w *Worker) housekeep(ctx context.Context) {
	consumers, err := w.rdb.XInfoConsumers(ctx, w.cfg.Stream, w.cfg.Group).Result()
	if err != nil {
		if ctx.Err() == nil {
			w.logger.Debug("error listing consumers", zap.Error(err))
		}
		return
	}
	for _, c := range consumers {
		if c.Name == w.cfg.Consumer || c.Pending > 0 || c.Idle < w.cfg.ConsumerExpiry {
			continue
		}
		n, err := delConsumerScript.Run(ctx, w.rdb, []string{w.cfg.Stream}, w.cfg.Group, c.Name).Int()
		if err != nil {
			if ctx.Err() == nil {
				w.logger.Debug("error removing an expired consumer", zap.String("expired", c.Name), zap.Error(err))
			}
			return
		}
		if n == 1 {
			w.metrics.consumersDeleted.Inc()
			w.logger.Info("removed an expired consumer from the group", zap.String("expired", c.Name), zap.Duration("idle", c.Idle))
		}
	}
}
