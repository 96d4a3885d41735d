package dispatcher

import "github.com/outboxd/outboxd/internal/maintenance"

// newMaintenance creates the leader's maintenance services (package
// internal/maintenance), which lead starts when this dispatcher takes the
// lead and stops when it loses it:
//   - the watch, every TrimInterval: trims the stream (or partition) and
//     its replay lane, reads Redis's memory, whose verdict holds the relay
//     (pressure.go), and the groups' lag;
//   - the retention, every SweepInterval, on the whole stream's or
//     partition 0's dispatcher only (the retentions are the whole store's):
//     deletes the dispatched entries past OutboxRetention and the synced
//     originals past their retention (EventRetentionTypes,
//     EventRetentionSources, EventRetention).
func (d *Dispatcher) newMaintenance(wm *maintenance.WatchMetrics) {
	c := d.cfg
	d.watch = maintenance.NewWatch(maintenance.WatchConfig{
		Client: d.rc, Keys: d.keys(), Interval: c.TrimInterval, StreamRetention: c.StreamRetention, TrimOff: c.TrimOff,
		MemoryHigh: c.MemoryHigh, Metrics: wm, Verdict: func() { _ = d.hold() }, Logger: d.logger,
	})
	if c.part.Index > 0 {
		return
	}
	d.retention = maintenance.NewRetention(maintenance.RetentionConfig{
		Store: d.st, Interval: c.SweepInterval, Outbox: c.OutboxRetention,
		Events: c.EventRetention, Types: c.EventRetentionTypes, Sources: c.EventRetentionSources,
		Chunk: EventPurgeChunk, Max: EventPurgeMax, Now: c.Now, Deleted: d.metrics.purged, Logger: d.logger,
	})
}

// services are the maintenance services this dispatcher runs while it
// leads.
func (d *Dispatcher) services() []maintenance.Service {
	if d.retention == nil {
		return []maintenance.Service{d.watch}
	}
	return []maintenance.Service{d.watch, d.retention}
}
