package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Group is one consumer of a stream's consumer group: the operations of a
// worker on the stream, its pending entries, its dead-letter stream and its
// delivery budgets. It is safe for concurrent use.
type Group struct {
	c        *Client
	keys     Keys
	consumer string
}

// Group returns the consumer consumer of keys' group.
func (c *Client) Group(keys Keys, consumer string) *Group {
	return &Group{c: c, keys: keys, consumer: consumer}
}

// Keys returns the group's keys.
func (g *Group) Keys() Keys { return g.keys }

// Ensure creates the consumer group, and the stream when it is missing, at
// the start of the stream (so that entries added before the group are
// read). It reports whether it created the group; a group that exists
// already (BUSYGROUP) is no error.
func (g *Group) Ensure(ctx context.Context) (created bool, err error) {
	err = g.c.rdb.XGroupCreateMkStream(ctx, g.keys.Stream(), g.keys.Group(), "0").Err()
	switch {
	case err == nil:
		return true, nil
	case redis.HasErrorPrefix(err, "BUSYGROUP"):
		return false, nil
	case IsOOM(err) && g.c.hasGroup(ctx, g.keys):
		return false, nil // Redis is full, and the group is there (memory.go)
	}
	return false, fmt.Errorf("error creating consumer group %q on stream %q: %w", g.keys.Group(), g.keys.Stream(), err)
}

// Read runs XREADGROUP for at most count entries from id: ">" for entries
// never delivered, or a position in this consumer's pending entries ("0"
// from the first). For ">" it waits at most block for entries to arrive;
// block < 0 does not wait at all, and a block under a millisecond waits a
// millisecond (Redis's BLOCK 0 would wait forever, so it is never sent).
// No entry is no error: the result is empty.
func (g *Group) Read(ctx context.Context, id string, count int, block time.Duration) ([]Entry, error) {
	if block >= 0 {
		block = max(block, time.Millisecond)
	}
	res, err := g.c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: g.keys.Group(), Consumer: g.consumer, Streams: []string{g.keys.Stream(), id},
		Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, s := range res {
		out = append(out, entries(s.Messages)...)
	}
	return out, nil
}

// ReadNew waits at most block for entries never delivered to the group on
// the streams of gs, at most count of each, and returns them by stream in
// the order of gs: one XREADGROUP over several streams, so that a worker
// idle on its stream also wakes for its replay lane. The groups must be one
// consumer of one consumer group on the same Client. block is as Read's.
func ReadNew(ctx context.Context, count int, block time.Duration, gs ...*Group) ([][]Entry, error) {
	if len(gs) == 0 {
		return nil, nil
	}
	g := gs[0]
	streams := make([]string, 0, 2*len(gs))
	for _, o := range gs {
		if o.c != g.c || o.keys.Group() != g.keys.Group() || o.consumer != g.consumer {
			return nil, errors.New("stream: ReadNew needs one consumer of one group on one client")
		}
		streams = append(streams, o.keys.Stream())
	}
	for range gs {
		streams = append(streams, ">")
	}
	if block >= 0 {
		block = max(block, time.Millisecond)
	}
	res, err := g.c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: g.keys.Group(), Consumer: g.consumer, Streams: streams, Count: int64(count), Block: block,
	}).Result()
	out := make([][]Entry, len(gs))
	if errors.Is(err, redis.Nil) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, s := range res {
		for i, o := range gs {
			if s.Stream == o.keys.Stream() {
				out[i] = append(out[i], entries(s.Messages)...)
			}
		}
	}
	return out, nil
}

// Reclaim takes over, with XAUTOCLAIM, at most count entries pending longer
// than minIdle, whichever consumer holds them, scanning the pending
// entries from start ("0-0" first); next is where the next call goes on
// ("0-0" once the scan is done). Entries whose data is gone (trimmed or
// deleted) come back without values (Redis 7 has already removed them from
// the pending entries).
func (g *Group) Reclaim(ctx context.Context, start string, minIdle time.Duration, count int) (claimed []Entry, next string, err error) {
	msgs, next, deleted, err := g.c.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: g.keys.Stream(), Group: g.keys.Group(), Consumer: g.consumer,
		MinIdle: minIdle, Start: start, Count: int64(count),
	}).Result()
	if err != nil {
		return nil, "", err
	}
	claimed = entries(msgs)
	for _, id := range deleted {
		claimed = append(claimed, Entry{ID: id})
	}
	return claimed, next, nil
}

