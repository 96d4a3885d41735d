package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/worker"
)

// Defaults of the environment.
const (
	eventsDefault = 100_000
	outDefault    = "bench-results.json"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	sub := ""
	if len(os.Args) > 1 {
		sub = os.Args[1]
	}
	switch sub {
	case "load":
		err = runLoad(ctx, os.Stdout, os.Args[2:])
	case "soak":
		err = runSoak(ctx, os.Stdout, os.Args[2:])
	case "replay":
		err = runReplay(ctx, os.Stdout, os.Args[2:])
	case "partitions":
		err = runPartitions(ctx, os.Stdout, os.Args[2:])
	case "soak-lock":
		err = runSoakLock(ctx, os.Args[2:])
	default:
		err = runBench(ctx, os.Stdout, os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// bench is one run of the benchmark.
type bench struct {
	out    io.Writer
	n      int
	chunks []int
	be     *backends
	l      *launcher
	res    *Results
	// stream is the stream of the ingest, dispatcher and worker stages.
	stream string
	// total is the backlog of the dispatcher and worker stages.
	total int
	// partitions is the --partitions of the roles (0: no flag, one
	// partition).
	partitions int
	// startup is the last dispatch run's: when every partition's stream
	// held an entry.
	startup startup
	// runs numbers the worker runs (for their groups).
	runs int
	// timeout bounds the wait for a stage to complete.
	timeout time.Duration
	// rawEvents are the originals of the raw limits.
	rawEvents []*outbox.Event
	// binB and abRuns: the dispatcher's A/B (-ab, -ab-runs).
	binB   string
	abRuns int
	// mongoSizes size the paths whose MongoDB commands are counted (zero:
	// mongostore's defaults).
	mongoSizes mongostore.MeasureConfig
}

// runBench runs the benchmark with the environment's settings.
func runBench(ctx context.Context, out io.Writer, args []string) error {
	b := &bench{out: out, n: eventsDefault}
	fs := flag.NewFlagSet("outboxd-bench", flag.ContinueOnError)
	bin := fs.String("bin", "bin/outboxd", "the outboxd binary (make build)")
	only := fs.String("stages", "", "run only these steps, comma-separated, in the usual order: "+strings.Join(stepNames, ", ")+
		" (a stage's ratio needs raw; dispatcher needs ingest; workers need dispatcher); default all")
	fs.StringVar(&b.binB, "ab", "", "A/B of the dispatcher: another outboxd binary whose dispatcher stage runs after -bin's on the same backlog, -ab-runs times each, alternated (stages dispatcher-a and dispatcher-b)")
	fs.IntVar(&b.abRuns, "ab-runs", 3, "with -ab: runs of each binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	selected, err := parseStages(*only)
	if err != nil {
		return err
	}
	if v := os.Getenv("BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < batchEvents {
			return fmt.Errorf("BENCH_EVENTS must be a number of at least %d (got %q)", batchEvents, v)
		}
		b.n = n
	}
	if b.chunks, err = parseChunks(os.Getenv("BENCH_CHUNKS")); err != nil {
		return err
	}
	outPath := env(outDefault, "BENCH_OUT")
	for _, p := range []string{*bin, b.binB} {
		if _, err := os.Stat(p); p != "" && err != nil {
			return fmt.Errorf("no outboxd binary at %s (make build): %w", p, err)
		}
	}
	if b.binB != "" && b.abRuns < 1 {
		return fmt.Errorf("%w: -ab-runs must be at least 1 (got %d)", errUsage, b.abRuns)
	}
	b.timeout = 2*time.Minute + time.Duration(b.n/1000)*time.Second
	began := time.Now()
	b.res = &Results{StartedAt: began.UTC(), Events: b.n, Machine: machine()}
	if b.be, err = openBackends(ctx); err != nil {
		return err
	}
	defer b.be.close()
	b.stream = b.be.stream("stages")
	b.l = &launcher{bin: *bin, dir: b.be.dir, profileDir: os.Getenv("BENCH_PROFILE")}
	fmt.Fprintf(out, "outboxd benchmark: %d events on %s; logs in %s\n", b.n, b.res.Machine, b.be.dir)
	if _, err := migrations.Postgres(ctx, b.be.pgURL); err != nil {
		return err
	}
	// The latency stage first: it measures a steady load, and after the
	// bulk stages PostgreSQL still has their writes to checkpoint (its
	// fsyncs stall commits; the harness's role may not run CHECKPOINT).
	steps := []func(context.Context) error{b.latency, b.rawLimits, b.ingest, b.relay, b.workStages, b.endToEnd, b.mongoCommands, b.chunkTable}
	for i, step := range steps {
		if !selected[stepNames[i]] || (stepNames[i] == stepChunks && len(b.chunks) == 0) {
			continue
		}
		if err := step(ctx); err != nil {
			return err
		}
	}
	b.res.WallSeconds = time.Since(began).Seconds()
	b.res.Print(out)
	if err := b.res.Write(outPath); err != nil {
		return err
	}
	chart := strings.TrimSuffix(outPath, ".json") + ".svg"
	if err := b.res.WriteSVG(chart); err != nil {
		return err
	}
	fmt.Fprintf(out, "results in %s, chart in %s\n", outPath, chart)
	return nil
}

// Steps of a run, in their order (-stages names them).
const stepChunks = "chunks"

var stepNames = []string{stageLatency, "raw", "ingest", stageDispatcher, "workers", stageEndToEnd, "mongo", stepChunks}

// parseStages parses -stages: the steps to run (all when v is empty).
func parseStages(v string) (map[string]bool, error) {
	out := map[string]bool{}
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(stepNames, f) {
			return nil, fmt.Errorf("%w: -stages names %q, not one of %s", errUsage, f, strings.Join(stepNames, ", "))
		}
		out[f] = true
	}
	if len(out) == 0 {
		for _, n := range stepNames {
			out[n] = true
		}
	}
	return out, nil
}

// parseChunks parses BENCH_CHUNKS ("250,500,1000,2000").
func parseChunks(v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > min(dispatcher.BatchSizeMax, worker.BatchSizeMax) {
			return nil, fmt.Errorf("BENCH_CHUNKS must list batch sizes between 1 and %d, like 250,500,1000,2000 (got %q)", min(dispatcher.BatchSizeMax, worker.BatchSizeMax), v)
		}
		out = append(out, n)
	}
	return out, nil
}
