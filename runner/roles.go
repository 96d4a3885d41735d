package runner

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outboxd/outboxd/store"
)

// flagGroup is a set of flags that roles share.
type flagGroup int

const (
	gStore flagGroup = iota
	gRedis
	gPostgres
	gHTTP
	gAuth // the tokens of the API, every serving role
	gIngest
	gDispatch
	gWork
	gReconcile
	gClient
	gDLQFilter // --category, --code
	gDLQList   // --limit
	gDLQSelect // --id, --all
	gConfirm   // --yes
	gWindow    // --from, --to, --chunk
	gReplay    // --by, --source, --device, --state, --dry-run, --rebuild
	gVerify    // --repair
	gRetries   // --class
	gPause     // --stage, --paused-by
	gSwitch    // --stream, --to
	gMigrate   // --store-only, --read-model-only
)

// role is one subcommand: what it reads, what it opens, what it runs. This
// table is the one place that says what a role is. The operator commands
// are client roles: they open nothing and call the admin API of the
// instance at --server.
type role struct {
	// name is the subcommand; "dlq list" is the subcommand dlq with the
	// action list.
	name    string
	summary string
	// flags are the flag groups the role reads.
	flags []flagGroup
	// store, redis, postgres: the backends the role opens.
	store, redis, postgres bool
	// postgresAside: the role uses PostgreSQL only aside from its work (the
	// reconciler's audit), so /readyz does not check it.
	postgresAside bool
	// migrate: the role applies the schemas before it starts.
	migrate bool
	// serve: a long-running role with the HTTP surface (/healthz, /readyz,
	// /metrics, /v1/status) on --http-addr; api adds the ingest API.
	serve, api bool
	// services returns the long-running components, in stop order:
	// producers (the dispatcher, the reconciler) before the consumer (the
	// worker).
	services func(a *app) ([]service, error)
	// once runs a role that is not long-running (it replaces serving),
	// always, or when onceWhen says so.
	once     func(ctx context.Context, a *app) error
	onceWhen func(o *options) bool
}

