package deploy

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// The services of compose.yaml: the backing services, then the roles.
var (
	composeBacking = []string{"mongo", "mongo-init", "redis", "postgres"}
	composeRoles   = []string{"migrate", "ingest", "dispatch", "work", "reconcile"}
)

// composeImage is the image every outboxd service runs, built by one of
// them.
const composeImage = "outboxd:dev"

// composeEnv is the environment compose.yaml is loaded with: the token it
// requires.
var composeEnv = map[string]string{"OUTBOXD_AUTH_TOKEN": "test-token"}

// loadCompose loads a compose file as `docker compose` does: the Compose
// specification's schema (an unknown attribute fails), interpolation from
// env, merges and anchors, paths resolved against deploy/.
func loadCompose(content string, env map[string]string) (*types.Project, error) {
	wd, err := filepath.Abs(".")
	if err != nil {
		return nil, err
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(wd, "compose.yaml"), Content: []byte(content)}},
		Environment: env,
	})
}

// composeCheck holds a loaded compose project to the rules of
// docs/deploy.md.
type composeCheck struct {
	p    *types.Project
	errs []error
}

func (c *composeCheck) fail(format string, a ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, a...))
}

func checkCompose(p *types.Project) []error {
	c := &composeCheck{p: p}
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	want := slices.Sorted(slices.Values(slices.Concat(composeBacking, composeRoles)))
	if !slices.Equal(names, want) {
		c.fail("services: got %v, want %v", names, want)
	}
	replSet := c.backing()
	builds := 0
	roles := map[string][]string{}
	for _, name := range names {
		s := p.Services[name]
		if s.Image != composeImage {
			continue
		}
		if s.Build != nil {
			builds++
			c.build(name, s.Build)
		}
		if res := c.outboxdService(name, s, replSet); res != nil {
			roles[res.role] = append(roles[res.role], name)
		}
	}
	if builds != 1 {
		c.fail("%d services build %s: exactly one must (the others use the image it builds)", builds, composeImage)
	}
	for _, r := range composeRoles {
		if len(roles[r]) != 1 {
			c.fail("outboxd %s must run in exactly one service (found %v)", r, roles[r])
		}
	}
	return c.errs
}

// backing checks the backing services and returns the replica set's name.
func (c *composeCheck) backing() string {
	for _, name := range []string{"mongo", "redis", "postgres"} {
		if s, ok := c.p.Services[name]; ok && !hasHealthcheck(s) {
			c.fail("service %s: a healthcheck is required: the roles wait for it to be healthy", name)
		}
	}
	mongo := c.p.Services["mongo"]
	replSet := flagValue(mongo.Command, "--replSet")
	if replSet == "" {
		c.fail("service mongo: must run as a replica set (--replSet NAME): transactions and change streams need one")
	}
	init := c.p.Services["mongo-init"]
	script := strings.Join(init.Command, " ")
	if !strings.Contains(script, "rs.initiate(") || !strings.Contains(script, `"`+replSet+`"`) || !strings.Contains(script, "isWritablePrimary") {
		c.fail("service mongo-init: must initiate the replica set %q (rs.initiate) and wait until it is primary (isWritablePrimary)", replSet)
	}
	if d, ok := init.DependsOn["mongo"]; !ok || d.Condition != types.ServiceConditionHealthy {
		c.fail("service mongo-init: must depend on mongo being %s", types.ServiceConditionHealthy)
	}
	if r := cmp.Or(init.Restart, "no"); r != "no" {
		c.fail("service mongo-init: a one-shot service must not restart (restart %q)", r)
	}
	redis := c.p.Services["redis"]
	for _, kv := range [][2]string{{"--appendonly", "yes"}, {"--appendfsync", "everysec"}, {"--maxmemory-policy", "noeviction"}} {
		if got := flagValue(redis.Command, kv[0]); got != kv[1] {
			c.fail("service redis: %s must be %s (got %q): docs/deploy.md says why", kv[0], kv[1], got)
		}
	}
	return replSet
}

// build checks that the image is built from the repository's Dockerfile.
func (c *composeCheck) build(name string, b *types.BuildConfig) {
	root, _ := filepath.Abs("..")
	if filepath.Clean(b.Context) != root || cmp.Or(b.Dockerfile, "Dockerfile") != "Dockerfile" {
		c.fail("service %s: must build the repository's Dockerfile (context %s, dockerfile %s)", name, b.Context, b.Dockerfile)
		return
	}
	if _, err := os.Stat(filepath.Join(root, "Dockerfile")); err != nil {
		c.fail("service %s: %v", name, err)
	}
}

