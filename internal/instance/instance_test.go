package instance_test

import (
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/instance"
	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestNamer(t *testing.T) {
	t.Parallel()

	host, err := os.Hostname()
	require.NoError(t, err)
	base := host + "-" + strconv.Itoa(os.Getpid())

	t.Run("FirstIsHostAndPidThenNumbered", func(t *testing.T) {
		t.Parallel()
		n := instance.NewNamer("worker")
		require.Equal(t, base, n.Next())
		require.Equal(t, base+"-2", n.Next())
		require.Equal(t, base+"-3", n.Next())
	})

	t.Run("EachNamerCountsForItself", func(t *testing.T) {
		t.Parallel()
		a, b := instance.NewNamer("dispatcher"), instance.NewNamer("reconciler")
		require.Equal(t, base, a.Next())
		require.Equal(t, base, b.Next())
	})

	t.Run("ConcurrentNamesAreUnique", func(t *testing.T) {
		t.Parallel()
		n := instance.NewNamer("worker")
		const count = 64
		names := make(chan string, count)
		var wg sync.WaitGroup
		for range count {
			wg.Go(func() { names <- n.Next() })
		}
		wg.Wait()
		close(names)
		seen := map[string]bool{}
		for name := range names {
			require.False(t, seen[name], "duplicate name %s", name)
			seen[name] = true
		}
		require.Len(t, seen, count)
	})
}