// roles is the table of roles, in the order of the usage text.
var roles = []*role{
	{name: "dev", summary: "migrations, then every role in one process (SQLite store by default)",
		flags: []flagGroup{gStore, gRedis, gPostgres, gHTTP, gAuth, gIngest, gDispatch, gWork, gReconcile},
		store: true, redis: true, postgres: true, migrate: true, serve: true, api: true,
		services: func(a *app) ([]service, error) {
			return a.build(withRole(store.RoleAudit, a.newAudit), withRole(store.RoleReconciler, a.newReconciler),
				withRole(store.RoleReconciler, a.newRedriver), withRole(store.RoleDispatcher, a.newDispatcher), withRole(store.RoleWorker, a.newWorker))
		}},
	{name: "ingest", summary: "HTTP API that writes originals and outbox entries in one store transaction",
		flags: []flagGroup{gStore, gHTTP, gAuth, gIngest}, store: true, serve: true, api: true},
	{name: "dispatch", summary: "relay the outbox to the Redis stream (feed + checkpoint, one leader per stream)",
		flags: []flagGroup{gStore, gRedis, gHTTP, gAuth, gDispatch}, store: true, redis: true, serve: true,
		services: func(a *app) ([]service, error) { return a.build(withRole(store.RoleDispatcher, a.newDispatcher)) }},
	{name: "work", summary: "consume the stream and build the PostgreSQL read model",
		flags: []flagGroup{gStore, gRedis, gPostgres, gHTTP, gAuth, gWork}, store: true, redis: true, postgres: true, serve: true,
		services: func(a *app) ([]service, error) { return a.build(withRole(store.RoleWorker, a.newWorker)) }},
	{name: "reconcile", summary: "re-publish old originals that never reached syncedAt (one sweep, or --every as a service, with the read model's audit)",
		flags: []flagGroup{gStore, gRedis, gPostgres, gHTTP, gAuth, gReconcile}, store: true, redis: true, postgres: true, postgresAside: true, serve: true,
		services: func(a *app) ([]service, error) {
			return a.build(withRole(store.RoleAudit, a.newAudit), withRole(store.RoleReconciler, a.newReconciler),
				withRole(store.RoleReconciler, a.newRedriver))
		},
		once:     func(ctx context.Context, a *app) error { return a.reconcileOnce(ctx) },
		onceWhen: func(o *options) bool { return o.every == 0 }},
	{name: "migrate", summary: "apply the store's schema (tables or indexes) and the PostgreSQL read model's (--store-only, --read-model-only)",
		flags: []flagGroup{gStore, gPostgres, gDispatch, gMigrate}, store: true, postgres: true,
		once: func(ctx context.Context, a *app) error { return a.applyMigrations(ctx) }},
	{name: "status", summary: "the pipeline at a glance, from a running instance (exit 1 while it is stalled)",
		flags: []flagGroup{gClient}, once: func(ctx context.Context, a *app) error { return a.printStatus(ctx) }},
	{name: "dlq list", summary: "list dead letters (--category C, --code X, --limit N)",
		flags: []flagGroup{gClient, gDLQFilter, gDLQList}, once: func(ctx context.Context, a *app) error { return a.dlqList(ctx) }},
	{name: "dlq replay", summary: "replay dead letters (--id ID… | --all [--category C]): redrive their originals (clear syncFailure), re-publish, remove the entry",
		flags: []flagGroup{gClient, gDLQFilter, gDLQSelect}, once: func(ctx context.Context, a *app) error { return a.dlqAct(ctx, dlqReplay) }},
	{name: "dlq drop", summary: "remove dead letters without replaying them (--id ID… | --all) --yes",
		flags: []flagGroup{gClient, gDLQFilter, gDLQSelect, gConfirm}, once: func(ctx context.Context, a *app) error { return a.dlqAct(ctx, dlqDrop) }},
	{name: "replay cancel", summary: "cancel the running replays: no more of them is published, and what waits unprojected in the replay lane is removed (the live stream untouched)",
		flags: []flagGroup{gClient}, once: func(ctx context.Context, a *app) error { return a.cancelReplay(ctx) }},
	{name: "pause", summary: "pause a stage for every replica until resumed (--stage relay | relay:P | projection | replay)",
		flags: []flagGroup{gClient, gPause}, once: func(ctx context.Context, a *app) error { return a.pauseStage(ctx, true) }},
	{name: "resume", summary: "resume a paused stage (--stage relay | relay:P | projection | replay)",
		flags: []flagGroup{gClient, gPause}, once: func(ctx context.Context, a *app) error { return a.pauseStage(ctx, false) }},
	{name: "replay", summary: "re-publish the originals of a window --from T --to T (by time, source, device, state), --dry-run, --rebuild",
		flags: []flagGroup{gClient, gWindow, gReplay}, once: func(ctx context.Context, a *app) error { return a.replay(ctx) }},
	{name: "verify", summary: "compare originals with the read model [--from T --to T] (exit 1 on drift), --repair",
		flags: []flagGroup{gClient, gWindow, gVerify}, once: func(ctx context.Context, a *app) error { return a.verify(ctx) }},
	{name: "retries resume", summary: "resume the automatic retries of a class halted by the error-streak rule (--class C), for every worker and dispatcher",
		flags: []flagGroup{gClient, gRetries}, once: func(ctx context.Context, a *app) error { return a.resumeRetries(ctx) }},
	{name: "version", summary: "print the version of outboxd, the Go release it was built with and its commit",
		once: func(ctx context.Context, a *app) error { return a.printVersion() }},
	{name: "partitions switch", summary: "record another number of partitions (--to N) once the pipeline is drained (refuses while entries are undispatched or pending)",
		flags: []flagGroup{gStore, gSwitch}, store: true, once: func(ctx context.Context, a *app) error { return a.switchPartitions(ctx) }},
}

// lookupRole returns the role args start with and the arguments after its
// name: a role's name may be two words ("dlq list").
func lookupRole(args []string) (*role, []string, bool) {
	for _, r := range roles {
		words := strings.Fields(r.name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return r, args[len(words):], true
		}
	}
	return nil, nil, false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: outboxd <role> [flags]   (outboxd <role> -h lists the role's flags)")
	for _, r := range roles {
		fmt.Fprintf(w, "  %-11s %s\n", r.name, r.summary)
	}
}