// OwnPending returns the ids of at most count of this consumer's pending
// entries after after ("" from the first), in id order. It reads only the
// pending entries list (XPENDING), so no entry is delivered again and no
// delivery count rises. No group is nothing pending.
func (g *Group) OwnPending(ctx context.Context, after string, count int) ([]string, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	ps, err := g.c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: g.keys.Stream(), Group: g.keys.Group(), Start: start, End: "+", Count: int64(count), Consumer: g.consumer,
	}).Result()
	if IsNoGroup(err) || isNoKey(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids, nil
}

// Entries reads the entries ids of the stream, in one round trip, in the
// order of ids; an entry whose data is gone (trimmed or deleted) comes back
// without values, as from a read of the pending history. It changes nothing
// in the group.
func (g *Group) Entries(ctx context.Context, ids []string) ([]Entry, error) {
	return g.c.byID(ctx, g.keys.Stream(), ids)
}

// Budgets returns, for each entry id, how many of its deliveries failed
// because of the record (Keys.Failures; 0 when none).
func (g *Group) Budgets(ctx context.Context, ids []string) ([]int64, error) {
	vals, err := g.c.rdb.HMGet(ctx, g.keys.Failures(), ids...).Result()
	if err != nil {
		return nil, err
	}
	return budgets(vals), nil
}

func budgets(vals []any) []int64 {
	out := make([]int64, len(vals))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[i], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out
}

// Finish is what a worker writes when it is done with a batch.
type Finish struct {
	// DeadLetters go to the dead-letter stream; Finish fills in their
	// Stream, Group and Consumer.
	DeadLetters []DeadLetter
	// Ack are the entries to acknowledge (the dead letters' included); they
	// leave the delivery budgets too.
	Ack []string
	// Charge are the new delivery budgets of entries kept pending: entry
	// id → failed deliveries, the last one included.
	Charge map[string]int64
}

// Finish writes f in one MULTI/EXEC: the dead letters, the XACK, the
// removal of the acknowledged entries from the budgets and the new
// budgets. A crash leaves all of it or none, so never a dead letter whose
// entry is still pending (a duplicate dead letter at the next delivery),
// nor a failure charged to an entry that was not. (A command that fails,
// say WRONGTYPE, does not undo the others: MULTI/EXEC has no rollback;
// Finish returns its error and the caller runs the batch again, which
// converges.) A batch with only entries to acknowledge goes without
// MULTI/EXEC, in one script (see ackScript), so that it is not refused
// while Redis is over its maxmemory. It returns how many
// entries the XACK acknowledged: fewer than f.Ack when another consumer
// took some over and acknowledged them, or they were trimmed.
func (g *Group) Finish(ctx context.Context, f Finish) (acked int64, err error) {
	if len(f.DeadLetters) == 0 && len(f.Ack) == 0 && len(f.Charge) == 0 {
		return 0, nil
	}
	if len(f.DeadLetters) == 0 && len(f.Charge) == 0 {
		return g.ack(ctx, f.Ack) // nothing else to write: no MULTI/EXEC (ack.go)
	}
	var ackCmd *redis.IntCmd
	cmds, err := g.c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range f.DeadLetters {
			d.Stream, d.Group, d.Consumer = g.keys.Stream(), g.keys.Group(), g.consumer
			p.XAdd(ctx, &redis.XAddArgs{Stream: g.keys.DLQ(), Values: d.Encode()})
		}
		if len(f.Ack) > 0 {
			ackCmd = p.XAck(ctx, g.keys.Stream(), g.keys.Group(), f.Ack...)
			p.HDel(ctx, g.keys.Failures(), f.Ack...)
		}
		if len(f.Charge) > 0 {
			pairs := make([]any, 0, 2*len(f.Charge))
			for id, n := range f.Charge {
				pairs = append(pairs, id, n)
			}
			p.HSet(ctx, g.keys.Failures(), pairs...)
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if c.Err() != nil {
				err = c.Err()
				break
			}
		}
	}
	if err != nil {
		return 0, err
	}
	if ackCmd != nil {
		acked = ackCmd.Val()
	}
	return acked, nil
}

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

