package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
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
	case "chunks":
		err = runChunks(ctx, os.Stdout, os.Args[2:])
	case "peer":
		err = runPeer(ctx, os.Stdout, os.Args[2:])
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
	// binB and abRuns: the A/B of the dispatcher and worker-1 (-ab, -ab-runs).
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
	only := fs.String("stages", os.Getenv("BENCH_STEPS"), "run only these steps, comma-separated, in the usual order: "+strings.Join(stepNames, ", ")+
		" (a stage's ratio needs raw; dispatcher needs ingest; workers need dispatcher); default BENCH_STEPS, else all")
	fs.StringVar(&b.binB, "ab", "", "A/B of the dispatcher and of one worker: another outboxd binary whose dispatcher and worker-1 stages run after -bin's on the same backlog, -ab-runs times each, alternated (stages dispatcher-a, dispatcher-b, worker-1-a, worker-1-b)")
	fs.IntVar(&b.abRuns, "ab-runs", 3, "with -ab: runs of each binary")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The latency stage first: it measures a steady load, and after the
	// bulk stages PostgreSQL still has their writes to checkpoint (its
	// fsyncs stall commits; the harness's role may not run CHECKPOINT).
	steps, err := selectSteps([]step{{stageLatency, b.latency}, {stepRaw, b.rawLimits}, {stepIngest, b.ingest},
		{stageDispatcher, b.relay}, {stepWorkers, b.workStages}, {stageEndToEnd, b.endToEnd}, {stageLight, b.light}, {stepMongo, b.mongoCommands},
		{stepChunks, b.chunkTable}}, *only)
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
	b.res = &Results{StartedAt: began.UTC(), Events: b.n, Machine: machine(), Cores: runtime.NumCPU()}
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
	for _, step := range steps {
		if err := step.run(ctx); err != nil {
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

// Steps of a run that are not stages (-stages, BENCH_STEPS name them).
const (
	stepRaw     = "raw"
	stepIngest  = "ingest"
	stepWorkers = "workers"
	stepMongo   = "mongo"
	stepChunks  = "chunks" // only with BENCH_CHUNKS
)

// stepNames are the steps of a run, in their order.
var stepNames = []string{stageLatency, stepRaw, stepIngest, stageDispatcher, stepWorkers, stageEndToEnd, stageLight, stepMongo, stepChunks}

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

// step is one part of the benchmark, named for -stages.
type step struct {
	name string
	run  func(context.Context) error
}

// selectSteps keeps the steps list names (-stages or BENCH_STEPS,
// comma-separated: "raw,ingest,dispatcher"), in their order; an empty
// list keeps them all. A stage's ratio needs the raw step; the dispatcher
// needs ingest's backlog, the workers the dispatcher's stream.
func selectSteps(steps []step, list string) ([]step, error) {
	var names []string
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.ContainsFunc(steps, func(s step) bool { return s.name == n }) {
			return nil, fmt.Errorf("%w: -stages (BENCH_STEPS) names %q, not one of %s", errUsage, n, strings.Join(stepNames, ", "))
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return steps, nil
	}
	return slices.DeleteFunc(steps, func(s step) bool { return !slices.Contains(names, s.name) }), nil
}
