package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestConfigValidate: the HTTP API's and the server's Validate refuse each
// value outside a field's bound (the values outboxd's flags reach them
// with: a flag given 0 arrives as -1), naming the field.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, rule string
		cfg         *httpapi.Config
	}{
		{"MaxBody", "between 1 and 1572864", &httpapi.Config{MaxBody: httpapi.MaxBodyMax + 1}},
		{"MaxBatch", "positive", &httpapi.Config{MaxBatch: -1}},
		{"MaxValues", "positive", &httpapi.Config{MaxValues: -1}},
		{"MaxDecodes", "positive", &httpapi.Config{MaxDecodes: -1}},
		{"RequestTimeout", "at least 1ms", &httpapi.Config{RequestTimeout: 500 * time.Microsecond}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	for _, tc := range []struct {
		field, rule string
		cfg         *httpapi.ServerConfig
	}{
		{"BodyTimeout", "at least 1ms", &httpapi.ServerConfig{BodyTimeout: -1}},
		{"IdleTimeout", "at least 1ms", &httpapi.ServerConfig{IdleTimeout: -1}},
		{"WriteTimeout", "at least 1ms", &httpapi.ServerConfig{WriteTimeout: -1}},
		{"MaxInFlightBodies", "positive", &httpapi.ServerConfig{MaxInFlightBodies: -1}},
		{"MaxClientBodies", "between 1 and MaxInFlightBodies (64)", &httpapi.ServerConfig{MaxClientBodies: 65}},
		{"MaxClientBodies", "between 1 and MaxInFlightBodies", &httpapi.ServerConfig{MaxClientBodies: -1}},
		{"MaxConns", "positive", &httpapi.ServerConfig{MaxConns: -1}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (*httpapi.Config)(nil).Validate())
	require.NoError(t, (*httpapi.ServerConfig)(nil).Validate())
}
