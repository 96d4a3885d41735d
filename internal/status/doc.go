// Package status reads the state of one pipeline: the figures the stores
// and Redis hold (originals by state, the outbox, the stream, the replay
// lane, the dead letters, the leases and the last sweep and audit) and
// what this process's components tell through their metrics (breakers,
// back-pressure, halted retries, latency). It is one reader for every
// client: GET /v1/status and GET /v1/status/history (package httpapi serves
// Status.JSON and History.JSON), `outboxd status`, the console's charts,
// and the gauges on /metrics (Collector).
//
// A Status reads the stores each time it is asked, every part bounded by
// its ReadTimeout: a part that cannot be read is named unavailable, never
// shown as zero. A History samples a Status every few seconds into a ring
// buffer, in this process. The metrics it reads are named by constants of
// the packages that register them (worker.BreakerStateMetric,
// dispatcher.BreakerStateMetric, dispatcher.BackpressureMetric,
// failpolicy.RetriesHaltedMetric, worker.LatencyMetric).
package status
