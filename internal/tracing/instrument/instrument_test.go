package instrument

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxd/outboxd/internal/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		on   bool
		err  string // the variable the error names
	}{
		{name: "NothingSet"},
		{name: "OnlyTheServiceName", env: []string{"OTEL_SERVICE_NAME", "x", "OTEL_TRACES_SAMPLER", "always_on"}},
		{name: "Console", env: []string{"OTEL_TRACES_EXPORTER", "console"}, on: true},
		{name: "OTLP", env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, on: true},
		{name: "AnEndpoint", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, on: true},
		{name: "ATracesEndpoint", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces"}, on: true},
		{name: "None", env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}},
		{name: "Disabled", env: []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "console"}},
		{name: "Ratio", env: []string{"OTEL_TRACES_EXPORTER", "console", "OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"}, on: true},
		{name: "UnknownExporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "UnknownProtocol", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "UnknownSampler", env: []string{"OTEL_TRACES_EXPORTER", "console", "OTEL_TRACES_SAMPLER", "sometimes"}, err: "OTEL_TRACES_SAMPLER"},
		{name: "RatioAboveOne", env: []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"}, err: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "RatioNotANumber", env: []string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "half"}, err: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "DisabledNotABool", env: []string{"OTEL_SDK_DISABLED", "yes please"}, err: "OTEL_SDK_DISABLED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := FromEnv(env(tc.env...))
			if tc.err != "" {
				require.ErrorIs(t, err, ErrConfig)
				require.ErrorContains(t, err, tc.err+"=")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.on, s.On)
		})
	}
	s, err := FromEnv(env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"))
	require.NoError(t, err)
	require.Contains(t, s.Sampler.Description(), "TraceIDRatioBased{0.25}")
}

func TestOperation(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"begin": "BEGIN", "  WITH ins AS (INSERT …": "WITH", "insert into events": "INSERT", "commit;": "COMMIT",
		"": "postgresql", "-- comment\nSELECT 1": "postgresql", "(SELECT 1)": "postgresql",
	} {
		require.Equal(t, want, operation(sql), sql)
	}
}

type handler struct{ hits int }

func (h *handler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.hits++
	w.WriteHeader(http.StatusNoContent)
}

// TestSetup: off while the environment configures nothing (nothing is
// wrapped), on with an exporter until shutdown. Not parallel: it turns the
// process's tracing on and off.
func TestSetup(t *testing.T) {
	ctx := context.Background()
	h := &handler{}
	stop, err := Setup(ctx, "test", env("OTEL_SERVICE_NAME", "svc"), nil)
	require.NoError(t, err)
	require.False(t, tracing.Enabled())
	require.Same(t, h, HTTP(h), "off: the handler as it is")
	cfg, err := pgxpool.ParseConfig("postgres://127.0.0.1/x")
	require.NoError(t, err)
	Postgres(cfg)
	require.Nil(t, cfg.ConnConfig.Tracer)
	require.NoError(t, stop(ctx))

	_, err = Setup(ctx, "test", env("OTEL_TRACES_EXPORTER", "console", "OTEL_TRACES_SAMPLER", "never"), nil)
	require.ErrorIs(t, err, ErrConfig)
	require.False(t, tracing.Enabled(), "a bad value turns nothing on")

	stop, err = Setup(ctx, "test", env("OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"), nil)
	require.NoError(t, err)
	require.False(t, tracing.Enabled(), "none is off")
	require.NoError(t, stop(ctx))

	t.Setenv("OTEL_TRACES_EXPORTER", "none") // autoexport reads the environment itself
	stop, err = Setup(ctx, "test", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"), nil)
	require.NoError(t, err)
	require.True(t, tracing.Enabled())
	Postgres(cfg)
	require.NotNil(t, cfg.ConnConfig.Tracer)
	traced := HTTP(h)
	_, same := traced.(*handler)
	require.False(t, same, "on: wrapped")
	for _, path := range []string{"/v1/events", "/healthz"} {
		rec := httptest.NewRecorder()
		traced.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, nil))
		require.Equal(t, http.StatusNoContent, rec.Code)
	}
	require.Equal(t, 2, h.hits)
	require.NoError(t, stop(ctx))
	require.False(t, tracing.Enabled(), "off after shutdown")
}
