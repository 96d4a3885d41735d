package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// PolicyNoEviction is the only maxmemory-policy outboxd's keys are safe
// under: any other lets Redis evict the stream, its consumer group or the
// dead-letter stream when memory runs short.
const PolicyNoEviction = "noeviction"

// Memory is Redis's memory as INFO memory reports it.
type Memory struct {
	// Used is used_memory in bytes; Max is maxmemory (0: no limit).
	Used, Max int64
	// Policy is maxmemory_policy ("noeviction", "allkeys-lru", …).
	Policy string
}

// Evicts reports whether the policy lets Redis evict keys (any policy but
// PolicyNoEviction): a misconfiguration for outboxd.
func (m Memory) Evicts() bool { return m.Policy != "" && m.Policy != PolicyNoEviction }

// Above reports whether used memory is at or above percent % of maxmemory
// (never without a maxmemory, nor with percent ≥ 100: then only Redis's own
// refusal, IsOOM, says it is full).
func (m Memory) Above(percent int) bool {
	if m.Max <= 0 || percent <= 0 || percent >= 100 {
		return false
	}
	return m.Used >= m.Max/100*int64(percent)
}

// Full reports whether used memory is at or above maxmemory: Redis (with
// noeviction) refuses every write that adds memory.
func (m Memory) Full() bool { return m.Max > 0 && m.Used >= m.Max }

// ErrFull is Writable's error while Redis is full.
var ErrFull = errors.New("redis refuses writes: used_memory at maxmemory")

// Writable checks that Redis answers and has room for writes (Memory.Full
// is not set): the readiness of the roles that write to it.
func (c *Client) Writable(ctx context.Context) error {
	m, err := c.Memory(ctx)
	if err != nil {
		return err
	}
	if m.Full() {
		return fmt.Errorf("%w (%d of %d bytes)", ErrFull, m.Used, m.Max)
	}
	return nil
}

// Memory reads Redis's used memory, maxmemory and maxmemory-policy (INFO
// memory, which every Redis answers, managed ones that refuse CONFIG GET
// included). On a Cluster it reads every master (ForEachMaster: each holds
// the keys of its own slots) and returns the one nearest to full, with the
// policy of the first that evicts, if any does: a partition whose master
// is full holds its relay whatever the others have left.
func (c *Client) Memory(ctx context.Context) (Memory, error) {
	infos, err := c.infos(ctx, "memory")
	if err != nil {
		return Memory{}, fmt.Errorf("error reading Redis's memory: %w", err)
	}
	var worst Memory
	evicting := ""
	for i, info := range infos {
		m := Memory{Policy: infoField(info, "maxmemory_policy")}
		m.Used, _ = strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
		m.Max, _ = strconv.ParseInt(infoField(info, "maxmemory"), 10, 64)
		if m.Evicts() && evicting == "" {
			evicting = m.Policy
		}
		if i == 0 || m.fuller(worst) {
			worst = m
		}
	}
	if evicting != "" {
		worst.Policy = evicting
	}
	return worst, nil
}

// fuller reports whether m is nearer to its maxmemory than o (a node
// without a maxmemory is never nearer than one with).
func (m Memory) fuller(o Memory) bool {
	switch {
	case m.Max <= 0:
		return false
	case o.Max <= 0:
		return true
	}
	return float64(m.Used)/float64(m.Max) > float64(o.Used)/float64(o.Max)
}

// GroupLag is where one consumer group of a stream stands (XINFO GROUPS).
type GroupLag struct {
	// Key is the stream, Group the consumer group.
	Key, Group string
	// Pending counts its entries delivered and not acknowledged; Read
	// counts the entries it has read since it was created (entries-read).
	Pending, Read int64
	// Lag counts the entries it has not read yet; nil when Redis cannot
	// tell (after a trim past or a deletion of unread entries).
	Lag *int64
}

// Lags returns where every consumer group of the stream of keys and of its
// replay lane stands, outboxd's group and any other (none for a stream
// that does not exist).
func (c *Client) Lags(ctx context.Context, keys Keys) ([]GroupLag, error) {
	keys = keys.Live()
	var out []GroupLag
	for _, key := range []string{keys.Stream(), keys.ReplayLane().Stream()} {
		groups, err := c.rdb.XInfoGroups(ctx, key).Result()
		switch {
		case err == nil:
		case isNoKey(err):
			continue
		default:
			return out, fmt.Errorf("error reading the consumer groups of %q: %w", key, err)
		}
		for _, g := range groups {
			l := GroupLag{Key: key, Group: g.Name, Pending: g.Pending, Read: g.EntriesRead}
			if g.Lag >= 0 {
				lag := g.Lag
				l.Lag = &lag
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// IsOOM reports Redis refusing a write because it is over its maxmemory
// with noeviction ("OOM command not allowed …"), or a MULTI/EXEC it
// discarded for it (EXECABORT: Redis 7 refuses every transaction while
// over maxmemory, even one of commands allowed on their own). Redis
// answers: it is full, not down, and it frees memory as entries are
// trimmed.
func IsOOM(err error) bool {
	return redis.HasErrorPrefix(err, "OOM") || redis.HasErrorPrefix(err, "EXECABORT")
}

// hasGroup reports whether the consumer group of keys exists on its stream
// (false when that cannot be read): Ensure's answer when Redis, over its
// maxmemory, refuses XGROUP CREATE before it could say BUSYGROUP.
func (c *Client) hasGroup(ctx context.Context, keys Keys) bool {
	groups, err := c.rdb.XInfoGroups(ctx, keys.Stream()).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name == keys.Group() {
			return true
		}
	}
	return false
}
