package testkit

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main runs a package's tests with go-redis's own logging silenced and a
// goroutine-leak check at the end, then drops the database of the
// package's Examples (ExamplePostgresURL). The embedded engine's expiry
// goroutine outlives its tests by design (it stops at the engine's next
// tick), so it is the one goroutine ignored. Call it from TestMain.
func Main(m *testing.M) {
	quietRedisLogs()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/256dpi/lungo.(*Engine).expire"),
		goleak.Cleanup(func(code int) {
			dropExamplePostgres()
			os.Exit(code)
		}))
}
