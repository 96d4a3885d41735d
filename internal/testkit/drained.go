package testkit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Drained reports that group has read the whole of stream and acknowledged
// everything it read; false when either cannot be read (safe inside
// require.Eventually).
func Drained(ctx context.Context, rdb redis.UniversalClient, stream, group string) bool {
	info, err := rdb.XInfoStream(ctx, stream).Result()
	if err != nil {
		return false
	}
	groups, err := rdb.XInfoGroups(ctx, stream).Result()
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
