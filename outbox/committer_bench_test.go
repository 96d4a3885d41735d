package outbox_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// nopTx is a transaction that stores nothing: the committer's own costs.
type nopTx struct{}

func (nopTx) LookupKeys(context.Context, []string) (map[string]outbox.KeyRecord, error) {
	return nil, nil
}
func (nopTx) InsertEvents(context.Context, []outbox.Event) error  { return nil }
func (nopTx) InsertEntries(context.Context, []outbox.Entry) error { return nil }

// nopStore runs every transaction on a nopTx.
type nopStore struct{}

func (nopStore) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	return fn(ctx, nopTx{})
}

// BenchmarkCommitterLone: one request of one event at a time, as under a
// light load, through the committer (group commit on its default wait)
// and without it (GroupWaitOff), into SQLite and into a store that stores
// nothing (the committer's fixed costs per group); group-1ms spaces the
// requests 1ms apart. Wall time includes the
// group wait; cpu-µs/op is the process's CPU per request (on a shared
// machine, the figure to compare).
func BenchmarkCommitterLone(b *testing.B) {
	for _, backend := range []string{"nop", "sqlite"} {
		for _, wait := range []struct {
			name string
			d    outbox.CommitterConfig
			gap  time.Duration // between requests
		}{
			{"group", outbox.CommitterConfig{}, 0},
			{"group-1ms", outbox.CommitterConfig{}, time.Millisecond},
			{"nowait", outbox.CommitterConfig{GroupWait: time.Nanosecond}, 0},
			{"off", outbox.CommitterConfig{GroupWait: outbox.GroupWaitOff}, 0},
		} {
			b.Run(backend+"/"+wait.name, func(b *testing.B) {
				var db outbox.Transactor = nopStore{}
				if backend == "sqlite" {
					db = testkit.NewStore(b)
				}
				w := outbox.NewWriter(db, nil)
				cfg := wait.d
				c, err := outbox.NewCommitter(w, &cfg)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = c.Stop(ctx) })
				b.ReportAllocs()
				cpu := processCPU(b)
				i := 0
				for b.Loop() {
					if wait.gap > 0 {
						time.Sleep(wait.gap) // a light load; the sleep's own CPU is counted
					}
					i++
					batch, err := w.Prepare([]outbox.Input{{IdempotencyKey: fmt.Sprintf("k%d", i), SourceKey: "s", DeviceKey: "d",
						OccurredAt: "2026-12-06T05:00:00Z"}})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := c.Write(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// processCPU is the CPU time (user and system) the test process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
