// Package instrument turns outboxd's tracing on from the standard OTEL_*
// variables and instruments the edges the command wires: the HTTP server
// (otelhttp) and the PostgreSQL pool (a pgx tracer). The store is
// instrumented by package store/storetrace.
//
// Setup decides from the environment alone, once, at start:
//
//   - Tracing is on when OTEL_TRACES_EXPORTER names an exporter other than
//     "none", or an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT,
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); OTEL_SDK_DISABLED=true turns it
//     off. Otherwise it is off: no provider, no exporter, and every span
//     call of the components returns at once (package tracing).
//   - The exporter is go.opentelemetry.io/contrib/exporters/autoexport's:
//     "otlp" (the default once an endpoint is set) over HTTP/protobuf or
//     gRPC (OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
//     with the exporter's own OTEL_EXPORTER_OTLP_* settings, or "console"
//     (stdout, one JSON span per line), through a batch span processor
//     (OTEL_BSP_*).
//   - The sampler is OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG
//     (default parentbased_always_on).
//   - The resource is service.name "outboxd" and outboxd.role, overridden
//     by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
//
// A value these variables cannot take is an error that names the variable
// (ErrConfig: the command exits 2 before it opens anything).
package instrument

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/tracing"
)

// ServiceNameDefault is service.name unless OTEL_SERVICE_NAME says
// otherwise.
const ServiceNameDefault = "outboxd"

// ErrConfig is matched by the errors of an OTEL_* variable with a value
// Setup cannot use.
var ErrConfig = errors.New("invalid tracing configuration")

// configError names the variable whose value is wrong.
type configError struct{ msg string }

func (e *configError) Error() string        { return e.msg }
func (e *configError) Is(target error) bool { return target == ErrConfig }

func invalid(name, value, why string) error {
	return &configError{msg: fmt.Sprintf("invalid %s=%q: %s", name, value, why)}
}

// Settings are what the environment says about tracing.
type Settings struct {
	// On is set when tracing is configured at all.
	On bool
	// Sampler is the sampler of OTEL_TRACES_SAMPLER (nil: the default,
	// parentbased_always_on).
	Sampler sdktrace.Sampler
}

// FromEnv reads the tracing settings from getenv (os.Getenv) and checks
// the values Setup relies on; the error names the variable.
func FromEnv(getenv func(string) string) (Settings, error) {
	var s Settings
	if v := getenv("OTEL_SDK_DISABLED"); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return s, invalid("OTEL_SDK_DISABLED", v, "must be true or false")
		}
		if disabled {
			return s, nil
		}
	}
	exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	switch exporter {
	case "", "otlp", "console", "none":
	default:
		return s, invalid("OTEL_TRACES_EXPORTER", exporter, "must be otlp, console or none")
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		switch v := getenv(name); v {
		case "", "grpc", "http/protobuf":
		default:
			return s, invalid(name, v, "must be grpc or http/protobuf")
		}
	}
	s.On = exporter != "none" && (exporter != "" ||
		getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
	var err error
	s.Sampler, err = sampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG"))
	return s, err
}

// sampler returns the sampler OTEL_TRACES_SAMPLER names (nil for none), as
// the SDK reads it, but refusing what the SDK would silently replace.
func sampler(name, arg string) (sdktrace.Sampler, error) {
	name = strings.ToLower(strings.TrimSpace(name))
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
		if err != nil || v < 0 || v > 1 {
			return 0, invalid("OTEL_TRACES_SAMPLER_ARG", arg, "must be a ratio between 0 and 1")
		}
		return v, nil
	}
	switch name {
	case "":
		return nil, nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, invalid("OTEL_TRACES_SAMPLER", name,
		"must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
}

// Setup turns tracing on for the process of role when the environment
// (getenv, os.Getenv) configures it, and returns the function that flushes
// and stops it at exit; with tracing off it does nothing and returns a
// function that does nothing. Export errors go to logger.
func Setup(ctx context.Context, role string, getenv func(string) string, logger *zap.Logger) (shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	s, err := FromEnv(getenv)
	if err != nil || !s.On {
		return none, err
	}
	exporter, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return none, &configError{msg: fmt.Sprintf("invalid tracing exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %v", err)}
	}
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName(ServiceNameDefault), tracing.RoleKey.String(role)),
		resource.Environment(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
	)
	if err != nil {
		return none, &configError{msg: fmt.Sprintf("invalid OTEL_RESOURCE_ATTRIBUTES: %v", err)}
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	if s.Sampler != nil {
		opts = append(opts, sdktrace.WithSampler(s.Sampler))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	if logger != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("tracing: spans not exported", zap.Error(err))
		}))
	}
	tracing.Use(tp)
	return func(ctx context.Context) error {
		tracing.Use(nil)
		return tp.Shutdown(ctx)
	}, nil
}

// HTTP returns h with a server span per request under /v1/ (ingest, the
// event lookups, the admin API; the probes, metrics, the polled status and
// the console's files get none), continuing the request's traceparent; h
// itself while tracing is off.
func HTTP(h http.Handler) http.Handler {
	if !tracing.Enabled() {
		return h
	}
	return otelhttpHandler(h)
}
