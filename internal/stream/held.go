package stream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// HeldKeep is how long the held marks of a partition outlive the last one
// written: the whole hash expires once no worker holds anything. Under a
// steady trickle of failing records it never does, so each MarkHeld also
// removes marks past their time (pruneHeldScript).
const HeldKeep = 24 * time.Hour

// pruneHeldScript removes, of ARGV[2] fields of the hash KEYS[1] picked at
// random, those whose time (Unix milliseconds) is not after ARGV[1], and
// returns how many it removed. A mark past its time means nothing; a mark
// written again meanwhile is never removed (the script runs in one step).
var pruneHeldScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local picked = redis.call('HRANDFIELD', KEYS[1], tonumber(ARGV[2]), 'WITHVALUES')
local old = {}
for i = 1, #picked, 2 do
  local t = tonumber(picked[i + 1])
  if t == nil or t <= now then old[#old + 1] = picked[i] end
end
if #old > 0 then redis.call('HDEL', KEYS[1], unpack(old)) end
return #old`)

// heldPruned is how many fields MarkHeld looks at for each mark it writes
// (pruneHeldScript, plus heldPrunedBase): with more looked at than
// written, the marks past their time are at most about half of the hash,
// whatever the rate of the marks.
const (
	heldPruned     = 2
	heldPrunedBase = 16
)

// Held is the key of the hash of the partition's events a worker holds
// for a later delivery (a record that failed, kept pending in its group):
// per event id, until when (Unix milliseconds). The reconciler publishes
// no second message for an event held there: the entry the worker holds
// is still to be delivered (or dead-lettered), and a copy would be
// delivered, and perhaps dead-lettered, a second time.
func (k Keys) Held() string { return k.base() + ":held" }

// MarkHeld records that the events ids of k's partition are held until
// the given times (one HSET, and the hash's expiry moved to HeldKeep past
// the latest), and removes some of the marks past their time
// (pruneHeldScript), in one MULTI/EXEC.
func (c *Client) MarkHeld(ctx context.Context, k Keys, until map[string]time.Time) error {
	if len(until) == 0 {
		return nil
	}
	values := make([]any, 0, 2*len(until))
	var last time.Time
	for id, t := range until {
		values = append(values, id, strconv.FormatInt(t.UnixMilli(), 10))
		if t.After(last) {
			last = t
		}
	}
	keep := max(time.Until(last), 0) + HeldKeep
	pick := min(heldPruned*len(until)+heldPrunedBase, ackScriptChunk)
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		pruneHeldScript.Eval(ctx, p, []string{k.Held()}, time.Now().UnixMilli(), pick)
		p.HSet(ctx, k.Held(), values...)
		p.ExpireGT(ctx, k.Held(), keep)
		p.ExpireNX(ctx, k.Held(), keep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("error marking held events: %w", err)
	}
	return nil
}

// HeldAt reports which of the events ids of k's partition a worker holds
// at now (marked with a time after it).
func (c *Client) HeldAt(ctx context.Context, k Keys, ids []string, now time.Time) (map[string]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := c.rdb.HMGet(ctx, k.Held(), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("error reading held events: %w", err)
	}
	held := map[string]bool{}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms > now.UnixMilli() {
			held[ids[i]] = true
		}
	}
	return held, nil
}
