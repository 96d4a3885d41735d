package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store"
)

// TestEventKeysOf: the keys WithEventKeys sets come back in the order of
// the ids asked for, and not at all when one of them is unknown (a store
// then reads by id alone).
func TestEventKeysOf(t *testing.T) {
	t.Parallel()
	ctx := store.WithEventKeys(context.Background(), map[string]string{"a": "ka", "b": "kb"})
	require.Equal(t, []string{"kb", "ka"}, store.EventKeysOf(ctx, []string{"b", "a"}))
	require.Nil(t, store.EventKeysOf(ctx, []string{"a", "c"}))
	require.Nil(t, store.EventKeysOf(context.Background(), []string{"a"}))
}
