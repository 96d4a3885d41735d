package config_test

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
)

func TestParse(t *testing.T) {
	t.Parallel()
	newFS := func() (*flag.FlagSet, *string, *time.Duration) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		return fs, fs.String("redis-url", "def", ""), fs.Duration("min-age", time.Minute, "")
	}
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}

	t.Run("EnvFillsUnsetFlags", func(t *testing.T) {
		fs, url, age := newFS()
		require.NoError(t, config.Parse(fs, nil, env(map[string]string{"OUTBOXD_REDIS_URL": "redis://x", "OUTBOXD_MIN_AGE": "2s"})))
		require.Equal(t, "redis://x", *url)
		require.Equal(t, 2*time.Second, *age)
	})
	t.Run("FlagBeatsEnv", func(t *testing.T) {
		fs, url, _ := newFS()
		require.NoError(t, config.Parse(fs, []string{"--redis-url", "flag"}, env(map[string]string{"OUTBOXD_REDIS_URL": "env"})))
		require.Equal(t, "flag", *url)
	})
	t.Run("BadEnvNamesFlagAndVariable", func(t *testing.T) {
		fs, _, _ := newFS()
		err := config.Parse(fs, nil, env(map[string]string{"OUTBOXD_MIN_AGE": "soon"}))
		require.ErrorIs(t, err, config.ErrUsage)
		require.Contains(t, err.Error(), "--min-age")
		require.Contains(t, err.Error(), "OUTBOXD_MIN_AGE")
	})
	t.Run("BadFlag", func(t *testing.T) {
		fs, _, _ := newFS()
		err := config.Parse(fs, []string{"--min-age", "x"}, env(nil))
		require.ErrorIs(t, err, config.ErrUsage)
		require.Contains(t, err.Error(), "min-age")
	})
	t.Run("StrayArgument", func(t *testing.T) {
		fs, _, _ := newFS()
		require.ErrorIs(t, config.Parse(fs, []string{"extra"}, env(nil)), config.ErrUsage)
	})
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	require.Equal(t, "OUTBOXD_REDIS_URL", config.EnvName("redis-url"))
}
