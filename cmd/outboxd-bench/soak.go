package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/checker"
	"github.com/outboxd/outboxd/internal/faultnet"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/redact"
	"github.com/outboxd/outboxd/internal/redisproc"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// Defaults of the soak's environment.
const (
	soakDurationDefault = 10 * time.Minute
	// soakConvergeDefault bounds the wait for the pipeline to converge
	// after the nemesis stopped (SOAK_CONVERGE).
	soakConvergeDefault = 3 * time.Minute
	// soakClients is how many clients post events.
	soakClients = 4
	// soakAuditEvery is the audit's interval in the reconcile role.
	soakAuditEvery = 10 * time.Second
)

// The stores a soak can run on (SOAK_STORE).
const (
	soakStoreSQLite = "sqlite"
	soakStoreMongo  = "mongodb"
	soakStoreLungo  = "lungo"
)

// soak is one run of the randomized fault soak (make soak).
type soak struct {
	out      io.Writer
	bin      string
	seed     uint64
	duration time.Duration
	converge time.Duration
	faults   []string
	store    string
	// partitions is every role's --partitions (SOAK_PARTITIONS, 1).
	partitions int
	// storeFlag is the --store every role gets; storeDB the database
	// (mongodb).
	storeFlag, mongoDB string

	dir       string
	redis     *redisproc.Server
	rdb       *redis.Client
	pgProxy   *faultnet.Proxy
	adminURL  string
	dbName    string
	pgURL     string // the run's database, direct
	pgProxied string // the same database through pgProxy: what the roles get
	pg        *pgxpool.Pool
	l         *launcher
	hist      *history

	mu    sync.Mutex
	roles []*soakRole
	// crashes are the roles that exited without the nemesis killing them.
	crashes []string

	acked   sync.Map // idempotency key → true once answered 2xx
	sent    sync.Map // idempotency key → true once sent
	nAcked  int
	started time.Time
	// rejected are the first answers no retry can change (a 4xx other than
	// 408 and 429: a request the soak's clients make is always valid), or
	// that broke a promise (a key answered with two ids); nRejected counts
	// them all.
	rejected  []string
	nRejected int
}

// soakRole is one role process of the soak; proc is replaced when the
// process is restarted.
type soakRole struct {
	name, role string
	args       []string
	proc       *proc
	// killed is set while the nemesis has killed the process on purpose,
	// stopped while it holds it with SIGSTOP.
	killed, stopped bool
}

// runSoak runs the soak with the environment's settings and returns an
// error (exit 1) when the checker finds a violation.
func runSoak(ctx context.Context, out io.Writer, args []string) error {
	s, err := newSoak(out, args)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// errUsage marks a bad setting of the environment (exit 2).
var errUsage = errors.New("usage")

func newSoak(out io.Writer, args []string) (*soak, error) {
	s := &soak{out: out, bin: "bin/outboxd", duration: soakDurationDefault, converge: soakConvergeDefault, store: soakStoreSQLite, partitions: 1}
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-bin" && i+1 < len(args):
			s.bin = args[i+1]
			i++
		default:
			return nil, fmt.Errorf("%w: soak takes -bin PATH only (got %q); the rest comes from SOAK_* variables", errUsage, args[i])
		}
	}
	var err error
	if s.duration, err = durationEnv("SOAK_DURATION", soakDurationDefault); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if s.converge, err = durationEnv("SOAK_CONVERGE", soakConvergeDefault); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		if s.seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: SOAK_SEED must be an unsigned integer (got %q)", errUsage, v)
		}
	} else {
		s.seed = uint64(time.Now().UnixNano() % 1_000_000_000)
	}
	switch s.store = env(soakStoreSQLite, "SOAK_STORE"); s.store {
	case soakStoreSQLite, soakStoreLungo:
	case soakStoreMongo:
		if os.Getenv("OUTBOXD_TEST_MONGO_URI") == "" {
			return nil, fmt.Errorf("%w: SOAK_STORE=mongodb needs a replica set in OUTBOXD_TEST_MONGO_URI", errUsage)
		}
	default:
		return nil, fmt.Errorf("%w: SOAK_STORE must be sqlite, mongodb or lungo (got %q)", errUsage, s.store)
	}
	if v := os.Getenv("SOAK_PARTITIONS"); v != "" {
		if s.partitions, err = strconv.Atoi(v); err != nil || outbox.ValidatePartitions(s.partitions) != nil {
			return nil, fmt.Errorf("%w: SOAK_PARTITIONS must be a number of partitions from 1 to %d (got %q)", errUsage, outbox.PartitionsMax, v)
		}
	}
	if s.faults, err = parseFaults(os.Getenv("SOAK_FAULTS"), s.store); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if _, err := os.Stat(s.bin); err != nil {
		return nil, fmt.Errorf("no outboxd binary at %s (make build): %w", s.bin, err)
	}
	return s, nil
}

