package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the SQLite driver of soak-lock (sqlitestore's)
)

// The faults of the nemesis (SOAK_FAULTS names a subset).
const (
	faultKill         = "kill"          // SIGKILL a role, restart it
	faultStop         = "stop"          // SIGSTOP a role, SIGCONT it
	faultRedisRestart = "redis-restart" // kill redis-server, start it empty
	faultRedisOOM     = "redis-oom"     // CONFIG SET maxmemory 1: Redis refuses writes
	faultRedisStop    = "redis-stop"    // SIGSTOP redis-server: it accepts and answers nothing
	faultPGDrop       = "pg-drop"       // the proxy cuts and refuses PostgreSQL connections
	faultPGDelay      = "pg-delay"      // the proxy delays everything PostgreSQL says and hears
	faultPGStall      = "pg-stall"      // the proxy holds PostgreSQL's connections open and silent
	faultSQLiteLock   = "sqlite-lock"   // another process holds the SQLite writer lock
)

// allFaults is every fault, in the order of the summary line.
var allFaults = []string{faultKill, faultStop, faultRedisRestart, faultRedisOOM, faultRedisStop, faultPGDrop, faultPGDelay, faultPGStall, faultSQLiteLock}

// parseFaults reads SOAK_FAULTS: empty or "all" for every fault the store
// allows, else a comma-separated list of fault names, where "-name" takes
// one away ("all,-redis-oom"). On lungo (one process holds the store in
// memory) kill and sqlite-lock do not apply; on MongoDB sqlite-lock does
// not.
func parseFaults(v, storeKind string) ([]string, error) {
	allowed := slices.Clone(allFaults)
	switch storeKind {
	case soakStoreLungo:
		allowed = slices.DeleteFunc(allowed, func(f string) bool { return f == faultKill || f == faultSQLiteLock })
	case soakStoreMongo:
		allowed = slices.DeleteFunc(allowed, func(f string) bool { return f == faultSQLiteLock })
	}
	if strings.TrimSpace(v) == "" {
		v = "all"
	}
	var out []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		remove := strings.HasPrefix(name, "-")
		name = strings.TrimPrefix(name, "-")
		var names []string
		switch {
		case name == "all":
			names = allowed
		case slices.Contains(allFaults, name):
			if !slices.Contains(allowed, name) {
				return nil, fmt.Errorf("SOAK_FAULTS: %s does not apply to SOAK_STORE=%s", name, storeKind)
			}
			names = []string{name}
		default:
			return nil, fmt.Errorf("SOAK_FAULTS: unknown fault %q (the faults: all, %s; -name removes one)", name, strings.Join(allFaults, ", "))
		}
		for _, n := range names {
			if remove {
				out = slices.DeleteFunc(out, func(f string) bool { return f == n })
			} else if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("SOAK_FAULTS %q leaves no fault", v)
	}
	slices.SortFunc(out, func(a, b string) int { return slices.Index(allFaults, a) - slices.Index(allFaults, b) })
	return out, nil
}

// nemesis injects faults one after another, at random times from its
// seed: a pause of 1 to 5 s, then a fault lasting 1 to 12 s (longer than
// the roles' lease TTL, claim idle time and breaker timeout), then it heals
// the fault and prints one line.
type nemesis struct {
	s      *soak
	rng    *rand.Rand
	counts map[string]int
	n      int
}

func newNemesis(s *soak, rng *rand.Rand) *nemesis {
	return &nemesis{s: s, rng: rng, counts: map[string]int{}}
}

func (n *nemesis) total() int { return n.n }

// summary is "kill=3, stop=2, …" over every fault enabled.
func (n *nemesis) summary() string {
	parts := make([]string, 0, len(n.s.faults))
	for _, f := range n.s.faults {
		parts = append(parts, fmt.Sprintf("%s=%d", f, n.counts[f]))
	}
	return strings.Join(parts, ", ")
}

// between returns a random duration in [lo, hi).
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.rng.Int64N(int64(hi-lo)))
}

// wait waits d, restarting crashed roles meanwhile; false when ctx ended.
func (n *nemesis) wait(ctx context.Context, d time.Duration) bool {
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-end.C:
			return true
		case <-tick.C:
			n.s.watch()
		}
	}
}

// run injects faults until deadline.
func (n *nemesis) run(ctx context.Context, deadline time.Time) {
	for {
		gap := n.between(time.Second, 5*time.Second)
		if !n.wait(ctx, gap) || time.Now().Add(time.Second).After(deadline) {
			return
		}
		kind := n.s.faults[n.rng.IntN(len(n.s.faults))]
		d := n.between(time.Second, 12*time.Second)
		if left := time.Until(deadline); d > left {
			d = max(left, 100*time.Millisecond)
		}
		at := time.Since(n.s.started)
		what, err := n.inject(ctx, kind, d)
		n.n++
		n.counts[kind]++
		line := fmt.Sprintf("fault %d at %s: %s", n.n, at.Round(100*time.Millisecond), what)
		rec := map[string]any{"op": "fault", "kind": kind, "what": what}
		if err != nil {
			line += fmt.Sprintf(" (error: %v)", err)
			rec["err"] = err.Error()
		}
		n.s.hist.record(rec)
		fmt.Fprintln(n.s.out, line)
		if ctx.Err() != nil {
			return
		}
	}
}

