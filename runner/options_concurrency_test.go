package runner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultConcurrency: --concurrency 0 picks one batch loop per core,
// bounded by what pool_max_conns leaves per partition beside the spare
// connections, from 1 to ConcurrencyMax.
func TestDefaultConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                             string
		cores, poolMax, partitions, want int
	}{
		{"OnePerCore", 8, 0, 1, 8},
		{"BoundedByThePool", 8, 6, 1, 4},
		{"ThePoolSharedByPartitions", 8, 10, 4, 2},
		{"AtLeastOne", 8, 2, 4, 1},
		{"AtMostTheMax", 256, 0, 1, ConcurrencyMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, defaultConcurrency(tc.cores, tc.poolMax, tc.partitions))
		})
	}
	require.Equal(t, 7, poolMaxConns("postgres://u@h/db?pool_max_conns=7"))
	require.Zero(t, poolMaxConns("postgres://u@h/db"))
}
