package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseWriterRoles(t *testing.T) {
	t.Parallel()
	text := `# HELP outboxd_store_writer_wait_seconds x
outboxd_store_writer_wait_seconds_bucket{role="ingest",stream="s",le="0.001"} 98
outboxd_store_writer_wait_seconds_bucket{role="ingest",stream="s",le="0.002"} 99
outboxd_store_writer_wait_seconds_bucket{role="ingest",stream="s",le="+Inf"} 100
outboxd_store_writer_wait_seconds_sum{role="ingest",stream="s"} 0.1
outboxd_store_writer_wait_seconds_count{role="ingest",stream="s"} 100
outboxd_store_writer_wait_seconds_bucket{role="worker",stream="s",le="0.001"} 0
outboxd_store_writer_wait_seconds_bucket{role="worker",stream="s",le="0.002"} 0
outboxd_store_writer_wait_seconds_bucket{role="worker",stream="s",le="+Inf"} 10
outboxd_store_writer_wait_seconds_sum{role="worker",stream="s"} 1
outboxd_store_writer_wait_seconds_count{role="worker",stream="s"} 10
outboxd_store_writer_held_seconds_sum{role="ingest",stream="s"} 0.2
outboxd_store_writer_held_seconds_count{role="ingest",stream="s"} 100
outboxd_worker_batch_entries_bucket{stream="s",le="+Inf"} 4
outboxd_worker_batch_entries_sum{stream="s"} 100
outboxd_worker_batch_entries_count{stream="s"} 4
outboxd_worker_projection_seconds_bucket{stream="s",le="0.005"} 3
outboxd_worker_projection_seconds_bucket{stream="s",le="+Inf"} 4
outboxd_worker_projection_seconds_sum{stream="s"} 0.02
outboxd_worker_projection_seconds_count{stream="s"} 4
`
	roles, err := parseWriterRoles(strings.NewReader(text))
	require.NoError(t, err)
	require.Len(t, roles, 2)
	require.Equal(t, "ingest", roles[0].Role)
	require.Equal(t, int64(100), roles[0].Transactions)
	require.InDelta(t, 1.0, roles[0].WaitMeanMs, 1e-9)
	require.InDelta(t, 2.0, roles[0].WaitP99Ms, 1e-9)
	require.InDelta(t, 2.0, roles[0].HeldMeanMs, 1e-9)
	require.Equal(t, "worker", roles[1].Role)
	require.InDelta(t, 2.0, roles[1].WaitP99Ms, 1e-9, "a quantile past the last bound is capped at it")
	require.Zero(t, roles[1].HeldMeanMs)

	w, err := parseWorkerBatches(strings.NewReader(text))
	require.NoError(t, err)
	require.Equal(t, &WorkerBatches{Batches: 4, MeanEntries: 25, ProjectionMeanMs: 5, ProjectionP99Ms: 5, ProjectionTotalS: 0.02}, w)

	two := w.merge(&WorkerBatches{Batches: 4, MeanEntries: 75, ProjectionMeanMs: 15, ProjectionP99Ms: 20, ProjectionTotalS: 0.06})
	require.Equal(t, int64(8), two.Batches)
	require.InDelta(t, 50.0, two.MeanEntries, 1e-9)
	require.InDelta(t, 10.0, two.ProjectionMeanMs, 1e-9)
	require.InDelta(t, 20.0, two.ProjectionP99Ms, 1e-9)
	require.InDelta(t, 0.08, two.ProjectionTotalS, 1e-9)
	require.Same(t, w, w.merge(nil))

	none, err := parseWorkerBatches(strings.NewReader(""))
	require.NoError(t, err)
	require.Nil(t, none)
}
