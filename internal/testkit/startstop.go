package testkit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/startstop"
)

// stressStopTimeout bounds each Stop of StartStopStress.
const stressStopTimeout = 10 * time.Second

// StartStopStress is the shared start/stop stress test: goroutines at once
// each run rounds of get, Start, and two Stops at once (every call must
// succeed, each Stop within 10 seconds); then one more from get starts
// and stops three times and must end stopped. get may return one shared
// component or a new one each time; it reports its own errors (with
// t.Error: it runs in goroutines) and returns nil to end its goroutine.
func StartStopStress(t testing.TB, goroutines, rounds int, get func() startstop.Service) {
	t.Helper()
	ctx := context.Background()
	stop := func(s startstop.Service) error {
		stopCtx, cancel := context.WithTimeout(ctx, stressStopTimeout)
		defer cancel()
		return s.Stop(stopCtx)
	}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				s := get()
				if s == nil {
					return
				}
				if !assert.NoError(t, s.Start(ctx)) {
					return
				}
				var stops sync.WaitGroup
				for range 2 {
					stops.Go(func() { assert.NoError(t, stop(s)) })
				}
				stops.Wait()
			}
		})
	}
	wg.Wait()
	s := get()
	require.NotNil(t, s)
	for range 3 { // a stopped component starts again
		require.NoError(t, s.Start(ctx))
		require.NoError(t, stop(s))
	}
	select {
	case <-s.Stopped():
	case <-time.After(stressStopTimeout):
		t.Fatal("not stopped after Stop returned")
	}
}