// outboxdService checks a service that runs the outboxd image.
func (c *composeCheck) outboxdService(name string, s types.ServiceConfig, replSet string) *resolved {
	where := "service " + name
	if s.User != fmt.Sprint(imageUID) && s.User != fmt.Sprintf("%d:%d", imageUID, imageUID) {
		c.fail("%s: user must be the image's, %d:%d (got %q)", where, imageUID, imageUID, s.User)
	}
	if !s.ReadOnly {
		c.fail("%s: read_only must be true", where)
	}
	if !slices.Contains(s.CapDrop, "ALL") || len(s.CapAdd) > 0 {
		c.fail("%s: cap_drop must be [ALL], and cap_add empty", where)
	}
	if !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
		c.fail("%s: security_opt must hold no-new-privileges:true", where)
	}
	if len(s.Entrypoint) > 0 {
		c.fail("%s: entrypoint %q replaces the image's, outboxd", where, s.Entrypoint)
	}
	if hasHealthcheck(s) && (s.HealthCheck.Test[0] != "CMD" || len(s.HealthCheck.Test) < 2 || s.HealthCheck.Test[1] != "outboxd") {
		c.fail("%s: healthcheck %q needs a shell or a program the image does not have (it holds outboxd only)", where, s.HealthCheck.Test)
	}
	inv := invocation{where: where, args: s.Command}
	for k, v := range s.Environment {
		if v == nil {
			c.fail("%s: %s has no value (it would be taken from the host)", where, k)
			continue
		}
		inv.env = append(inv.env, envVar{name: k, value: *v})
	}
	sort.Slice(inv.env, func(i, j int) bool { return inv.env[i].name < inv.env[j].name })
	res, errs := resolve(inv)
	c.errs = append(c.errs, errs...)
	if res == nil {
		return nil
	}
	port, errs := res.checkCommon()
	c.errs = append(c.errs, errs...)
	c.backends(where, s, res, replSet)
	restart := cmp.Or(s.Restart, "no")
	if !res.longRunning() {
		if restart != "no" {
			c.fail("%s: outboxd %s runs once: restart must be \"no\" (got %q)", where, res.role, restart)
		}
		if len(s.Ports) > 0 {
			c.fail("%s: outboxd %s serves nothing to publish", where, res.role)
		}
		return res
	}
	if restart == "no" {
		c.fail("%s: outboxd %s runs until stopped: restart it (unless-stopped) when it exits", where, res.role)
	}
	if d, ok := s.DependsOn["migrate"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
		c.fail("%s: must depend on migrate being %s: the roles exit 2 while the schema is missing", where, types.ServiceConditionCompletedSuccessfully)
	}
	need, err := res.graceNeeded(0)
	switch {
	case err != nil:
		c.fail("%s: %v", where, err)
	case s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) < need:
		c.fail("%s: stop_grace_period must be at least %s, what outboxd %s may take to stop (Compose's default is 10s)", where, need, res.role)
	}
	for _, p := range s.Ports {
		if ip := net.ParseIP(p.HostIP); ip == nil || !ip.IsLoopback() {
			c.fail("%s: port %d is published on %q: publish it on 127.0.0.1 only", where, p.Target, cmp.Or(p.HostIP, "every interface"))
		}
		if int(p.Target) != port {
			c.fail("%s: port %d is published, but --http-addr serves %d", where, p.Target, port)
		}
	}
	if replicas, min := s.GetScale(), map[string]int{"dispatch": 2, "work": 2}[res.role]; replicas < min {
		c.fail("%s: %d replicas of outboxd %s, at least %d", where, replicas, res.role, min)
	}
	return res
}

