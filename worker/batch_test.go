package worker_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

// keyRecorder is a store that records the idempotency keys each LoadEvents
// call's context carries (store.EventKeysOf).
type keyRecorder struct {
	store.Store
	mu   sync.Mutex
	keys map[string]string // event id -> key
}

func (k *keyRecorder) LoadEvents(ctx context.Context, ids []string) (map[string]store.Loaded, error) {
	keys := store.EventKeysOf(ctx, ids)
	k.mu.Lock()
	for i, id := range ids {
		if keys != nil {
			k.keys[id] = keys[i]
		}
	}
	k.mu.Unlock()
	return k.Store.LoadEvents(ctx, ids)
}

// TestLoadCarriesTheMessagesKeys: the worker hands the store the
// idempotency keys its messages carry with the ids it reads (a sharded
// MongoDB targets the shards holding them).
func TestLoadCarriesTheMessagesKeys(t *testing.T) {
	t.Parallel()
	rdb, prefix := testkit.NewRedis(t)
	rec := &keyRecorder{Store: testkit.NewStore(t), keys: map[string]string{}}
	b := setupOn(t, rec, rdb, prefix)
	events := b.write(t, "d1", 5)
	b.publish(t, events...)
	b.start(t, b.config("c"))
	b.waitConverged(t)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, ev := range events {
		require.Equal(t, ev.IdempotencyKey, rec.keys[ev.ID], "event %s", ev.ID)
	}
}
