package operator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// laneEventIDs returns the event ids of the replay lane's entries, oldest
// first.
func laneEventIDs(t *testing.T, b *testBundle) []string {
	t.Helper()
	entries, _, _, err := b.rc.ScanBack(context.Background(), b.keys.ReplayLane().Stream(), time.Time{}, 1000,
		func(stream.Entry) bool { return true })
	require.NoError(t, err)
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		msg, err := e.Message()
		require.NoError(t, err)
		ids = append(ids, msg.EventID)
	}
	return ids
}

// replayToEnd runs q chunk by chunk until done and returns the chunks.
func replayToEnd(t *testing.T, b *testBundle, q operator.ReplayQuery) int {
	t.Helper()
	for chunks := 1; chunks < 1000; chunks++ {
		r, err := b.op.Replay(context.Background(), q)
		require.NoError(t, err)
		if r.Done {
			return chunks
		}
		q.After, q.Started = r.Next, *r.Started
	}
	t.Fatal("the replay never ended")
	return 0
}

// TestReplayEntityRanges: a replay takes ranges of one source's devices
// (both bounds included, in byte order of the keys), alone or after a
// list of entities and with a type; it publishes exactly the originals of
// the devices inside each range, chunk by chunk, and a dry run counts
// them. A range without a source, with an empty bound or with FROM after
// TO is refused before anything is published.
func TestReplayEntityRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var inputs []outbox.Input
	entities := []struct{ source, device, typ string }{
		{"sensor-a", "dev-000", "t"}, {"sensor-a", "dev-001", "t"}, {"sensor-a", "dev-050", "h"}, // 0-2
		{"sensor-a", "dev-099", "t"}, {"sensor-a", "dev-1", "t"}, {"sensor-a", "dev-100", "h"}, // 3-5
		{"sensor-b", "dev-050", "t"}, {"sensor-ab", "dev-050", "t"}, {"sensor-a", "dev-001", "h"}, // 6-8
	}
	for i, e := range entities {
		inputs = append(inputs, outbox.Input{SourceKey: e.source, DeviceKey: e.device, Type: e.typ,
			OccurredAt: fmt.Sprintf("2026-11-01T10:%02d:00Z", i)})
	}
	res, err := b.w.Write(ctx, inputs)
	require.NoError(t, err)
	ids := func(is ...int) []string {
		out := make([]string, len(is))
		for k, i := range is {
			out[k] = res[i].ID
		}
		return out
	}
	window := operator.EventsQuery{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), Limit: 1}
	for _, tc := range []struct {
		name     string
		entities []string
		ranges   []operator.EntityRange
		typ      string
		want     []string
	}{
		// "dev-1" and "dev-100" sort after "dev-099"; other sources' devices
		// of the same names stay out.
		{"InsideTheRange", nil, []operator.EntityRange{{SourceKey: "sensor-a", From: "dev-001", To: "dev-099"}}, "",
			ids(1, 2, 3, 8)},
		{"OneDevice", nil, []operator.EntityRange{{SourceKey: "sensor-a", From: "dev-050", To: "dev-050"}}, "", ids(2)},
		{"TwoRangesAfterAnEntity", []string{"sensor-b"}, []operator.EntityRange{
			{SourceKey: "sensor-a", From: "dev-1", To: "dev-2"}, {SourceKey: "sensor-ab", From: "a", To: "z"}}, "",
			ids(6, 4, 5, 7)},
		{"WithAType", nil, []operator.EntityRange{{SourceKey: "sensor-a", From: "dev-000", To: "dev-099"}}, "t",
			ids(0, 1, 3)},
		{"Empty", nil, []operator.EntityRange{{SourceKey: "sensor-a", From: "dev-2", To: "dev-9"}}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(laneEventIDs(t, b))
			q := operator.ReplayQuery{EventsQuery: window, Entities: tc.entities, EntityRanges: tc.ranges, Type: tc.typ}
			q.DryRun = true
			r, err := b.op.Replay(ctx, q)
			require.NoError(t, err)
			require.EqualValues(t, len(tc.want), *r.Count, "the dry run's count")
			require.Len(t, laneEventIDs(t, b), before, "a dry run publishes nothing")
			q.DryRun = false
			require.GreaterOrEqual(t, replayToEnd(t, b, q), len(tc.want))
			require.ElementsMatch(t, tc.want, laneEventIDs(t, b)[before:])
		})
	}

	t.Run("Refused", func(t *testing.T) {
		before := len(laneEventIDs(t, b))
		good := operator.EntityRange{SourceKey: "sensor-a", From: "dev-000", To: "dev-099"}
		for _, tc := range []struct {
			name string
			q    operator.ReplayQuery
		}{
			{"NoSource", operator.ReplayQuery{EntityRanges: []operator.EntityRange{{From: "dev-000", To: "dev-099"}}}},
			{"EmptyFrom", operator.ReplayQuery{EntityRanges: []operator.EntityRange{{SourceKey: "sensor-a", To: "dev-099"}}}},
			{"EmptyTo", operator.ReplayQuery{EntityRanges: []operator.EntityRange{{SourceKey: "sensor-a", From: "dev-000"}}}},
			{"FromAfterTo", operator.ReplayQuery{EntityRanges: []operator.EntityRange{{SourceKey: "sensor-a", From: "dev-099", To: "dev-000"}}}},
			// A bad range after good entities: nothing of them is published.
			{"AfterGoodOnes", operator.ReplayQuery{Entities: []string{"sensor-b"},
				EntityRanges: []operator.EntityRange{good, {SourceKey: "sensor-a", From: "b", To: "a"}}}},
			{"WithASource", operator.ReplayQuery{EventsQuery: operator.EventsQuery{SourceKey: "sensor-a"}, EntityRanges: []operator.EntityRange{good}}},
			{"TooMany", operator.ReplayQuery{EntityRanges: slices.Repeat([]operator.EntityRange{good}, 1001)}},
		} {
			for _, dry := range []bool{true, false} {
				q := tc.q
				q.From, q.To, q.Limit, q.DryRun = window.From, window.To, 1, dry
				_, err := b.op.Replay(ctx, q)
				require.ErrorIs(t, err, operator.ErrInvalid, "%s (dry run %v)", tc.name, dry)
				var oe *operator.Error
				require.ErrorAs(t, err, &oe)
				require.Equal(t, "entityRanges", oe.Fields[0].Field, tc.name)
			}
		}
		require.Len(t, laneEventIDs(t, b), before, "nothing was published")
	})
}

// TestParseEntityRange: SOURCE/FROM..TO, the command line's form of a
// range of devices.
func TestParseEntityRange(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]operator.EntityRange{
		"sensor-a/dev-001..dev-099": {SourceKey: "sensor-a", From: "dev-001", To: "dev-099"},
		"s/a/1..a/9":                {SourceKey: "s", From: "a/1", To: "a/9"},
		"s/x..x":                    {SourceKey: "s", From: "x", To: "x"},
	} {
		got, err := operator.ParseEntityRange(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
		require.Equal(t, in, got.String())
	}
	for in, reason := range map[string]string{
		"dev-001..dev-099": "needs the source",
		"/a..b":            "needs the source",
		"s/..b":            "both bounds",
		"s/a..":            "both bounds",
		"s/b..a":           `FROM "b" after TO "a"`,
		"s/a..b..c":        `".." once`,
		"s/ab":             `".." once`,
	} {
		_, err := operator.ParseEntityRange(in)
		require.ErrorIs(t, err, operator.ErrInvalid, in)
		require.ErrorContains(t, err, reason, in)
		require.Contains(t, operator.EntityRangeReason(err), reason, in)
	}
}