// backends checks that each backend a role opens is a service of the
// project that it waits for: healthy, or for MongoDB also initiated as the
// replica set its URL names.
func (c *composeCheck) backends(where string, s types.ServiceConfig, res *resolved, replSet string) {
	for _, f := range backendFlags {
		if !res.has(f) {
			continue
		}
		v, _ := res.value(f)
		u, err := url.Parse(v)
		if err != nil || u.Hostname() == "" {
			c.fail("%s: --%s %q is not a URL", where, f, v)
			continue
		}
		host := u.Hostname()
		if _, ok := c.p.Services[host]; !ok {
			c.fail("%s: --%s names %s, which is not a service of the project", where, f, host)
			continue
		}
		if f == "store" {
			if got := u.Query().Get("replicaSet"); got != replSet {
				c.fail("%s: --store must name the replica set %q (replicaSet=%s), got %q", where, replSet, replSet, got)
			}
			if res.role == "migrate" {
				if d, ok := s.DependsOn["mongo-init"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
					c.fail("%s: must depend on mongo-init being %s: the store needs the replica set", where, types.ServiceConditionCompletedSuccessfully)
				}
				continue
			}
		}
		if d, ok := s.DependsOn[host]; !ok || d.Condition != types.ServiceConditionHealthy {
			c.fail("%s: must depend on %s being %s (it opens --%s)", where, host, types.ServiceConditionHealthy, f)
		}
	}
}

func hasHealthcheck(s types.ServiceConfig) bool {
	return s.HealthCheck != nil && !s.HealthCheck.Disable && len(s.HealthCheck.Test) > 0 && s.HealthCheck.Test[0] != "NONE"
}

// flagValue returns the word after flag in a command ("" without one).
func flagValue(cmd []string, flag string) string {
	if i := slices.Index(cmd, flag); i >= 0 && i+1 < len(cmd) {
		return cmd[i+1]
	}
	return ""
}

