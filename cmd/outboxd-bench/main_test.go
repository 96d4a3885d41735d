package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestParseStages: -stages names steps of the run; none means all, and an
// unknown name is a usage error.
func TestParseStages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []string
		err      bool
	}{
		{name: "NoneMeansAll", in: "", want: stepNames},
		{name: "Some", in: "raw, ingest,dispatcher", want: []string{"raw", "ingest", stageDispatcher}},
		{name: "Unknown", in: "raw,dispatch", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseStages(tc.in)
			if tc.err {
				require.ErrorIs(t, err, errUsage)
				return
			}
			require.NoError(t, err)
			require.Len(t, got, len(tc.want))
			for _, s := range tc.want {
				require.True(t, got[s], s)
			}
		})
	}
}
