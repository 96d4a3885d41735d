// Package readmodel is the one home of the PostgreSQL read model's SQL
// (the schema itself is migrations/postgres): the tables events (one row
// per original) and device_daily_stats (per source, device and UTC day:
// the count and the first and last occurrence).
//
//   - Projector is the worker's default projector (a worker.Projector):
//     one statement per batch that inserts the rows not there yet and grows
//     the statistics of exactly the rows it inserted, in key order, so that
//     redelivery, replay and reconciliation never count twice.
//   - DB is what the operator actions (package operator) use, each method
//     in a transaction of its own: the lookups of verify (Projected, Rows,
//     StatsDrift) and of an original's journey (Lookup), and the repair
//     statements of verify --repair and replay --rebuild (RecomputeStats,
//     Unproject), which lock statistics rows in the projector's key order.
//   - StatsKey (KeyOf an original), Row, Stats and StatsDrift are its
//     records.
//
// No other package of outboxd writes or reads these tables but one: the
// migrations create them, the demo read model as a SQL projection file
// (package projection, projection/demo.sql) writes them as Projector does,
// and only the benchmark harness (a program of its own) empties and counts
// them between its stages. Keyed is any other read model, checked through
// its projector (a worker.Checker).
package readmodel