func (s *soak) run(ctx context.Context) (err error) {
	s.started = time.Now()
	if err := s.setUp(ctx); err != nil {
		s.tearDown(true)
		return err
	}
	failed := true
	defer func() { s.tearDown(failed) }()
	fmt.Fprintf(s.out, "soak: seed %d (SOAK_SEED=%d repeats the fault schedule), %s on %s, %d partition(s), faults %s; history and logs in %s\n",
		s.seed, s.seed, s.duration, s.store, s.partitions, strings.Join(s.faults, ","), s.dir)

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var clients sync.WaitGroup
	deadline := time.Now().Add(s.duration)
	retryUntil := deadline.Add(s.converge)
	for c := range soakClients {
		clients.Go(func() { s.client(loadCtx, c, deadline, retryUntil) })
	}
	n := newNemesis(s, rand.New(rand.NewPCG(s.seed, 0x50a6)))
	n.run(ctx, deadline)
	healErr := s.healAll(ctx)
	clients.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintf(s.out, "soak: nemesis stopped after %d faults; waiting up to %s for the pipeline to converge\n", n.total(), s.converge)
	convergeFrom := time.Now()
	v, cerr := s.waitConverged(ctx, retryUntil)
	if cerr == nil {
		fmt.Fprintf(s.out, "soak: converged %s after the nemesis stopped\n", time.Since(convergeFrom).Round(100*time.Millisecond))
	}
	audit, auditDrift := s.auditLine(ctx)
	s.stopAll()

	s.mu.Lock()
	crashes, rejected, nRejected := slices.Clone(s.crashes), slices.Clone(s.rejected), s.nRejected
	s.mu.Unlock()
	unacked := 0
	s.sent.Range(func(k, _ any) bool {
		if _, ok := s.acked.Load(k); !ok {
			unacked++
		}
		return true
	})
	if audit != "" {
		fmt.Fprintln(s.out, audit)
	}
	fmt.Fprintf(s.out, "faults: %d (%s); acknowledged: %d; lost=%d duplicated=%d unexpected=%d stats-drift=%d\n",
		n.total(), n.summary(), s.ackedCount(), v.Lost, v.Duplicated, v.Unexpected, len(v.StatsMismatch))
	var problems []string
	if healErr != nil {
		problems = append(problems, fmt.Sprintf("healing the faults failed: %v", healErr))
	}
	if cerr != nil {
		problems = append(problems, cerr.Error())
	}
	if v.Violations() > 0 || !v.OK() {
		problems = append(problems, "checker: "+v.String())
	}
	if auditDrift > 0 {
		problems = append(problems, "the audit found drift the checker did not: "+audit)
	}
	if unacked > 0 {
		problems = append(problems, fmt.Sprintf("%d keys were never acknowledged, though their clients retried until %s after the nemesis stopped", unacked, s.converge))
	}
	for _, c := range crashes {
		problems = append(problems, "crashed: "+c)
	}
	for _, r := range rejected {
		problems = append(problems, "rejected: "+r)
	}
	if nRejected > len(rejected) {
		problems = append(problems, fmt.Sprintf("rejected: %d more answers like these (history.jsonl has every one)", nRejected-len(rejected)))
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(s.out, "violation:", p)
		}
		return fmt.Errorf("the soak found %d violations (seed %d); history and logs kept in %s", len(problems), s.seed, s.dir)
	}
	failed = false
	return nil
}

func (s *soak) ackedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nAcked
}

