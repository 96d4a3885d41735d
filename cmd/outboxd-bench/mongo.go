package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/redact"
	"github.com/outboxd/outboxd/store/mongostore"
)

// mongoCommands counts the MongoDB store's commands per path
// (mongostore.MeasureCommands at the sizes of docs/mongodb.md): always on
// lungo, and also on the replica set of BENCH_MONGO_URI (or
// OUTBOXD_TEST_MONGO_URI) when one is given, in a database of its own that
// is dropped afterwards. BENCH_MONGO=off skips it. The sizes are
// b.mongoSizes (zero: the defaults, an ingest group of 500, batches of
// 2,000, a sweep of 1,000).
func (b *bench) mongoCommands(ctx context.Context) error {
	if env("", "BENCH_MONGO") == "off" {
		return nil
	}
	fmt.Fprintln(b.out, "MongoDB store: commands per path")
	uris := []string{mongostore.LungoMemory}
	if uri := env("", "BENCH_MONGO_URI", "OUTBOXD_TEST_MONGO_URI"); uri != "" {
		uris = append(uris, uri)
	}
	for _, uri := range uris {
		began := time.Now()
		opts := &mongostore.Options{}
		if uri != mongostore.LungoMemory {
			opts.Database = "outboxd_bench_" + b.be.id
		}
		table, err := mongostore.MeasureCommands(ctx, uri, opts, b.mongoSizes)
		if opts.Database != "" {
			if derr := dropMongoDatabase(ctx, uri, opts.Database); err == nil {
				err = derr
			}
		}
		if err != nil {
			return fmt.Errorf("error counting the MongoDB store's commands on %s: %w", redact.DSN(uri), err)
		}
		b.res.MongoCommands = append(b.res.MongoCommands, table)
		fmt.Fprintf(b.out, "  %d paths counted on %s in %s (table at the end)\n", len(table.Rows), table.Engine, time.Since(began).Round(time.Millisecond))
	}
	return nil
}

// dropMongoDatabase drops the database name of the server at uri.
func dropMongoDatabase(ctx context.Context, uri, name string) error {
	s, err := mongostore.Open(ctx, uri, &mongostore.Options{Database: name})
	if err != nil {
		return err
	}
	defer func() { _ = s.Close(context.WithoutCancel(ctx)) }()
	return mongoseam.Database(s).Drop(ctx)
}
