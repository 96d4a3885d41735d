package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/mongodb"
)

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code int
	}{
		{nil, ExitOK},
		{errSomeFailed, ExitFailure}, // reconcile: a document failed
		{fmt.Errorf("sweep failed: %w", errors.New("boom")), ExitFailure},
		{config.Invalid("limit", "must be positive"), ExitUsage},
		{fmt.Errorf("open: %w", mongodb.ErrLocked), ExitUsage},
	} {
		require.Equal(t, tc.code, exitCode(tc.err), "%v", tc.err)
	}
}
