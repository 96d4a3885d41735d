package worker

import (
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAutoBatch: the tuning loop of --batch-size auto shrinks
// the batch when the p95 of a window of full batches is 30% over the
// target (in proportion), at once by half after a timeout, grows by a
// quarter while the p95 stays well under, keeps it in between, and
// ignores batches too small to say anything about the size.
func TestAutoBatch(t *testing.T) {
	t.Parallel()
	const target = time.Second
	// window observes n projections of d at full size and returns the size.
	window := func(a *autoBatch, d time.Duration) int {
		size := a.size
		for range autoBatchWindow {
			size = a.observe(a.size, d, false)
		}
		return size
	}
	for _, tt := range []struct {
		name  string
		start int
		d     time.Duration
		want  int
	}{
		{"StartsWithinTheBounds", 5000, target, AutoBatchMax},
		{"KeepsNearTheTarget", 1000, target, 1000},
		{"KeepsUnderThirtyPercentOver", 1000, 1290 * time.Millisecond, 1000},
		{"ShrinksInProportion", 2000, 2 * target, 1000},
		{"ShrinksNoLowerThanTheMinimum", 1000, 10 * target, AutoBatchMin},
		{"GrowsByAQuarter", 800, 500 * time.Millisecond, 1000},
		{"GrowsNoHigherThanTheMaximum", 1800, 100 * time.Millisecond, AutoBatchMax},
		{"DoesNotGrowToward", 800, 700 * time.Millisecond, 800},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := newAutoBatch(AutoBatchMin, AutoBatchMax, tt.start, target)
			require.Equal(t, tt.want, window(a, tt.d))
		})
	}

	t.Run("DecidesOnAWindowP95", func(t *testing.T) {
		t.Parallel()
		a := newAutoBatch(AutoBatchMin, AutoBatchMax, 2000, target)
		for i := range autoBatchWindow - 1 {
			d := 500 * time.Millisecond
			if i == 0 {
				d = 10 * target // one outlier of twenty: under the p95
			}
			require.Equal(t, 2000, a.observe(2000, d, false), "no decision before the window is full")
		}
		require.Equal(t, 2000, a.observe(2000, 500*time.Millisecond, false), "the p95 is 0.5s: room, but the maximum")
	})

	t.Run("TimeoutHalvesAtOnce", func(t *testing.T) {
		t.Parallel()
		a := newAutoBatch(AutoBatchMin, AutoBatchMax, 2000, target)
		require.Equal(t, 1000, a.observe(2000, 5*time.Second, true))
		require.Equal(t, AutoBatchMin, a.observe(1000, 5*time.Second, true))
		require.Equal(t, AutoBatchMin, a.observe(500, 5*time.Second, true))
	})

	t.Run("MemoryPressureHalvesAndStopsGrowth", func(t *testing.T) {
		t.Parallel()
		a := newAutoBatch(AutoBatchMin, AutoBatchMax, 1000, target)
		pressed := true
		a.pressure = func() bool { return pressed }
		require.Equal(t, 500, window(a, 100*time.Millisecond), "fast projections, but memory is short: halved, not grown")
		require.Equal(t, AutoBatchMin, window(a, 100*time.Millisecond))
		pressed = false
		require.Equal(t, 625, window(a, 100*time.Millisecond), "grows again once the pressure is gone")
	})

	t.Run("SmallBatchesSayNothing", func(t *testing.T) {
		t.Parallel()
		a := newAutoBatch(AutoBatchMin, AutoBatchMax, 1000, target)
		for range 10 * autoBatchWindow {
			require.Equal(t, 1000, a.observe(3, 10*target, false), "a trickle of 3 entries")
		}
		require.Empty(t, a.window)
	})
}

// TestMemoryPressure: with GOMEMLIMIT (debug.SetMemoryLimit) far below
// what the process uses there is pressure; without a limit there is none.
// Not parallel: the limit is the process's.
func TestMemoryPressure(t *testing.T) {
	require.False(t, memoryPressure(), "no limit")
	old := debug.SetMemoryLimit(1 << 20)
	defer debug.SetMemoryLimit(old)
	require.True(t, memoryPressure(), "1 MiB limit")
}

func TestBeginSQL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "BEGIN; SET LOCAL lock_timeout = 5000; SET LOCAL statement_timeout = 30000", beginSQL(LockTimeoutDefault, StatementTimeoutDefault))
	require.Equal(t, "BEGIN; SET LOCAL statement_timeout = 1", beginSQL(TimeoutOff, time.Microsecond))
	require.Equal(t, "BEGIN", beginSQL(TimeoutOff, TimeoutOff))
}
