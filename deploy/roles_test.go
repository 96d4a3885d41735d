package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// outboxdBin is ./cmd/outboxd, built once by TestMain: the tests ask it for
// each role's flags.
var outboxdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxd-deploy-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	outboxdBin = filepath.Join(dir, "outboxd")
	build := exec.Command("go", "build", "-o", outboxdBin, "./cmd/outboxd")
	build.Dir = ".." // the product's module: this one is the manifests' tests'
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building outboxd: %v\n%s", err, out)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	// The goroutine-leak check of every package (testkit.Main), made after
	// the binary is removed.
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// Facts about outboxd that the artifacts' rules rest on.
const (
	// storeCloseMax bounds closing the store after the services stopped
	// (cmd/outboxd app.close).
	storeCloseMax = 10 * time.Second
	// imageUID is the user the image runs as (the Dockerfile's USER).
	imageUID = 65532
)

// secretFlags carry a password or a token: an artifact passes them as
// OUTBOXD_* variables (from a Secret on Kubernetes), never as arguments,
// which any process listing shows.
var secretFlags = []string{"store", "redis-url", "postgres-url", "auth-token", "operator-token", "viewer-token", "ingest-token"}

// tokenFlags are the tokens of the API; a role that serves it beyond
// loopback needs one of them (or their -file), or it refuses to start.
var tokenFlags = []string{"auth-token", "operator-token", "viewer-token", "ingest-token"}

// backendFlags are the backends a role opens; a role that has the flag must
// be given it: the defaults point at 127.0.0.1 and at an SQLite file inside
// the container.
var backendFlags = []string{"store", "redis-url", "postgres-url"}

// runtimeEnv are the variables outside OUTBOXD_* that an outboxd container
// may set: the Go runtime's.
var runtimeEnv = []string{"GOMEMLIMIT"}

// flagInfo is one line of `outboxd <role> -h`.
type flagInfo struct {
	name, env, def string
}

// roleFlags is a role's flag table as `outboxd <role> -h` prints it.
type roleFlags struct {
	role  string
	flags map[string]flagInfo
	byEnv map[string]string
}

// flagLine matches "  --name  usage (default D) [OUTBOXD_NAME]".
var flagLine = regexp.MustCompile(`^  --(\S+)\s.*?(?: \(default (.*)\))? \[(OUTBOXD_[A-Z0-9_]+)\]$`)

var (
	tablesMu sync.Mutex
	tables   = map[string]*roleFlags{}
	helpRuns = map[string]error{}
)

// flagsOf returns the flag table of role, from the binary.
func flagsOf(role string) (*roleFlags, error) {
	tablesMu.Lock()
	defer tablesMu.Unlock()
	if t, ok := tables[role]; ok {
		return t, nil
	}
	var stderr bytes.Buffer
	cmd := exec.Command(outboxdBin, role, "-h")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("outboxd has no role %q: %s", role, firstLine(stderr.String()))
	}
	t := &roleFlags{role: role, flags: map[string]flagInfo{}, byEnv: map[string]string{}}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			t.flags[m[1]] = flagInfo{name: m[1], def: m[2], env: m[3]}
			t.byEnv[m[3]] = m[1]
		}
	}
	if len(t.flags) == 0 {
		return nil, fmt.Errorf("outboxd %s -h listed no flags:\n%s", role, stderr.String())
	}
	tables[role] = t
	return t, nil
}

