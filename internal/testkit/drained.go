package testkit

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/stream"
)

// Drained reports that group has read the whole of stream and of its
// replay lane (a lane that does not exist counts as read) and acknowledged
// everything it read; false when either cannot be read (safe inside
// require.Eventually).
func Drained(ctx context.Context, rdb redis.UniversalClient, name, group string) bool {
	keys := stream.NewKeys(name, group)
	return drained(ctx, rdb, keys.Stream(), group, false) && drained(ctx, rdb, keys.Replay(), group, true)
}

// drained is Drained for one stream key; missingOK makes a key that does
// not exist drained.
func drained(ctx context.Context, rdb redis.UniversalClient, key, group string, missingOK bool) bool {
	info, err := rdb.XInfoStream(ctx, key).Result()
	if err != nil {
		return missingOK && redis.HasErrorPrefix(err, "no such key")
	}
	groups, err := rdb.XInfoGroups(ctx, key).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name == group {
			return g.LastDeliveredID == info.LastGeneratedID && g.Pending == 0
		}
	}
	return false
}
