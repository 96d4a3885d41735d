package worker_test

import (
	"testing"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// The servers of the Examples are the tests' (OUTBOXD_TEST_REDIS_URL and
// OUTBOXD_TEST_POSTGRES_URL, which default to what make test sets up).
var (
	// redisURL is the test Redis: an Example names its keys uniquely.
	redisURL = testkit.RedisURL()
	// postgresURL returns a database of the Examples' own on the test
	// cluster, dropped when the tests end.
	postgresURL = testkit.ExamplePostgresURL
)