// helpRun runs `outboxd <argv…> -h`: it fails when argv holds a flag the
// role does not have or a value its flag cannot parse.
func helpRun(argv []string) error {
	key := strings.Join(argv, "\x00")
	tablesMu.Lock()
	err, ok := helpRuns[key]
	tablesMu.Unlock()
	if ok {
		return err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(outboxdBin, append(slices.Clone(argv), "-h")...)
	cmd.Stderr = &stderr
	if runErr := cmd.Run(); runErr != nil {
		err = fmt.Errorf("outboxd %s rejects its flags: %s", strings.Join(argv, " "), firstLine(stderr.String()))
	}
	tablesMu.Lock()
	helpRuns[key] = err
	tablesMu.Unlock()
	return err
}

// replaceOnce returns content with old replaced by new, for a case of a
// broken artifact: old must occur exactly once in the file, so that a case
// whose text went stale fails instead of silently testing nothing.
func replaceOnce(t *testing.T, file, content, old, new string) string {
	t.Helper()
	if n := strings.Count(content, old); n != 1 {
		t.Fatalf("%s holds %q %d times, not once: fix the case", file, old, n)
	}
	return strings.Replace(content, old, new, 1)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// envVar is one variable of a container: a literal value, or one taken
// from elsewhere (source names it: "secret outboxd/store").
type envVar struct {
	name, value, source string
}

// invocation is one outboxd container as an artifact starts it: the
// arguments after the image's entrypoint (the role, then flags) and its
// environment.
type invocation struct {
	where string
	args  []string
	env   []envVar
}

// resolved is an invocation checked against its role's flag table.
type resolved struct {
	inv   invocation
	role  string
	table *roleFlags
	// args are the flags given as arguments, env those given by a
	// variable.
	args map[string]string
	env  map[string]envVar
}

// value returns what flag is set to: an argument, a literal variable, or
// the default. ok is false for a variable whose value comes from a secret.
func (r *resolved) value(flag string) (string, bool) {
	if v, ok := r.args[flag]; ok {
		return v, true
	}
	if e, ok := r.env[flag]; ok {
		return e.value, e.source == ""
	}
	return r.table.flags[flag].def, true
}

func (r *resolved) has(flag string) bool { _, ok := r.table.flags[flag]; return ok }

func (r *resolved) set(flag string) bool {
	_, a := r.args[flag]
	_, e := r.env[flag]
	return a || e
}

// resolve checks inv against its role's flags: the role exists, every
// argument is a --flag=value (or a bare boolean --flag) of the role, every
// OUTBOXD_* variable is one the role reads, no flag is given twice, and the
// binary accepts the arguments and the literal variables' values.
func resolve(inv invocation) (*resolved, []error) {
	if len(inv.args) == 0 {
		return nil, []error{fmt.Errorf("%s: no role: the arguments must start with one (the image's entrypoint is outboxd)", inv.where)}
	}
	table, err := flagsOf(inv.args[0])
	if err != nil {
		return nil, []error{fmt.Errorf("%s: %w", inv.where, err)}
	}
	r := &resolved{inv: inv, role: inv.args[0], table: table, args: map[string]string{}, env: map[string]envVar{}}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: outboxd %s: %s", inv.where, r.role, fmt.Sprintf(format, a...)))
	}
	for _, a := range inv.args[1:] {
		name, v, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch f, known := table.flags[name]; {
		case !strings.HasPrefix(a, "--"):
			bad("argument %q: write flags as --name=value", a)
		case !known:
			bad("--%s is not one of its flags", name)
		case !hasValue && f.def != "false":
			bad("--%s needs a value: write --%s=value", name, name)
		default:
			if _, dup := r.args[name]; dup {
				bad("--%s is given twice", name)
			}
			if !hasValue {
				v = "true"
			}
			r.args[name] = v
		}
	}
	checkArgv := slices.Clone(inv.args)
	for _, e := range inv.env {
		if slices.Contains(runtimeEnv, e.name) {
			continue
		}
		flag, ok := table.byEnv[e.name]
		switch {
		case !strings.HasPrefix(e.name, "OUTBOXD_"):
			bad("%s is not a variable outboxd reads (only OUTBOXD_* and %s)", e.name, strings.Join(runtimeEnv, ", "))
		case !ok:
			bad("%s is not a variable of this role: it would be ignored (outboxd %s -h lists the role's)", e.name, r.role)
		default:
			if _, dup := r.args[flag]; dup {
				bad("--%s is given both as an argument and as %s", flag, e.name)
			}
			if _, dup := r.env[flag]; dup {
				bad("%s is set twice", e.name)
			}
			r.env[flag] = e
			if e.source == "" {
				checkArgv = append(checkArgv, "--"+flag+"="+e.value)
			}
		}
	}
	if len(errs) == 0 {
		if err := helpRun(checkArgv); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", inv.where, err))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// longRunning tells whether the role serves until it is stopped: every role
// with --http-addr except reconcile without --every, which sweeps once and
// exits.
func (r *resolved) longRunning() bool {
	if !r.has("http-addr") {
		return false
	}
	if r.role == "reconcile" {
		every, _ := r.value("every")
		d, err := time.ParseDuration(every)
		return err == nil && d > 0
	}
	return true
}

// checkCommon holds an invocation to the rules every artifact shares: no
// password or token among the arguments, every backend the role opens
// given, the API behind a token, and a long-running role listening beyond
// loopback. It returns the port --http-addr serves (0 for a role that
// does not serve).
func (r *resolved) checkCommon() (int, []error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: outboxd %s: %s", r.inv.where, r.role, fmt.Sprintf(format, a...)))
	}
	for _, f := range secretFlags {
		if _, ok := r.args[f]; ok {
			bad("--%s carries a password or a token: give it as %s, never as an argument", f, r.table.flags[f].env)
		}
	}
	for _, f := range backendFlags {
		if r.has(f) && !r.set(f) {
			bad("%s is not set: the default (%s) is not a backend the containers share", r.table.flags[f].env, r.table.flags[f].def)
		}
	}
	if !r.longRunning() {
		return 0, errs
	}
	if r.has("auth-token") {
		set := false
		for _, f := range tokenFlags {
			set = set || r.set(f) || r.set(f+"-file")
		}
		if !set {
			bad("%s is not set (nor another token): outboxd refuses to serve its API beyond loopback without one", r.table.flags["auth-token"].env)
		}
	}
	if _, ok := r.args["allow-no-auth"]; ok || r.set("allow-no-auth") {
		bad("--allow-no-auth serves the API to anyone who reaches it: set a token instead")
	}
	addr, _ := r.value("http-addr")
	host, portText, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(portText)
	switch {
	case err != nil || perr != nil:
		bad("--http-addr %q is not host:port", addr)
	case host != "" && host != "0.0.0.0" && host != "::":
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			bad("--http-addr %s listens on loopback only: probes and other containers cannot reach it (use :%d)", addr, port)
		}
	}
	return port, errs
}

// graceNeeded is the longest a role takes to stop on SIGTERM: the HTTP
// server's shutdown and the services' stop, each within
// --shutdown-timeout, then closing the store, after a preStop pause.
func (r *resolved) graceNeeded(preStop time.Duration) (time.Duration, error) {
	v, _ := r.value("shutdown-timeout")
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--shutdown-timeout %q: %w", v, err)
	}
	return preStop + 2*d + storeCloseMax, nil
}

