package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// errExited is the error of a process that exited with status 0 before it
// was told to stop.
var errExited = errors.New("exit status 0")

// readyTimeout bounds a process's start (migrations included).
const readyTimeout = 60 * time.Second

// stopTimeout bounds a process's shutdown after SIGTERM.
const stopTimeout = 60 * time.Second

// proc is one bin/outboxd subprocess of a stage.
type proc struct {
	name string
	addr string
	log  string
	cmd  *exec.Cmd
	// exited is closed when the process has exited; err is its Wait error.
	exited chan struct{}
	err    error
	prof   *profiler
}

// launcher starts the stage processes of a run.
type launcher struct {
	bin string
	dir string
	// profileDir, when set, makes every process serve --pprof and
	// profiles it while it runs.
	profileDir string
}

// start runs `bin role args…` (spawn) and waits until it is ready.
func (l *launcher) start(ctx context.Context, name, role string, args ...string) (*proc, error) {
	p, err := l.spawn(name, role, args...)
	if err != nil {
		return nil, err
	}
	if err := l.ready(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// spawn runs `bin role args…` on a free --http-addr, its log in the run's
// folder.
func (l *launcher) spawn(name, role string, args ...string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, addr: addr, log: filepath.Join(l.dir, name+".log"), exited: make(chan struct{})}
	args = append([]string{role, "--http-addr", addr, "--log-level", "warn"}, args...)
	if l.profileDir != "" {
		args = append(args, "--pprof")
	}
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(l.bin, args...) //nolint:gosec // the binary and flags are the harness's own
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("error starting %s %s: %w", l.bin, role, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// ready waits until every one of procs answers 200 on /readyz (killing
// them all when one does not), then starts their profilers.
func (l *launcher) ready(ctx context.Context, procs ...*proc) error {
	for _, p := range procs {
		ready := func(ctx context.Context) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/readyz"), nil)
			if err != nil {
				return false, err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil //nolint:nilerr // not listening yet
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}
		if err := waitFor(ctx, p.name+" ready", readyTimeout, 20*time.Millisecond, ready, p); err != nil {
			abort(procs...)
			return err
		}
	}
	if l.profileDir != "" {
		for _, p := range procs {
			p.prof = startProfiler(p.addr)
		}
	}
	return nil
}

// url returns the URL of path on the process's HTTP address.
func (p *proc) url(path string) string { return "http://" + p.addr + path }

// alive returns an error when the process has exited, with its log's tail.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%w); the end of its log %s:\n%s", p.name, cmp.Or(p.err, errExited), p.log, tail(p.log, 30))
	default:
		return nil
	}
}

// peakRSS returns the process's VmHWM in bytes (0 when it cannot be read).
func (p *proc) peakRSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// stop sends SIGTERM and waits for the exit; a process that does not exit
// in time is killed, and the error says so.
func (p *proc) stop() error {
	if err := p.alive(); err != nil {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		p.kill()
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed", p.name, stopTimeout)
	}
	if p.err != nil {
		return fmt.Errorf("%s failed on stopping (%w); the end of its log %s:\n%s", p.name, p.err, p.log, tail(p.log, 30))
	}
	return nil
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// finish ends a stage's processes: it writes their merged CPU profile to
// DIR/<stage>.pprof when profiling, reads their peak RSS, then stops them.
// It returns the largest peak RSS.
func (l *launcher) finish(stage string, procs ...*proc) (int64, error) {
	var errs []error
	var profiles []*profile.Profile
	for _, p := range procs {
		if p.prof != nil {
			ps, err := p.prof.finish()
			profiles = append(profiles, ps...)
			errs = append(errs, err)
		}
	}
	if len(profiles) > 0 {
		errs = append(errs, writeProfile(filepath.Join(l.profileDir, stage+".pprof"), profiles))
	}
	var peak int64
	for _, p := range procs {
		peak = max(peak, p.peakRSS())
	}
	for _, p := range procs {
		errs = append(errs, p.stop())
	}
	return peak, errors.Join(errs...)
}

// abort kills procs after a failed stage.
func abort(procs ...*proc) {
	for _, p := range procs {
		if p != nil {
			p.kill()
		}
	}
}

// waitFor polls cond every interval until it reports true, and fails when
// timeout passes first or one of procs exits.
func waitFor(ctx context.Context, what string, timeout, interval time.Duration, cond func(context.Context) (bool, error), procs ...*proc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for _, p := range procs {
			if err := p.alive(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		ok, err := cond(ctx)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not reached within %s", what, timeout)
		case <-tick.C:
		}
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// profiler takes one-second CPU profiles of a process back to back, until
// finish.
type profiler struct {
	stop     chan struct{}
	done     chan struct{}
	profiles []*profile.Profile
	err      error
}

func startProfiler(addr string) *profiler {
	p := &profiler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			prof, err := cpuProfile("http://" + addr + "/debug/pprof/profile?seconds=1")
			if err != nil {
				p.err = err
				return
			}
			p.profiles = append(p.profiles, prof)
		}
	}()
	return p
}

// finish waits for the profile being taken and returns them all.
func (p *profiler) finish() ([]*profile.Profile, error) {
	close(p.stop)
	<-p.done
	return p.profiles, p.err
}

func cpuProfile(url string) (*profile.Profile, error) {
	resp, err := http.Get(url) //nolint:gosec // the harness's own process
	if err != nil {
		return nil, fmt.Errorf("error taking a CPU profile: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("error taking a CPU profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("error taking a CPU profile: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return profile.Parse(bytes.NewReader(b))
}

// writeProfile merges profiles into the file path.
func writeProfile(path string, profiles []*profile.Profile) error {
	merged, err := profile.Merge(profiles)
	if err != nil {
		return fmt.Errorf("error merging the CPU profiles for %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := merged.Write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// pid returns the process's id.
func (p *proc) pid() int { return p.cmd.Process.Pid }
