package stream

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Redrives is the key of the hash that counts, per event id, how often the
// redrive policy redrove the event's dead letters out of the partition's
// dead-letter stream: <dlq>:redrives, under the dead-letter stream's hash
// tag. An operator's DLQ replay or drop of the event removes its count.
func (k Keys) Redrives() string { return k.DLQ() + ":redrives" }

// Redrives returns the redrive counts of eventIDs in keys' partition (0 for
// an event never redriven), in the order of eventIDs.
func (c *Client) Redrives(ctx context.Context, keys Keys, eventIDs []string) ([]int64, error) {
	out := make([]int64, len(eventIDs))
	if len(eventIDs) == 0 {
		return out, nil
	}
	vals, err := c.rdb.HMGet(ctx, keys.Redrives(), eventIDs...).Result()
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[i], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out, nil
}

// CountRedrives adds one to the redrive counts of eventIDs in keys'
// partition, in one round trip.
func (c *Client) CountRedrives(ctx context.Context, keys Keys, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range eventIDs {
			p.HIncrBy(ctx, keys.Redrives(), id, 1)
		}
		return nil
	})
	return err
}

// ForgetRedrives removes the redrive counts of eventIDs in keys' partition.
func (c *Client) ForgetRedrives(ctx context.Context, keys Keys, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	return c.rdb.HDel(ctx, keys.Redrives(), eventIDs...).Err()
}
