package reconciler_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) {
	testkit.QuietRedisLogs()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/256dpi/lungo.(*Engine).expire"))
}