// Touch restarts the idle time of at most limit of this consumer's own
// pending entries idle for minIdle or more, without raising their delivery
// counts, so that no other consumer's Reclaim takes them (see touchScript).
func (g *Group) Touch(ctx context.Context, minIdle time.Duration, limit int) error {
	return touchScript.Run(ctx, g.c.rdb, []string{g.keys.Stream()}, g.keys.Group(), g.consumer, minIdle.Milliseconds(), limit).Err()
}

// Consumer is a consumer of the group as XINFO CONSUMERS shows it.
type Consumer struct {
	Name string
	// Pending counts its pending entries; Idle is how long since it last
	// read or claimed.
	Pending int64
	Idle    time.Duration
}

// Consumers lists the group's consumers.
func (g *Group) Consumers(ctx context.Context) ([]Consumer, error) {
	infos, err := g.c.rdb.XInfoConsumers(ctx, g.keys.Stream(), g.keys.Group()).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Consumer, len(infos))
	for i, c := range infos {
		out[i] = Consumer{Name: c.Name, Pending: c.Pending, Idle: c.Idle}
	}
	return out, nil
}

// delConsumerScript removes consumer ARGV[2] from group ARGV[1] of stream
// KEYS[1] only while nothing is pending on it (XGROUP DELCONSUMER would drop
// its pending entries), in one step. It returns 1 when it removed it.
var delConsumerScript = redis.NewScript(`
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1`)

// RemoveConsumer removes the consumer name from the group if nothing is
// pending on it (checked and removed in one step), and reports whether it
// did.
func (g *Group) RemoveConsumer(ctx context.Context, name string) (bool, error) {
	n, err := delConsumerScript.Run(ctx, g.c.rdb, []string{g.keys.Stream()}, g.keys.Group(), name).Int()
	return n == 1, err
}

// Delivery is where one stream entry stands in the consumer group.
type Delivery struct {
	// Delivered is false while the group has not read the entry (it lies
	// beyond the group's last delivered id, or there is no group).
	Delivered bool
	// Pending is set while it is delivered and not acknowledged: Consumer
	// holds it, idle for Idle, delivered Deliveries times (Redis's count),
	// Failed of them charged to the record (its budget).
	Pending            bool
	Consumer           string
	Idle               time.Duration
	Deliveries, Failed int64
}

// Deliveries returns where each of ids stands in keys' group, in one round
// trip. An entry that is delivered and not pending was acknowledged (or
// dead-lettered: the dead-letter stream tells).
func (c *Client) Deliveries(ctx context.Context, keys Keys, ids []string) ([]Delivery, error) {
	out := make([]Delivery, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var groups *redis.XInfoGroupsCmd
	pend := make([]*redis.XPendingExtCmd, len(ids))
	var failures *redis.SliceCmd
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.XInfoGroups(ctx, keys.Stream())
		for i, id := range ids {
			pend[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: keys.Stream(), Group: keys.Group(), Start: id, End: id, Count: 1})
		}
		failures = p.HMGet(ctx, keys.Failures(), ids...)
		return nil
	})
	lastDelivered, noGroup := "", false
	switch err := groups.Err(); {
	case err == nil:
		for _, g := range groups.Val() {
			if g.Name == keys.Group() {
				lastDelivered = g.LastDeliveredID
			}
		}
		noGroup = lastDelivered == ""
	case IsNoGroup(err), isNoKey(err):
		noGroup = true
	default:
		return nil, fmt.Errorf("error reading the consumer groups: %w", err)
	}
	if err := failures.Err(); err != nil {
		return nil, fmt.Errorf("error reading the failure counts: %w", err)
	}
	failed := budgets(failures.Val())
	for i, id := range ids {
		if noGroup || compareIDs(id, lastDelivered) > 0 {
			continue
		}
		out[i].Delivered = true
		p, err := pend[i].Result()
		if err != nil && !IsNoGroup(err) {
			return nil, fmt.Errorf("error reading the pending entries: %w", err)
		}
		if len(p) == 0 {
			continue
		}
		out[i].Pending, out[i].Consumer, out[i].Idle, out[i].Deliveries, out[i].Failed = true, p[0].Consumer, p[0].Idle, p[0].RetryCount, failed[i]
	}
	return out, nil
}