// setUp creates the run's folder, its redis-server, its PostgreSQL
// database behind a proxy, the store's schema, and starts every role.
func (s *soak) setUp(ctx context.Context) error {
	var err error
	if s.dir, err = os.MkdirTemp("", "outboxd-soak-"); err != nil {
		return err
	}
	if s.hist, err = newHistory(filepath.Join(s.dir, "history.jsonl"), s.started); err != nil {
		return err
	}
	port, err := redisproc.SparePort()
	if err != nil {
		return err
	}
	s.redis = &redisproc.Server{Port: port, Dir: s.dir}
	if err := s.redis.Start(10 * time.Second); err != nil {
		return err
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.redis.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})

	s.adminURL = env(postgresURLDefault, "SOAK_POSTGRES_URL", "OUTBOXD_TEST_POSTGRES_URL")
	s.dbName = "outboxd_soak_" + newID()
	admin, err := pgx.Connect(ctx, s.adminURL)
	if err != nil {
		return fmt.Errorf("PostgreSQL must run at %s (make services): %w", redact.DSN(s.adminURL), err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+s.dbName)
	_ = admin.Close(context.Background())
	if err != nil {
		return fmt.Errorf("error creating database %s: %w", s.dbName, err)
	}
	if s.pgURL, err = withDatabase(s.adminURL, s.dbName); err != nil {
		return err
	}
	u, err := url.Parse(s.pgURL)
	if err != nil {
		return err
	}
	if s.pgProxy, err = faultnet.Listen("127.0.0.1:0", net.JoinHostPort(cmpOr(u.Hostname(), "127.0.0.1"), cmpOr(u.Port(), "5432"))); err != nil {
		return err
	}
	u.Host = s.pgProxy.Addr()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	s.pgProxied = u.String()
	if s.pg, err = pgxpool.New(ctx, s.pgURL); err != nil {
		return err
	}

	switch s.store {
	case soakStoreSQLite:
		s.storeFlag = "sqlite:" + filepath.Join(s.dir, "soak.db")
	case soakStoreMongo:
		s.storeFlag, s.mongoDB = os.Getenv("OUTBOXD_TEST_MONGO_URI"), s.dbName
	case soakStoreLungo:
		s.storeFlag = mongostore.LungoMemory
	}
	s.l = &launcher{bin: s.bin, dir: s.dir}
	if s.store != soakStoreLungo {
		if err := s.migrate(ctx); err != nil {
			return err
		}
	}
	for _, r := range s.roleTable() {
		p, err := s.l.spawn(r.name, r.role, r.args...)
		if err != nil {
			return err
		}
		r.proc = p
		s.roles = append(s.roles, r)
	}
	var procs []*proc
	for _, r := range s.roles {
		procs = append(procs, r.proc)
	}
	return s.l.ready(ctx, procs...)
}

// migrate runs `outboxd migrate` on the run's store and database.
func (s *soak) migrate(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"migrate"}, s.storeArgs(false)...)...) //nolint:gosec // the harness's own binary
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("outboxd migrate failed (%w):\n%s", err, out)
	}
	return nil
}

// storeArgs are the store and PostgreSQL flags of a role; proxied gives
// the roles the database through the proxy.
func (s *soak) storeArgs(proxied bool) []string {
	args := []string{"--store", s.storeFlag}
	if s.mongoDB != "" {
		args = append(args, "--mongo-db", s.mongoDB)
	}
	pg := s.pgURL
	if proxied {
		pg = s.pgProxied
	}
	return append(args, "--postgres-url", pg)
}

// roleTable returns the roles of the run: on a store every process can
// reach, two ingest, two dispatch, three work and one reconcile --every,
// each its own process; on lungo (memory of one process) one dev.
func (s *soak) roleTable() []*soakRole {
	redisArgs := []string{"--redis-url", s.redis.URL(), "--partitions", strconv.Itoa(s.partitions)}
	// Short timeouts so that the faults are noticed and healed within a
	// run: leases, breakers, the reclaim of a dead worker's entries and
	// the reconciler's ages.
	dispatchArgs := []string{"--lease-ttl", "3s", "--breaker-timeout", "2s"}
	workArgs := []string{"--claim-idle", "5s", "--breaker-timeout", "2s", "--retry-backoff", "200ms"}
	reconcileArgs := []string{"--every", "5s", "--min-age", "10s", "--requeue-after", "15s",
		"--audit-every", soakAuditEvery.String()}
	withStore := func(proxied bool, extra ...[]string) []string {
		args := s.storeArgs(proxied)
		for _, e := range extra {
			args = append(args, e...)
		}
		return args
	}
	if s.store == soakStoreLungo {
		args := withStore(true, redisArgs, dispatchArgs, workArgs, reconcileArgs)
		return []*soakRole{{name: "dev-1", role: "dev", args: args}}
	}
	var out []*soakRole
	add := func(role string, n int, args []string) {
		for i := 1; i <= n; i++ {
			name := fmt.Sprintf("%s-%d", role, i)
			a := slices.Clone(args)
			if role == "work" {
				// A restarted worker keeps its name and drains its own
				// pending entries first.
				a = append(a, "--consumer", name)
			}
			out = append(out, &soakRole{name: name, role: role, args: a})
		}
	}
	ingestArgs := []string{"--store", s.storeFlag, "--request-timeout", "5s", "--partitions", strconv.Itoa(s.partitions)}
	if s.mongoDB != "" {
		ingestArgs = append(ingestArgs, "--mongo-db", s.mongoDB)
	}
	add("ingest", 2, ingestArgs)
	add("dispatch", 2, append(withoutPostgres(s.storeArgs(false)), append(redisArgs, dispatchArgs...)...))
	add("work", 3, withStore(true, redisArgs, workArgs))
	add("reconcile", 1, withStore(true, redisArgs, reconcileArgs))
	return out
}

