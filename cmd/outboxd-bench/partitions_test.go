package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPartitionTable(t *testing.T) {
	rows := []PartitionRow{
		{Partitions: 1, Dispatchers: 1, StartupSeconds: 0.21, DispatcherEventsPerSecond: 10_000, WorkerEventsPerSecond: 4_000},
		{Partitions: 4, Dispatchers: 2, StartupSeconds: 5.04, DispatcherEventsPerSecond: 15_000, WorkerEventsPerSecond: 3_000},
	}
	got := partitionTable(rows)
	require.Equal(t, "| partitions | dispatchers | start-up s | dispatcher ev/s | ratio | worker ev/s | ratio |\n"+
		"|---:|---:|---:|---:|---:|---:|---:|\n"+
		"| 1 | 1 | 0.2 | 10000 | 1.00 | 4000 | 1.00 |\n"+
		"| 4 | 2 | 5.0 | 15000 | 1.50 | 3000 | 0.75 |\n", got)
	require.InDelta(t, 1.5, rows[1].DispatcherRatio, 1e-9)
	require.InDelta(t, 0.75, rows[1].WorkerRatio, 1e-9)
	require.Empty(t, partitionTable(nil)[len("| partitions | dispatchers | start-up s | dispatcher ev/s | ratio | worker ev/s | ratio |\n|---:|---:|---:|---:|---:|---:|---:|\n"):])
}
