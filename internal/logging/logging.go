// Package logging builds the zap logger: JSON in production, console in dev.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger at level ("debug", "info", "warn", "error"), with a
// console encoder when console is true and JSON otherwise.
func New(level string, console bool) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("unknown log level %q (debug, info, warn, error)", level)
	}
	cfg := zap.NewProductionConfig()
	if console {
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableCaller = !console
	return cfg.Build()
}