// withoutPostgres drops --postgres-url from args (roles that take none).
func withoutPostgres(args []string) []string {
	if i := slices.Index(args, "--postgres-url"); i >= 0 {
		return slices.Delete(slices.Clone(args), i, i+2)
	}
	return args
}

// role returns the role process named name.
func (s *soak) role(name string) *soakRole {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.roles {
		if r.name == name {
			return r
		}
	}
	return nil
}

// ingestURLs returns the base URLs of the ingest processes that run now.
func (s *soak) ingestURLs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.roles {
		if (r.role == "ingest" || r.role == "dev") && !r.killed {
			out = append(out, r.proc.url(""))
		}
	}
	return out
}

// watch restarts roles that exit without the nemesis killing them, and
// records each such crash.
func (s *soak) watch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.roles {
		if r.killed {
			continue
		}
		select {
		case <-r.proc.exited:
		default:
			continue
		}
		crash := fmt.Sprintf("%s exited on its own (%v) at %s; the end of its log %s:\n%s", r.name, r.proc.err,
			time.Since(s.started).Round(100*time.Millisecond), r.proc.log, tail(r.proc.log, 20))
		s.crashes = append(s.crashes, crash)
		s.hist.record(map[string]any{"op": "crash", "target": r.name, "err": fmt.Sprint(r.proc.err)})
		if p, err := s.l.spawn(r.name, r.role, r.args...); err == nil {
			r.proc = p
		}
	}
}

// healAll ends every fault: SIGCONT for stopped roles, a restart for
// killed ones, Redis up and writable, the proxy forwarding.
func (s *soak) healAll(ctx context.Context) error {
	var errs []error
	s.mu.Lock()
	for _, r := range s.roles {
		if r.stopped {
			_ = r.proc.cmd.Process.Signal(syscall.SIGCONT)
			r.stopped = false
		}
		if r.killed {
			p, err := s.l.spawn(r.name, r.role, r.args...)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.proc, r.killed = p, false
		}
	}
	s.mu.Unlock()
	if !s.redis.Running() {
		errs = append(errs, s.redis.Start(10*time.Second))
	}
	errs = append(errs, s.redis.Signal(syscall.SIGCONT))
	errs = append(errs, s.rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	errs = append(errs, s.pgProxy.Heal())
	return errors.Join(errs...)
}

// waitConverged polls the checker until the pipeline converged (nothing
// lost, duplicated or unexpected, statistics equal to the rows, nothing
// left over) or until, and returns the last verdict.
func (s *soak) waitConverged(ctx context.Context, until time.Time) (checker.Verdict, error) {
	st, err := s.openStore(ctx)
	if err != nil {
		return checker.Verdict{}, err
	}
	if st != nil {
		defer func() { _ = st.Close(context.Background()) }()
	}
	keys := stream.NewKeys(outbox.StreamDefault, stream.GroupDefault).Split(s.partitions)
	rc, err := stream.NewClient(s.rdb, nil)
	if err != nil {
		return checker.Verdict{}, err
	}
	pending := func(ctx context.Context) (int64, error) { return rc.GroupPending(ctx, keys) }
	var v checker.Verdict
	var last error
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.watch()
		in := checker.Input{Store: st, Pool: s.pg, PendingEntries: pending, Accepted: s.acceptedKeys()}
		v, last = checker.Check(ctx, in)
		if last == nil && v.OK() && s.allAcked() {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(until) {
			if last != nil {
				return v, fmt.Errorf("the checker failed: %w", last)
			}
			return v, fmt.Errorf("not converged within %s after the nemesis stopped: %s%s", s.converge, v, pendingDetail(ctx, s.rdb, keys))
		}
	}
}

// pendingDetail lists, for a verdict that is not converged, the first
// pending entries of every partition's stream and replay lane: id,
// consumer, idle time and delivery count, so that the kept logs can be
// searched for them. "" when none is pending.
func pendingDetail(ctx context.Context, rdb redis.UniversalClient, keys stream.Keys) string {
	var b strings.Builder
	for _, k := range keys.Live().AllPartitions() {
		for _, key := range []string{k.Stream(), k.ReplayLane().Stream()} {
			ps, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: k.Group(), Start: "-", End: "+", Count: 10}).Result()
			if err != nil {
				continue // no group yet, or Redis away: the verdict says enough
			}
			for _, p := range ps {
				fmt.Fprintf(&b, "; pending %s %s to %s, idle %s, delivered %d times", key, p.ID, p.Consumer, p.Idle.Round(time.Millisecond), p.RetryCount)
			}
		}
	}
	return b.String()
}