func readCompose(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCompose loads compose.yaml and checks its services.
func TestCompose(t *testing.T) {
	p, err := loadCompose(readCompose(t), composeEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := joinErrs(checkCompose(p)); err != nil {
		t.Fatal(err)
	}
}

// TestComposeBroken proves that each check can fail: every case breaks one
// thing in a copy of compose.yaml (old must occur in it exactly once) and
// must fail with its message.
func TestComposeBroken(t *testing.T) {
	const (
		ingestDependsOn = "\"127.0.0.1:8080:8080\"\n    depends_on:\n      migrate:\n        condition: service_completed_successfully"
		workRedisDep    = "      OUTBOXD_POSTGRES_URL: *postgres\n      OUTBOXD_AUTH_TOKEN: *operator-token\n    deploy:\n      replicas: 2\n    depends_on:\n      migrate:\n        condition: service_completed_successfully\n      mongo:\n        condition: service_healthy\n      redis:\n        condition: service_healthy\n"
		migrateBuild    = "    build:\n      context: ..\n      dockerfile: Dockerfile\n"
		ingestToken     = "      OUTBOXD_AUTH_TOKEN: ${OUTBOXD_AUTH_TOKEN:?set OUTBOXD_AUTH_TOKEN, the bearer token of /v1/* (docs/deploy.md)}\n"
		ingestCommand   = "    command: [\"ingest\", \"--http-addr=0.0.0.0:8080\"]\n    environment:\n      OUTBOXD_STORE: *store\n" + ingestToken
		redisHealth     = "    healthcheck:\n      test: [\"CMD-SHELL\", \"redis-cli ping | grep -q PONG\"]\n      interval: 5s\n      timeout: 5s\n      retries: 30\n"
	)
	cases := []struct {
		name     string
		old, new string
		env      map[string]string
		want     string
	}{
		{"UnknownAttribute", "  stop_grace_period: 75s", "  stop_grace_periode: 75s", nil, "stop_grace_periode false schema"},
		{"TokenNotGiven", "", "", map[string]string{}, "required variable OUTBOXD_AUTH_TOKEN is missing a value"},
		{"MisspeltFlag", "--every=1m", "--evry=1m", nil, "outboxd reconcile: --evry is not one of its flags"},
		{"EnvNotOfTheRole", "      OUTBOXD_AUTH_TOKEN: ${", "      OUTBOXD_REDIS_URL: *redis\n      OUTBOXD_AUTH_TOKEN: ${", nil, "service ingest: outboxd ingest: OUTBOXD_REDIS_URL is not a variable of this role"},
		{"TokenInCommand", ingestCommand, strings.Replace(strings.Replace(ingestCommand, `"--http-addr=0.0.0.0:8080"]`, `"--http-addr=0.0.0.0:8080", "--auth-token=s3cret"]`, 1), ingestToken, "", 1), nil, "service ingest: outboxd ingest: --auth-token carries a password or a token"},
		{"LoopbackHTTPAddr", `["work", "--http-addr=0.0.0.0:8080"]`, `["work", "--http-addr=127.0.0.1:8080"]`, nil, "service work: outboxd work: --http-addr 127.0.0.1:8080 listens on loopback only"},
		{"OneDispatcher", "      OUTBOXD_REDIS_URL: *redis\n      OUTBOXD_AUTH_TOKEN: *operator-token\n    deploy:\n      replicas: 2\n    depends_on:\n      migrate:\n        condition: service_completed_successfully\n      mongo:\n        condition: service_healthy\n      redis:\n        condition: service_healthy\n\n", "      OUTBOXD_REDIS_URL: *redis\n      OUTBOXD_AUTH_TOKEN: *operator-token\n    depends_on:\n      migrate:\n        condition: service_completed_successfully\n      mongo:\n        condition: service_healthy\n      redis:\n        condition: service_healthy\n\n", nil, "service dispatch: 1 replicas of outboxd dispatch, at least 2"},
		{"Eviction", `"--maxmemory-policy", "noeviction"`, `"--maxmemory-policy", "allkeys-lru"`, nil, "service redis: --maxmemory-policy must be noeviction"},
		{"NoAOF", `"--appendonly", "yes"`, `"--appendonly", "no"`, nil, "service redis: --appendonly must be yes"},
		{"FsyncAlways", `"--appendfsync", "everysec"`, `"--appendfsync", "always"`, nil, "service redis: --appendfsync must be everysec"},
		{"StandaloneMongo", `["--replSet", "rs0", "--bind_ip_all"]`, `["--bind_ip_all"]`, nil, "service mongo: must run as a replica set"},
		{"OtherReplicaSet", "replicaSet=rs0", "replicaSet=rs1", nil, `--store must name the replica set "rs0"`},
		{"InitNotWaiting", "!db.hello().isWritablePrimary", "false", nil, "service mongo-init: must initiate the replica set"},
		{"RolesBeforeMigrate", ingestDependsOn, strings.Replace(ingestDependsOn, "service_completed_successfully", "service_started", 1), nil, "service ingest: must depend on migrate being service_completed_successfully"},
		{"RedisNotAwaited", workRedisDep, strings.Replace(workRedisDep, "      redis:\n        condition: service_healthy\n", "", 1), nil, "service work: must depend on redis being service_healthy"},
		{"BackingWithoutHealthcheck", redisHealth, "", nil, "service redis: a healthcheck is required"},
		{"WritableRoot", "  read_only: true", "  read_only: false", nil, "read_only must be true"},
		{"Capabilities", "  cap_drop: [ALL]", "  cap_drop: [NET_RAW]", nil, "cap_drop must be [ALL]"},
		{"NewPrivileges", `  security_opt: ["no-new-privileges:true"]`, "  security_opt: []", nil, "security_opt must hold no-new-privileges:true"},
		{"Root", `  user: "65532:65532"`, `  user: "0:0"`, nil, "user must be the image's, 65532:65532"},
		{"ShortGrace", "  stop_grace_period: 75s", "  stop_grace_period: 10s", nil, "stop_grace_period must be at least 1m10s"},
		{"PublishedEverywhere", `"127.0.0.1:8080:8080"`, `"8080:8080"`, nil, "service ingest: port 8080 is published on \"every interface\""},
		{"ShellHealthcheck", "    ports:\n", "    healthcheck:\n      test: [\"CMD-SHELL\", \"curl -f http://127.0.0.1:8080/healthz\"]\n    ports:\n", nil, "needs a shell or a program the image does not have"},
		{"NoBuild", migrateBuild, "", nil, "0 services build outboxd:dev"},
		{"MigrateRestarts", "    restart: \"no\"\n    command: [\"migrate\"]", "    restart: unless-stopped\n    command: [\"migrate\"]", nil, "service migrate: outboxd migrate runs once: restart must be \"no\""},
		{"OneSweep", `["reconcile", "--every=1m", `, `["reconcile", `, nil, "service reconcile: outboxd reconcile runs once"},
		{"StoreNotAService", `"mongodb://mongo:27017/?replicaSet=rs0"`, `"mongodb://mongodb:27017/?replicaSet=rs0"`, nil, "--store names mongodb, which is not a service of the project"},
	}
	base := readCompose(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			content := base
			if c.old != "" {
				content = replaceOnce(t, "compose.yaml", base, c.old, c.new)
			}
			env := composeEnv
			if c.env != nil {
				env = c.env
			}
			var err error
			p, loadErr := loadCompose(content, env)
			if loadErr != nil {
				err = loadErr
			} else {
				err = joinErrs(checkCompose(p))
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got:\n%v", c.want, err)
			}
		})
	}
}