// inject runs one fault for d and heals it; it returns what it did.
func (n *nemesis) inject(ctx context.Context, kind string, d time.Duration) (string, error) {
	s := n.s
	switch kind {
	case faultKill:
		r := n.pickRole()
		s.mu.Lock()
		_ = r.proc.cmd.Process.Kill()
		r.killed = true
		s.mu.Unlock()
		<-r.proc.exited
		down := n.between(200*time.Millisecond, 3*time.Second)
		n.wait(ctx, down)
		p, err := s.l.spawn(r.name, r.role, r.args...)
		s.mu.Lock()
		if err == nil {
			r.proc, r.killed = p, false
		}
		s.mu.Unlock()
		return fmt.Sprintf("SIGKILL %s, restarted after %s", r.name, down.Round(100*time.Millisecond)), err
	case faultStop:
		r := n.pickRole()
		s.mu.Lock()
		_ = r.proc.cmd.Process.Signal(syscall.SIGSTOP)
		r.stopped = true
		s.mu.Unlock()
		n.wait(ctx, d)
		s.mu.Lock()
		_ = r.proc.cmd.Process.Signal(syscall.SIGCONT)
		r.stopped = false
		s.mu.Unlock()
		return fmt.Sprintf("SIGSTOP %s for %s, then SIGCONT", r.name, d.Round(100*time.Millisecond)), nil
	case faultRedisRestart:
		s.redis.Kill()
		down := n.between(200*time.Millisecond, 2*time.Second)
		n.wait(ctx, down)
		return fmt.Sprintf("redis-server killed, started empty after %s", down.Round(100*time.Millisecond)), s.redis.Start(10 * time.Second)
	case faultRedisOOM:
		if err := s.rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			return "redis maxmemory 1", err
		}
		n.wait(ctx, d)
		return fmt.Sprintf("redis refused writes (maxmemory 1, noeviction) for %s", d.Round(100*time.Millisecond)),
			s.rdb.ConfigSet(context.WithoutCancel(ctx), "maxmemory", "0").Err()
	case faultRedisStop:
		if err := s.redis.Signal(syscall.SIGSTOP); err != nil {
			return "redis-server SIGSTOP", err
		}
		n.wait(ctx, d)
		return fmt.Sprintf("redis-server stopped (SIGSTOP) for %s, then SIGCONT", d.Round(100*time.Millisecond)), s.redis.Signal(syscall.SIGCONT)
	case faultPGDrop:
		s.pgProxy.Down()
		n.wait(ctx, d)
		return fmt.Sprintf("PostgreSQL connections cut and refused for %s", d.Round(100*time.Millisecond)), s.pgProxy.Up()
	case faultPGDelay:
		delay := n.between(20*time.Millisecond, 200*time.Millisecond)
		s.pgProxy.Delay(delay)
		n.wait(ctx, d)
		s.pgProxy.Delay(0)
		return fmt.Sprintf("PostgreSQL delayed by %s for %s", delay.Round(time.Millisecond), d.Round(100*time.Millisecond)), nil
	case faultPGStall:
		s.pgProxy.Stall()
		n.wait(ctx, d)
		s.pgProxy.Unstall()
		return fmt.Sprintf("PostgreSQL connections stalled for %s", d.Round(100*time.Millisecond)), nil
	case faultSQLiteLock:
		return fmt.Sprintf("SQLite writer lock held by another process for %s", d.Round(100*time.Millisecond)), s.holdSQLiteLock(ctx, d)
	}
	return kind, fmt.Errorf("unknown fault %q", kind)
}

// pickRole returns a random role process.
func (n *nemesis) pickRole() *soakRole {
	n.s.mu.Lock()
	defer n.s.mu.Unlock()
	return n.s.roles[n.rng.IntN(len(n.s.roles))]
}

// holdSQLiteLock runs `outboxd-bench soak-lock PATH D` (this binary) and
// waits for it: another process that holds the SQLite store's writer lock
// (BEGIN IMMEDIATE) for d.
func (s *soak) holdSQLiteLock(ctx context.Context, d time.Duration) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self, "soak-lock", strings.TrimPrefix(s.storeFlag, "sqlite:"), d.String()) //nolint:gosec // this binary
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("soak-lock: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runSoakLock is `outboxd-bench soak-lock PATH DURATION`: it takes the
// SQLite file's writer lock (BEGIN IMMEDIATE, waiting for it up to 30 s),
// holds it for DURATION and lets it go.
func runSoakLock(ctx context.Context, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%w: soak-lock PATH DURATION", errUsage)
	}
	d, err := time.ParseDuration(args[1])
	if err != nil {
		return fmt.Errorf("%w: soak-lock: DURATION: %w", errUsage, err)
	}
	db, err := sql.Open("sqlite", "file:"+args[0]+"?_pragma=busy_timeout(30000)")
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("error taking the writer lock of %s: %w", args[0], err)
	}
	hold := time.NewTimer(d)
	defer hold.Stop()
	select {
	case <-ctx.Done():
	case <-hold.C:
	}
	_, err = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	return err
}