// openStore opens the run's store for the checker (nil on lungo: only the
// dev process can read its memory).
func (s *soak) openStore(ctx context.Context) (store.Store, error) {
	switch s.store {
	case soakStoreSQLite:
		return sqlitestore.Open(ctx, strings.TrimPrefix(s.storeFlag, "sqlite:"), nil)
	case soakStoreMongo:
		return mongostore.Open(ctx, s.storeFlag, &mongostore.Options{Database: s.mongoDB})
	}
	return nil, nil
}

func (s *soak) acceptedKeys() []string {
	var out []string
	s.acked.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	return out
}

func (s *soak) allAcked() bool {
	all := true
	s.sent.Range(func(k, _ any) bool {
		_, ok := s.acked.Load(k)
		all = ok
		return ok
	})
	return all
}

// stopAll stops every role with SIGTERM; a role that fails to stop
// cleanly is a crash.
func (s *soak) stopAll() {
	s.mu.Lock()
	roles := slices.Clone(s.roles)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range roles {
		wg.Go(func() {
			if err := r.proc.stop(); err != nil {
				s.mu.Lock()
				s.crashes = append(s.crashes, "on SIGTERM: "+err.Error())
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// tearDown kills what still runs, drops the database and removes the
// run's folder, unless the run failed: then the folder (history, logs,
// store) stays for a person to read.
func (s *soak) tearDown(failed bool) {
	for _, r := range s.roles {
		if r.proc != nil {
			_ = r.proc.cmd.Process.Signal(syscall.SIGCONT)
			r.proc.kill()
		}
	}
	if s.hist != nil {
		_ = s.hist.close()
	}
	if s.pgProxy != nil {
		s.pgProxy.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.redis != nil {
		s.redis.Kill()
	}
	if s.pg != nil {
		s.pg.Close()
	}
	if s.dbName != "" && !failed {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if admin, err := pgx.Connect(ctx, s.adminURL); err == nil {
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+s.dbName+" WITH (FORCE)")
			_ = admin.Close(ctx)
		}
	}
	if s.dir != "" && !failed {
		_ = os.RemoveAll(s.dir)
	}
	if failed && s.dir != "" {
		fmt.Fprintf(s.out, "soak: kept %s (history.jsonl, one log per role, the store) and database %s\n", s.dir, s.dbName)
	}
}

// cmpOrRole returns a unless it is nil, else b.
func cmpOrRole(a, b *soakRole) *soakRole {
	if a != nil {
		return a
	}
	return b
}

// cmpOr returns a unless it is empty, else b.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// auditLine reads the last run of the read model's audit (the reconcile
// role audits every soakAuditEvery) and returns the line that reports it,
// and the drift it found: the audit must find none where the checker
// finds none.
func (s *soak) auditLine(ctx context.Context) (string, int) {
	rep, err := operator.LastAudit(ctx, readmodel.New(s.pg), outbox.StreamDefault)
	switch {
	case err != nil:
		return fmt.Sprintf("audit: the last run could not be read: %v", err), 0
	case rep == nil:
		return "audit: no run recorded", 0
	}
	drift := rep.DriftTotal()
	line := fmt.Sprintf("audit: last run %s ago compared %d originals and %d statistics rows; drift %v",
		time.Since(rep.StartedAt).Round(time.Second), rep.Checked, rep.StatsChecked, rep.Drift)
	// Every run since the reconcile role last started, from its metrics.
	if r := cmpOrRole(s.role("reconcile-1"), s.role("dev-1")); r != nil {
		if checked, total, err := auditTotals(ctx, r.proc.url("/metrics")); err == nil {
			line += fmt.Sprintf("; since its last start: %.0f compared, %.0f drift", checked, total)
			drift = max(drift, int(total))
		}
	}
	return line, drift
}

// auditTotals reads outboxd_audit_checked_total and the sum of
// outboxd_audit_drift_total from a role's /metrics.
func auditTotals(ctx context.Context, metricsURL string) (checked, drift float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		metric, _, _ := strings.Cut(name, "{")
		v, perr := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if perr != nil {
			continue
		}
		switch metric {
		case "outboxd_audit_checked_total":
			checked += v
		case "outboxd_audit_drift_total":
			drift += v
		}
	}
	return checked, drift, sc.Err()
}