// goMemLimit parses a GOMEMLIMIT value (bytes, or a number with B, KiB,
// MiB, GiB or TiB).
func goMemLimit(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("GOMEMLIMIT %q is not a size", v)
	}
	return n * mult, nil
}

// joinErrs returns one error listing errs (nil for none), sorted so that
// failures read the same on every run.
func joinErrs(errs []error) error {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		if e != nil {
			msgs = append(msgs, e.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return errors.New(strings.Join(msgs, "\n"))
}

// TestRoleFlagTables checks the reading of `outboxd <role> -h` that every
// other check here rests on.
func TestRoleFlagTables(t *testing.T) {
	work, err := flagsOf("work")
	if err != nil {
		t.Fatal(err)
	}
	if f := work.flags["redis-url"]; f.env != "OUTBOXD_REDIS_URL" || f.def != "redis://127.0.0.1:6379/0" {
		t.Fatalf("work --redis-url read as %+v", f)
	}
	if work.byEnv["OUTBOXD_BATCH_SIZE"] != "batch-size" {
		t.Fatalf("OUTBOXD_BATCH_SIZE not found in work's table: %v", work.byEnv)
	}
	if _, ok := work.flags["max-body"]; ok {
		t.Fatal("work has no --max-body (ingest's), but the table says it has")
	}
	if f := work.flags["operator-token-file"]; f.env != "OUTBOXD_OPERATOR_TOKEN_FILE" {
		t.Fatalf("work --operator-token-file read as %+v", f)
	}
	if _, err := flagsOf("no-such-role"); err == nil {
		t.Fatal("an unknown role has a flag table")
	}
	cases := []struct {
		name string
		inv  invocation
		want string
	}{
		{"Fine", invocation{args: []string{"reconcile", "--every=1m", "--json"}, env: []envVar{{name: "OUTBOXD_LIMIT", value: "10"}}}, ""},
		{"UnknownFlag", invocation{args: []string{"work", "--batch-sise=10"}}, "--batch-sise is not one of its flags"},
		{"FlagOfAnotherRole", invocation{args: []string{"ingest", "--batch-size=10"}}, "--batch-size is not one of its flags"},
		{"BadValue", invocation{args: []string{"reconcile", "--every=soon"}}, "rejects its flags"},
		{"BadEnvValue", invocation{args: []string{"reconcile"}, env: []envVar{{name: "OUTBOXD_EVERY", value: "soon"}}}, "rejects its flags"},
		{"EnvOfAnotherRole", invocation{args: []string{"ingest"}, env: []envVar{{name: "OUTBOXD_REDIS_URL", value: "redis://r:6379/0"}}}, "OUTBOXD_REDIS_URL is not a variable of this role"},
		{"NotOutboxdEnv", invocation{args: []string{"ingest"}, env: []envVar{{name: "REDIS_URL", value: "x"}}}, "not a variable outboxd reads"},
		{"Twice", invocation{args: []string{"work", "--stream=a"}, env: []envVar{{name: "OUTBOXD_STREAM", value: "b"}}}, "both as an argument"},
		{"SpaceSeparated", invocation{args: []string{"work", "--stream", "a"}}, "write flags as --name=value"},
		{"NoRole", invocation{}, "no role"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.inv.where = "test"
			_, errs := resolve(c.inv)
			err := joinErrs(errs)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got %v", c.want, err)
			}
		})
	}
}
