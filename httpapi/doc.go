// Package httpapi is the HTTP surface of outboxd: the ingest API
// (POST /v1/events, POST /v1/events:batch, GET /v1/events/{id}), the status
// (GET /v1/status and its Prometheus gauges), the probes (/healthz,
// /readyz) and /metrics, and the routes of the operator actions under
// /v1/admin/ (package operator: dead letters, replay by boundary, verify,
// the journey; see docs/operations.md), with RFC 9457 problem documents for
// every error and a bearer token on /v1/. The admin routes parse requests
// into the operator's typed queries, call it and map its errors to problems;
// this package talks to no database itself (it imports no go-redis, pgx or
// mongo-driver: golangci-lint's depguard holds that): Redis through package
// stream, the read model through the operator, the system of record through
// a store of the storage port and an outbox.Writer.
//
// Every long-running role serves it; the roles without the ingest API serve
// the rest, and the admin actions a role's backends allow. NewServer serves
// it with bounds on what a client may hold (time to send headers and a
// body, idle connections, bodies read at once) and a shutdown that does not
// wait for stalled clients.
package httpapi
