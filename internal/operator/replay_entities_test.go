package operator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// TestReplayEntitiesAndType: a replay takes a list of entities (sources,
// or devices of a source), replayed in turn chunk by chunk, and a type
// filter; it publishes exactly the originals they select, and a dry run
// counts them.
func TestReplayEntitiesAndType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	inputs := []outbox.Input{}
	for i, e := range []struct{ source, device, typ string }{
		{"plant-a", "d1", "temperature"}, {"plant-a", "d1", "humidity"}, {"plant-a", "d2", "temperature"},
		{"plant-b", "d3", "temperature"}, {"plant-b", "d4", "humidity"}, {"plant-c", "d5", "temperature"},
	} {
		inputs = append(inputs, outbox.Input{SourceKey: e.source, DeviceKey: e.device, Type: e.typ, OccurredAt: fmt.Sprintf("2026-11-01T10:%02d:00Z", i)})
	}
	res, err := b.w.Write(ctx, inputs)
	require.NoError(t, err)
	id := func(i int) string { return res[i].ID }
	window := operator.EventsQuery{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), Limit: 1}
	lane := b.keys.ReplayLane().Stream()
	published := func() []string {
		entries, _, _, err := b.rc.ScanBack(ctx, lane, time.Time{}, 100, func(stream.Entry) bool { return true })
		require.NoError(t, err)
		var ids []string
		for _, e := range entries {
			msg, err := e.Message()
			require.NoError(t, err)
			ids = append(ids, msg.EventID)
		}
		return ids
	}
	replay := func(q operator.ReplayQuery) int {
		t.Helper()
		chunks := 0
		for {
			r, err := b.op.Replay(ctx, q)
			require.NoError(t, err)
			chunks++
			if r.Done {
				return chunks
			}
			q.After, q.Started = r.Next, *r.Started
		}
	}
	for _, tc := range []struct {
		name     string
		entities []string
		typ      string
		want     []string
	}{
		{"DevicesAndASource", []string{"plant-a/d1", "plant-b"}, "", []string{id(0), id(1), id(3), id(4)}},
		{"TypeWithinASource", []string{"plant-a"}, "temperature", []string{id(0), id(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(published())
			q := operator.ReplayQuery{EventsQuery: window, Entities: tc.entities, Type: tc.typ}
			q.DryRun = true
			r, err := b.op.Replay(ctx, q)
			require.NoError(t, err)
			require.EqualValues(t, len(tc.want), *r.Count)
			q.DryRun = false
			require.GreaterOrEqual(t, replay(q), len(tc.want))
			require.ElementsMatch(t, tc.want, published()[before:])
		})
	}
	_, err = b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: window.From, To: window.To, SourceKey: "plant-a"},
		Entities: []string{"plant-b"}})
	require.ErrorIs(t, err, operator.ErrInvalid)
	_, err = b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: window, Entities: []string{"plant-a/"}})
	require.ErrorIs(t, err, operator.ErrInvalid)
}
