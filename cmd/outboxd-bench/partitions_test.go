package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const partitionTableHead = "| partitions | dispatchers | dispatcher ev/s | ratio | every partition relaying after | dispatcher ev/s from then | worker ev/s | ratio |\n" +
	"|---:|---:|---:|---:|---:|---:|---:|---:|\n"

func TestPartitionTable(t *testing.T) {
	rows := []PartitionRow{
		{Partitions: 1, Dispatchers: 1, StartupSeconds: 0.21, DispatcherEventsPerSecond: 10_000, SteadyEventsPerSecond: 12_000, WorkerEventsPerSecond: 4_000},
		{Partitions: 4, Dispatchers: 2, StartupSeconds: 5.04, DispatcherEventsPerSecond: 15_000, WorkerEventsPerSecond: 3_000},
	}
	got := partitionTable(rows)
	require.Equal(t, partitionTableHead+
		"| 1 | 1 | 10000 | 1.00 | 0.2 s | 12000 | 4000 | 1.00 |\n"+
		"| 4 | 2 | 15000 | 1.50 | 5.0 s | 0 | 3000 | 0.75 |\n", got)
	require.InDelta(t, 1.5, rows[1].DispatcherRatio, 1e-9)
	require.InDelta(t, 0.75, rows[1].WorkerRatio, 1e-9)
	require.Equal(t, partitionTableHead, partitionTable(nil))
}
