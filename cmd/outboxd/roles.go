package main

import (
	"context"
	"fmt"
	"io"
)

// flagGroup is a set of flags that roles share.
type flagGroup int

const (
	gStore flagGroup = iota
	gRedis
	gPostgres
	gHTTP
	gAuth
	gIngest
	gDispatch
	gWork
	gReconcile
	gClient
)

// role is one subcommand: what it reads, what it opens, what it runs. This
// table is the one place that says what a role is.
type role struct {
	name    string
	summary string
	// flags are the flag groups the role reads.
	flags []flagGroup
	// store, redis, postgres: the backends the role opens.
	store, redis, postgres bool
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
		services: func(a *app) ([]service, error) { return a.build(a.newReconciler, a.newDispatcher, a.newWorker) }},
	{name: "ingest", summary: "HTTP API that writes originals and outbox entries in one store transaction",
		flags: []flagGroup{gStore, gHTTP, gAuth, gIngest}, store: true, serve: true, api: true},
	{name: "dispatch", summary: "relay the outbox to the Redis stream (feed + checkpoint, one leader per stream)",
		flags: []flagGroup{gStore, gRedis, gHTTP, gDispatch}, store: true, redis: true, serve: true,
		services: func(a *app) ([]service, error) { return a.build(a.newDispatcher) }},
	{name: "work", summary: "consume the stream and build the PostgreSQL read model",
		flags: []flagGroup{gStore, gRedis, gPostgres, gHTTP, gWork}, store: true, redis: true, postgres: true, serve: true,
		services: func(a *app) ([]service, error) { return a.build(a.newWorker) }},
	{name: "reconcile", summary: "re-publish old originals that never reached syncedAt (one sweep, or --every on the leader)",
		flags: []flagGroup{gStore, gRedis, gHTTP, gReconcile}, store: true, redis: true, serve: true,
		services: func(a *app) ([]service, error) { return a.build(a.newReconciler) },
		once:     func(ctx context.Context, a *app) error { return a.reconcileOnce(ctx) },
		onceWhen: func(o *options) bool { return o.every == 0 }},
	{name: "migrate", summary: "apply the PostgreSQL schema and the store's schema (tables or indexes)",
		flags: []flagGroup{gStore, gPostgres, gDispatch}, store: true, postgres: true,
		once: func(ctx context.Context, a *app) error { return a.applyMigrations(ctx) }},
	{name: "status", summary: "print the pipeline's status from a running instance",
		flags: []flagGroup{gClient}, once: func(ctx context.Context, a *app) error { return a.printStatus(ctx) }},
}

// lookupRole returns the role called name.
func lookupRole(name string) (*role, bool) {
	for _, r := range roles {
		if r.name == name {
			return r, true
		}
	}
	return nil, false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: outboxd <role> [flags]   (outboxd <role> -h lists the role's flags)")
	for _, r := range roles {
		fmt.Fprintf(w, "  %-10s %s\n", r.name, r.summary)
	}
}
