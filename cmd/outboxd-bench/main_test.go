package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestSelectSteps: -stages (BENCH_STEPS) names steps of the run, kept in
// their usual order; none means all, and an unknown name is a usage error.
func TestSelectSteps(t *testing.T) {
	t.Parallel()
	steps := []step{{name: "latency"}, {name: "raw"}, {name: "ingest"}}
	got, err := selectSteps(slices.Clone(steps), "ingest, raw")
	require.NoError(t, err)
	require.Equal(t, []string{"raw", "ingest"}, []string{got[0].name, got[1].name}, "in their usual order")
	got, err = selectSteps(slices.Clone(steps), "")
	require.NoError(t, err)
	require.Len(t, got, 3, "none named: all")
	_, err = selectSteps(slices.Clone(steps), "raw,nope")
	require.ErrorIs(t, err, errUsage)
}
