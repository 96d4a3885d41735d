// Command outboxd-bench is the one benchmark harness of outboxd (make
// bench), its load run (make load) and the randomized
// fault soak (make soak). It is a binary of its own beside
// cmd/outboxd (it imports the domain packages, so it is no leaf of
// internal/), and all three run the real bin/outboxd as subprocesses with
// one launcher. Run it from the repository root after `make build`:
//
//	go run ./cmd/outboxd-bench          # the benchmark: a table and bench-results.json
//	go run ./cmd/outboxd-bench load     # the load run against a running outboxd (make run)
//	go run ./cmd/outboxd-bench soak     # the soak: faults at random, then the checker
//	go run ./cmd/outboxd-bench partitions  # dispatcher and worker rates for P = 1, 2, 4 (make bench-partitions)
//	go run ./cmd/outboxd-bench peer     # outboxd beside the Watermill peer of bench/peer (make bench-peer)
//
// # The benchmark
//
// One run measures, on this machine, the raw limits of the parts and each
// stage of outboxd against the limit it is bound by (ratio = stage ÷
// limit). The stages run the real binary (bin/outboxd, -bin) as
// subprocesses, so their throughput and peak RSS are the real process's.
// Every run is isolated: an SQLite file in a temporary folder, a stream and
// groups of its own (Redis keys under bench_<id>:), and a PostgreSQL
// database of its own, created for the run and dropped at its end.
//
// Raw limits, measured in this process with the libraries:
//   - store-insert-500: sqlitestore WriteTx with 500 originals and their 500
//     outbox entries (outbox.Writer.Records, Tx.InsertEvents and
//     InsertEntries; no key lookup), BENCH_EVENTS events on a fresh file;
//   - store-insert-1: the same transaction with one event, one after the
//     other for 3 seconds on that file (the store has one writer, so this
//     is the ceiling of single-event ingest whatever the client count);
//   - store-mark-synced: Store.MarkSynced of those originals in batches of
//     the worker's batch size (the worker's write to the store);
//   - redis-xadd: XADD of the messages the dispatcher writes
//     (outbox.Event.Message(...).Values()), pipelines of 1,000;
//   - redis-read-ack: XREADGROUP (COUNT = the worker's batch size) and XACK
//     of what it read, in a loop, from a new group at 0;
//   - pg-project: the worker's default projector (readmodel.Projector,
//     its one-statement unnest insert) through pgx in a tight loop on one
//     connection, one transaction per batch of the worker's size;
//   - pg-project-sql: the same with the demo read model as a SQL
//     projection file (projection.Demo, projection/demo.sql): what
//     `work --projection` costs beside the Go projector;
//   - redis-to-pg: the serial combination of redis-read-ack and pg-project,
//     1/(1/a + 1/b): the time one worker needs per event if it did nothing
//     but read, acknowledge and project. It is computed, not measured.
//   - http-refused-1, measured on the ingest-single process after its
//     stage: 8 clients post, for 2 seconds, single events the API refuses
//     (422, no deviceKey: decoded and validated, no store call). It is the
//     ceiling of single-event ingest's request path on this machine (the
//     load generator included), beside the store's (store-insert-1).
//
// Stages, each on its own subprocess(es):
//   - ingest-batch: `outboxd ingest`; 4 clients post batches of 500 until
//     BENCH_EVENTS are accepted. Limit: store-insert-500;
//   - ingest-single: a new `outboxd ingest` on the same file; 8 clients post
//     single events, min(BENCH_EVENTS/4, 30,000) in all. Limit:
//     store-insert-1. The ingest stages report request latency too;
//   - dispatcher: `outboxd dispatch` relays the backlog both ingest stages
//     left, timed until the store reports no undispatched entry. Limit:
//     redis-xadd;
//   - worker-1, worker-2: one and two `outboxd work` processes drain the
//     whole stream from a new group at 0 into an empty read model, timed
//     until the store reports no pending original. Limit: redis-to-pg for
//     both (the ratio of worker-2 shows how a second worker scales);
//   - end-to-end: `outboxd dev` on a fresh file and stream; 4 clients post
//     batches of 500, timed from the first request until every original is
//     synced. Limit: the smallest of store-insert-500, redis-xadd and
//     redis-to-pg (the pipeline's bottleneck part);
//   - latency (run first, before the bulk stages leave PostgreSQL with
//     hundreds of thousands of rows to checkpoint, which stalls its commits
//     for a while): `outboxd dev` on a fresh file and stream; single events paced
//     at 2,000/s for 15 seconds by up to 64 senders; afterwards each event's
//     syncedAt is read from the store and compared with the time its
//     request started. syncedAt is stored at millisecond precision
//     (truncated), so a latency may read up to 1 ms short. The figure is
//     then split into its hops (Hops): ingest (→ createdAt), relay (→ the
//     millisecond of the event's stream entry id, read from the stream
//     before it is trimmed) and sync (→ syncedAt), with each hop's mean
//     over the slowest 1%; and the share of the machine's cores busy while
//     the events were posted (/proc/stat; JSON "cpuBusy").
//
// The dispatcher and worker stages are timed from the start of their
// processes, so they include it (tens of milliseconds); the stages that
// post are timed from their first request.
//
// The stores are reset between stages by copying snapshots of the SQLite
// file taken while no process has it open (after the ingest stages: the
// undispatched backlog; after the dispatcher: every entry relayed, no
// original synced), which does not depend on the store's schema; the read
// model is truncated and each worker run gets a new group. Completion is
// polled with deadlines on the store's Counts; a stage that does not
// complete fails the run (exit 1, with the tail of the process's log).
//
// Last, the MongoDB store's commands per path (mongostore.MeasureCommands,
// the table of docs/mongodb.md: an ingest group of 500, a worker batch and
// a dispatcher batch of 2,000, a reconciler sweep of 1,000) are counted on
// lungo, and also on a replica set when BENCH_MONGO_URI (or
// OUTBOXD_TEST_MONGO_URI) names one, in a database of the run's own that is
// dropped afterwards (JSON key "mongoCommands").
//
// Every stage that posts, and the latency stage, also reports the group
// commit's histogram (outboxd_ingest_group_events, read from the process's
// /metrics before it stops: groups, mean events per group, groups per
// size range; JSON key "groupSizes"), and the SQLite store's writer by
// role (outboxd_store_writer_wait_seconds and _held_seconds: per role the
// write transactions, their mean and p99 wait for the write connection and
// lock, and the mean time they held it; JSON key "writer"). The latency
// stage and the worker stages add the workers' batches
// (outboxd_worker_batch_entries and outboxd_worker_projection_seconds: how
// many, their mean size, their PostgreSQL transaction's mean, p99 and
// total; JSON key "worker"). For a worker stage the line also gives the
// share of the stage its workers spent in transactions and the events per
// second of transaction time beside pg-project: a worker stage that spends
// nearly all its time in transactions is as fast as PostgreSQL is while it
// runs, which on a shared machine drifts from the raw limits' run.
//
// Every stage also reports the CPU time the whole machine used during it
// (/proc/stat: every process, so outboxd, Redis, PostgreSQL and the
// bench's own clients; the machine should be otherwise idle) per event
// (JSON "cpuSeconds", "cpuMicrosPerEvent"). The parts of the end-to-end
// stage run on the same cores, so its rate is bounded by the cores over
// the sum of ingest-batch's, the dispatcher's and worker-1's CPU per
// event; the line "CPU bound of end-to-end" prints that bound and the
// share of it the end-to-end stage reached.
//
// Every stage also splits its CPU per event (JSON "cpu"; the table's
// column "process / PostgreSQL / Redis / machine"): the stage's own
// processes (/proc/PID/stat, threads and reaped children), every process
// named postgres (the server is shared: another client's backend counts
// too), redis-server, and the whole machine as above; "harness" in the
// JSON is the bench process itself (the load generator).
//
// The light stages (light-500; BENCH_LIGHT_RATES=100,500,2000 runs more,
// BENCH_LIGHT_FOR is how long, 10s, BENCH_LIGHT_FLAGS extra flags of
// `outboxd dev`) offer single events paced at the rate to `outboxd dev` on
// a fresh file, timed from the first request until every one is synced:
// the figure is the CPU per event of a light load, the process's above all.
//
// # The peer
//
// `outboxd-bench peer` (make bench-peer) runs, in alternating rounds
// (-rounds, BENCH_ROUNDS in make: 3; odd rounds outboxd first), the stages
// ingest-batch, ingest-single (min(BENCH_EVENTS/4, 5,000) events), relay,
// one consumer, end-to-end and the light stages of outboxd as above and of
// the Watermill pipeline of bench/peer (bin/outboxd-peer, -peer; its roles
// ingest, forward, work and dev), from outside with the same load
// generator. BENCH_EVENTS defaults to 20,000. Each round ends with an
// exactly-once check of the end-to-end read model (one row per event, the
// daily counts adding up to the events, every original synced); a stream
// holding more entries than events (a duplicate relayed) is printed. The
// table gives per stage the median events/s of each system, the ratio
// outboxd ÷ peer (the median of the rounds' ratios, each taken within one
// round, and their range) and the median CPU per event of each;
// bench-peer-results.json (BENCH_OUT) holds every round's stages.
//
// peakRssBytes is the largest VmHWM (/proc/PID/status, read just before a
// process is stopped) of every stage process, and peakRssStage names its
// stage.
//
// Flags: -bin (the binary, bin/outboxd); -stages, the steps to run, in
// their usual order (latency, raw, ingest, dispatcher, workers,
// end-to-end, mongo, chunks; default all: a ratio needs raw, the
// dispatcher needs ingest's backlog, the workers the dispatcher's run);
// -ab BIN, an A/B of the dispatcher and of one worker: after -bin's
// dispatcher stage, that of -bin and of BIN run -ab-runs times each (3),
// alternated, on the same backlog, as the stages dispatcher-a and
// dispatcher-b, and after the worker stages worker-1 the same way
// (worker-1-a, worker-1-b), so that two builds are compared run against
// run while the machine's load moves.
//
// Environment:
//   - BENCH_EVENTS: the backlog (default 100,000);
//   - BENCH_OUT: where the results go (default bench-results.json); the
//     chart goes beside it, with .svg for .json (bench-results.svg): each
//     stage's events/s beside its limit's, and the latency stage's
//     histogram of ingest → syncedAt with its p50 and p99;
//   - BENCH_CHUNKS: batch sizes, e.g. "250,500,1000,2000": the dispatcher
//     (--relay-batch) and worker-1 (--batch-size) stages run again at each,
//     with redis-xadd and redis-to-pg measured at the same size, into a
//     chunk table (JSON key "chunks");
//   - BENCH_PROFILE=DIR: each stage process serves --pprof, and the harness
//     writes a CPU profile of the stage to DIR/<stage>.pprof (one-second
//     profiles back to back, merged; a stage with two processes merges
//     both). Profiling costs the stages a few percent;
//   - BENCH_STEPS: the default of -stages (above); BENCH_STEPS=raw,ingest
//     is an A/B of ingest;
//   - BENCH_MONGO_URI: a MongoDB replica set whose commands per path are
//     counted too (default OUTBOXD_TEST_MONGO_URI; none: lungo only);
//     BENCH_MONGO=off skips the count;
//   - BENCH_REDIS_URL, BENCH_POSTGRES_URL: the servers (default: the
//     variables of the tests, OUTBOXD_TEST_REDIS_URL and
//     OUTBOXD_TEST_POSTGRES_URL, then outboxd's defaults). The PostgreSQL
//     role must be allowed to create databases.
//
// # The chunk exercise
//
// `outboxd-bench chunks` (make bench-chunks) is the recovery exercise at
// growing chunk sizes, REPLAY_CHUNKS (500,1000,2000): for each, a fresh
// `outboxd dev` with --batch-size at that size and --replay-rate 0 holds
// REPLAY_EVENTS (50,000) synced originals whose read-model rows are then
// deleted (a failed window), and `outboxd replay --chunk` at that size
// re-publishes all of them while single events are posted at
// REPLAY_LIVE_RATE (500/s); the read model must hold each once, counted
// once, at the end. It prints the replay command's time, the
// recovery time (until the replay lane is drained), the share of the
// run's active PostgreSQL backends seen waiting on a lock (pg_stat_activity
// sampled every 5 ms) and the live events' p99, and writes
// chunks-results.json (BENCH_OUT).
//
// # The load run
//
// `outboxd-bench load` is a newcomer's load run against an outboxd that already
// serves (make run; SERVER, default http://127.0.0.1:8080): 8 clients post
// single events for LOAD_SINGLE (60s), then 4 clients post batches of 500
// for LOAD_BATCH (30s). It prints the accepted events/s of every 10-second
// window, the p50 and p99 request latency of each phase, and how long the
// pipeline took, after the load stopped, to report every original synced
// (GET /v1/status), each beside its target. AUTH_TOKEN is sent as the
// bearer token when set.
//
// # The soak
//
// `outboxd-bench soak` (soak.go, soakclient.go, nemesis.go) runs every role
// as its own process (two ingest, two dispatch, three work, one reconcile
// --every with the audit every 10 s) on one SQLite store (SOAK_STORE:
// sqlite, mongodb on OUTBOXD_TEST_MONGO_URI, or one dev on lungo:memory),
// a redis-server of its own (internal/redisproc) and a PostgreSQL database
// of its own reached through a fault proxy (internal/faultnet). Four
// clients post single events and batches of 2 to 20 with their own
// idempotency keys, each request retried with the same keys and content
// until it is answered 2xx; every request, answer and fault is a line of
// history.jsonl. The nemesis draws from SOAK_SEED a pause of 1 to 5 s, a
// fault (SOAK_FAULTS: kill, stop, redis-restart, redis-oom, redis-stop,
// pg-drop, pg-delay, pg-stall, sqlite-lock) and its length (1 to 12 s),
// injects it, heals it and prints one line, until SOAK_DURATION (10m)
// passes. Then it heals everything, the clients finish their retries, and
// the checker (internal/checker) is polled until the pipeline converged or
// SOAK_CONVERGE (3m) passed. A violation: a key lost, duplicated or
// unexpected, statistics that differ from the rows, work left over, a key
// never acknowledged, a key answered with two ids, a 4xx answer to a valid
// request, a role that exited on its own or failed its SIGTERM, or drift
// the audit found. The soak exits 1 on any, printing each, and keeps the
// run's folder and database; a clean run removes both.
//
// `outboxd-bench soak-lock PATH DURATION` is the nemesis's helper: another
// process that holds the SQLite file's writer lock.
package main
