package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

// TestSweepsBackToBack: as a service, a sweep that reaches its limit is
// followed by the next one as soon as the consumer group has read what it
// published, not after Every; a group that does not read holds it back.
func TestSweepsBackToBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, reading := range []bool{true, false} {
		name := map[bool]string{true: "GroupReads", false: "GroupLags"}[reading]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ids := b.writeAged(t, 35)
			require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, "g", "0").Err())
			cfg := b.config()
			cfg.Every, cfg.Limit = time.Hour, 10
			r := b.reconciler(t, cfg)
			require.NoError(t, r.Start(ctx))
			t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })

			read := func() { // a worker: read and acknowledge what is there
				res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{b.stream, ">"}, Count: 100, Block: -1}).Result()
				if err != nil {
					return
				}
				for _, s := range res {
					for _, m := range s.Messages {
						b.rdb.XAck(ctx, b.stream, "g", m.ID)
					}
				}
			}
			if !reading {
				require.Eventually(t, func() bool { return len(b.published(t)) == 10 }, 10*time.Second, 10*time.Millisecond)
				testkit.Never(t, func() bool { return len(b.published(t)) > 10 }, 500*time.Millisecond, 20*time.Millisecond,
					"the group has not read the first sweep's: the next waits for the schedule")
				return
			}
			require.Eventually(t, func() bool {
				read()
				return len(b.published(t)) == len(ids)
			}, 20*time.Second, 10*time.Millisecond, "four sweeps of at most 10, back to back, not one an hour")
		})
	}
}
