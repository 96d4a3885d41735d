package outbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

func TestRoutesValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.Routes{"a": "s1", "b": "s1", "c": outbox.StreamDefault}.Validate())
	require.NoError(t, outbox.Routes(nil).Validate())
	for name, r := range map[string]outbox.Routes{
		"empty stream":     {"a": ""},
		"spaced stream":    {"a": " s1"},
		"empty type":       {"": "s1"},
		"unprintable type": {"a\x00": "s1"},
	} {
		require.Error(t, r.Validate(), name)
	}
}

func TestRoutesStreams(t *testing.T) {
	t.Parallel()
	r := outbox.Routes{"a": "s2", "b": "s1", "c": "s2", "d": "main"}
	require.Equal(t, []string{"main", "s1", "s2"}, r.Streams("main"))
	require.Equal(t, []string{outbox.StreamDefault}, outbox.Routes(nil).Streams(""))
	require.Equal(t, "s2", r.StreamOf("a", "main"))
	require.Equal(t, "main", r.StreamOf("x", "main"))
	require.Equal(t, outbox.StreamDefault, r.StreamOf("x", ""))
}

// TestWriterRoutes: each event's outbox entry is recorded for its type's
// stream, the others for the default one; invalid routes write nothing.
func TestWriterRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: "main", Routes: outbox.Routes{"a": "main", "c": "other"}})
	var inputs []outbox.Input
	for i, typ := range []string{"a", "b", "c", ""} {
		in := input("d" + string(rune('0'+i)))
		in.Type = typ
		inputs = append(inputs, in)
	}
	res, err := w.Write(ctx, inputs)
	require.NoError(t, err)
	ids := func(stream string) []string {
		entries, err := st.Undispatched(ctx, stream, store.Partition{}, "", 10)
		require.NoError(t, err)
		var out []string
		for _, e := range entries {
			out = append(out, e.EventID)
		}
		return out
	}
	require.ElementsMatch(t, []string{res[0].ID, res[1].ID, res[3].ID}, ids("main"))
	require.Equal(t, []string{res[2].ID}, ids("other"))
	require.Equal(t, "other", w.StreamOf("c"))

	bad := outbox.NewWriter(st, &outbox.WriterConfig{Routes: outbox.Routes{"a": ""}})
	_, err = bad.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(`{}`)}})
	require.ErrorContains(t, err, "WriterConfig.Routes")
	testkit.RequireStored(t, st, 4)
}

// TestWriterRoutesPartitions: a routed stream whose recorded number of
// partitions differs from the writer's fails the write.
func TestWriterRoutesPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	require.NoError(t, store.EnsurePartitions(ctx, st, "other", 2))
	w := outbox.NewWriter(st, &outbox.WriterConfig{Routes: outbox.Routes{"c": "other"}})
	_, err := w.Write(ctx, []outbox.Input{input("d1")})
	require.ErrorIs(t, err, outbox.ErrPartitionsMismatch)
	testkit.RequireStored(t, st, 0)
}

// TestWriterChecksPartitionsRecordedLater: a Writer that writes before any
// number of partitions is recorded compares again at its next writes, so
// that once a dispatcher started with another number records it, the
// Writer's writes are refused (their entries would go to a partition the
// dispatcher does not relay) and write nothing.
func TestWriterChecksPartitionsRecordedLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	w := outbox.NewWriter(st, &outbox.WriterConfig{Partitions: 3})
	_, err := w.Write(ctx, []outbox.Input{input("d1")})
	require.NoError(t, err)
	n, err := st.Partitions(ctx, outbox.StreamDefault)
	require.NoError(t, err)
	require.Zero(t, n, "the Writer records nothing")
	require.NoError(t, store.EnsurePartitions(ctx, st, outbox.StreamDefault, 2)) // a dispatcher of 2 starts
	_, err = w.Write(ctx, []outbox.Input{input("d2")})
	require.ErrorIs(t, err, outbox.ErrPartitionsMismatch)
	require.ErrorContains(t, err, "records 2 partitions")
	testkit.RequireStored(t, st, 1)
}
