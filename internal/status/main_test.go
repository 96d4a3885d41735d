package status

import (
	"testing"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
