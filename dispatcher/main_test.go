package dispatcher_test

import (
	"testing"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// redisURL is the Redis of the Examples, the tests' (OUTBOXD_TEST_REDIS_URL,
// which defaults to what make test sets up): an Example names its keys
// uniquely.
var redisURL = testkit.RedisURL()
