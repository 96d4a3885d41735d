package dispatcher_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// countingRetention is a store that counts the retention's deletions of
// dispatched entries.
type countingRetention struct {
	store.Store
	deletes atomic.Int64
}

func (c *countingRetention) DeleteDispatched(ctx context.Context, before time.Time) (int64, error) {
	c.deletes.Add(1)
	return c.Store.DeleteDispatched(ctx, before)
}

// TestMaintenanceRunsWhileLeading: the retention and the watch run only in
// the dispatcher that leads: a standby deletes nothing, and a leader that
// stops stops deleting and trimming, while the one that takes over
// starts.
func TestMaintenanceRunsWhileLeading(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first, second := &countingRetention{Store: b.st}, &countingRetention{Store: b.st}
	cfg := b.config()
	cfg.SweepInterval = 10 * time.Millisecond
	d1 := b.startOn(first, cfg)
	require.Eventually(t, func() bool { return d1.Stats().Leader && first.deletes.Load() >= 2 }, 10*time.Second, 5*time.Millisecond, "the leader's retention runs")
	cfg2 := b.config()
	cfg2.SweepInterval = 10 * time.Millisecond
	d2 := b.startOn(second, cfg2)
	seen := first.deletes.Load()
	require.Eventually(t, func() bool { return first.deletes.Load() >= seen+3 }, 10*time.Second, 5*time.Millisecond)
	require.False(t, d2.Stats().Leader)
	require.Zero(t, second.deletes.Load(), "a standby runs no retention")

	require.NoError(t, d1.Stop(context.Background()))
	stopped := first.deletes.Load()
	require.Eventually(t, func() bool { return d2.Stats().Leader && second.deletes.Load() >= 2 }, 10*time.Second, 5*time.Millisecond, "the new leader's runs")
	require.Equal(t, stopped, first.deletes.Load(), "none after the lead ended")
	ids := b.write(3, 3)
	b.waitRelayed(ids, 10*time.Second)
}

// TestEventRetentionByType: a type's retention replaces EventRetention for
// its originals (0 keeps them), a source's for its originals whose type
// has none; the rest go after EventRetention.
func TestEventRetentionByType(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, &setupOpts{kind: kind})
			old := outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream, Now: func() time.Time { return time.Now().Add(-3 * time.Hour) }})
			write := func(typ, source string) string {
				res, err := old.Write(ctx, []outbox.Input{{SourceKey: source, DeviceKey: testkit.Name("d"), Type: typ, OccurredAt: "2026-11-01T10:00:00Z"}})
				require.NoError(t, err)
				return res[0].ID
			}
			reading, audit, kept, mixed := write("reading", "a"), write("audit", "a"), write("reading", "keep"), write("short", "keep")
			all := append([]string{reading, audit, kept, mixed}, b.write(1, 1)...)
			reg := prometheus.NewRegistry()
			cfg := b.config()
			cfg.Registerer, cfg.EventRetention = reg, time.Hour
			cfg.EventRetentionTypes = map[string]time.Duration{"audit": 0, "short": 2 * time.Hour}
			cfg.EventRetentionSources = map[string]time.Duration{"keep": 24 * time.Hour}
			cfg.SweepInterval = 20 * time.Millisecond
			b.start(cfg)
			b.waitRelayed(all, 10*time.Second)
			_, err := b.st.MarkSynced(ctx, all, time.Now())
			require.NoError(t, err)

			require.Eventually(t, func() bool { return counterValue(t, reg, "outboxd_dispatcher_events_deleted_total") == 2 },
				10*time.Second, 5*time.Millisecond)
			got, err := b.st.LoadEvents(ctx, all)
			require.NoError(t, err)
			require.NotContains(t, got, reading, "past the global retention")
			require.NotContains(t, got, mixed, "past its type's, before its source's")
			require.Contains(t, got, audit, "its type's keeps it")
			require.Contains(t, got, kept, "its source's keeps it")
		})
	}
}

// TestEventRetentionByTypeConfig: a retention by type or source below
// EventRetentionTypeShortest (but 0), negative, or of an empty key is an
// error naming the field and the key.
func TestEventRetentionByTypeConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, c := range []struct {
		types, sources map[string]time.Duration
		want           string
	}{
		{types: map[string]time.Duration{"audit": time.Minute}, want: `EventRetentionTypes needs the retention of type "audit" to be 0`},
		{types: map[string]time.Duration{"audit": -time.Hour}, want: `EventRetentionTypes needs the retention of type "audit"`},
		{sources: map[string]time.Duration{"": time.Hour}, want: "EventRetentionSources needs a source that is not empty"},
		{sources: map[string]time.Duration{"plant-a": time.Second}, want: `EventRetentionSources needs the retention of source "plant-a"`},
	} {
		cfg := b.config()
		cfg.EventRetentionTypes, cfg.EventRetentionSources = c.types, c.sources
		_, err := dispatcher.New(b.st, b.rdb, cfg, testkit.Logger(t))
		require.ErrorContains(t, err, c.want, fmt.Sprint(c.types, c.sources))
	}
	cfg := b.config()
	cfg.EventRetentionTypes = map[string]time.Duration{"audit": 0, "reading": dispatcher.EventRetentionTypeShortest}
	_, err := dispatcher.New(b.st, b.rdb, cfg, testkit.Logger(t))
	require.NoError(t, err)
}
