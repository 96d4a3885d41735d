// Package httpapi is the HTTP surface of outboxd: the ingest API
// (POST /v1/events, POST /v1/events:batch, GET /v1/events/{id}), the status
// (GET /v1/status and /v1/status/history, read by package status and served
// through a JSONSource), the probes (/healthz,
// /readyz) and /metrics, and the routes of the operator actions under
// /v1/admin/ (package operator: dead letters, replay by boundary, verify,
// the journey; see docs/operations.md), with RFC 9457 problem documents for
// every error. Access (auth.go) is by bearer tokens of three scopes, each
// optional: ingest (write events, read one), viewer (every read) and
// operator (everything); a known token outside its scope gets 403 naming
// the scope the route needs, a missing or unknown one 401, and with no
// token at all the API can be held to a Host naming a loopback address
// (DNS rebinding). The admin routes parse requests
// into the operator's typed queries, call it and map its errors to problems;
// this package talks to no database itself (it imports no go-redis, pgx or
// mongo-driver: golangci-lint's depguard holds that): Redis through package
// stream, the read model through the operator, the system of record through
// a store of the storage port and an outbox.Writer.
//
// Every long-running role serves it; the roles without the ingest API serve
// the rest, and the admin actions a role's backends allow. NewServer serves
// it, over TLS when configured, with bounds on what a client may hold (time
// to send headers and a body and to read an answer, idle connections, open
// connections with a reserve for the probes, bodies read at once), refuses
// a request with both Content-Length and Transfer-Encoding, and shuts down
// without waiting for stalled clients.
package httpapi
