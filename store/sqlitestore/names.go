package sqlitestore

import (
	"fmt"
	"regexp"
	"strings"
)

// The names of the two tables Options can rename. EventsTable and
// OutboxTable are the defaults of Options.EventsTable and
// Options.OutboxTable.
const (
	EventsTable = "events"
	OutboxTable = "outbox"
)

// ownTables are the store's other tables: they keep their names, so
// neither Options.EventsTable nor Options.OutboxTable may take one.
var ownTables = []string{"feed_floor", "leases", "partitions", "events_removed", "marks"}

// The indexes of each renamed table are named after it: the table's name,
// "_" and one of these (events_id, outbox_stream_seq with the default
// names).
var (
	eventsIndexes = []string{"id", "idempotency_key", "pending", "failed", "occurred", "created", "device"}
	outboxIndexes = []string{"stream_seq", "undispatched", "dispatched_at", "event", "partition_seq", "partition_undispatched"}
)

// identifier is what Options.EventsTable and Options.OutboxTable accept: an
// SQL identifier that needs no quoting but for keywords (the store quotes
// every table and index name it writes).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// tables are the names of the store's events and outbox tables, in lower
// case: SQLite compares identifiers without case, and sqlite_sequence
// holds the outbox table's name as it was created.
type tables struct{ events, outbox string }

// tablesOf returns the names of o (defaults applied), or an error naming
// the field that cannot work.
func tablesOf(o Options) (tables, error) {
	t := tables{events: strings.ToLower(o.EventsTable), outbox: strings.ToLower(o.OutboxTable)}
	// Every name the schema creates: the two tables, their indexes and the
	// store's own tables. SQLite keeps tables and indexes in one namespace.
	taken := map[string]string{}
	for _, n := range ownTables {
		taken[n] = "its own " + n + " table"
	}
	for _, c := range []struct {
		field, name, lower string
		indexes            []string
	}{
		{"EventsTable", o.EventsTable, t.events, eventsIndexes},
		{"OutboxTable", o.OutboxTable, t.outbox, outboxIndexes},
	} {
		switch {
		case !identifier.MatchString(c.name):
			return tables{}, fmt.Errorf("invalid Options.%s %q: not an SQL identifier (letters, digits and _, not first a digit)", c.field, c.name)
		case strings.HasPrefix(c.lower, "sqlite_"):
			return tables{}, fmt.Errorf("invalid Options.%s %q: SQLite keeps the names that start with sqlite_", c.field, c.name)
		}
		names := []string{c.lower}
		for _, ix := range c.indexes {
			names = append(names, c.lower+"_"+ix)
		}
		for i, n := range names {
			if what, ok := taken[n]; ok {
				switch {
				case i == 0 && what == "Options.EventsTable":
					return tables{}, fmt.Errorf("invalid Options.%s %q: the same table as Options.EventsTable", c.field, c.name)
				case i == 0:
					return tables{}, fmt.Errorf("invalid Options.%s %q: outboxd keeps %s under that name", c.field, c.name, what)
				}
				return tables{}, fmt.Errorf("invalid Options.%s %q: its index %s would take the name of %s", c.field, c.name, n, what)
			}
			if i == 0 {
				taken[n] = "Options." + c.field
			} else {
				taken[n] = "the index " + n + " of Options." + c.field
			}
		}
	}
	return t, nil
}

// sql returns q with {events} and {outbox} replaced by the tables' names.
// The statements and the schema's files quote each name they write ("{events}",
// "{events}_id"); sqlite_sequence's row is read by the name as a string
// ('{outbox}').
func (t tables) sql(q string) string {
	return strings.NewReplacer("{events}", t.events, "{outbox}", t.outbox).Replace(q)
}

// queries are the store's statements on its two tables, with their names:
// built once at Open.
type queries struct {
	tables
	loadEvents, eventByKey, markSynced, park, candidates, claimRead, claim, rollbackClaim, redrive string
	countTotal, countPending, countFailed, countUndispatched, deleteSynced                         string
	lastSeq, floorAndLastSeq, feed, feedPartition, undispatched, undispatchedPartition             string
	markDispatched, deleteDispatched, outboxEntries                                                string
	// tx are outbox.Tx's statements, by stmtLookupKeys and the others.
	tx [stmtCount]string
}

func newQueries(t tables) *queries {
	q := &queries{tables: t,
		loadEvents: t.sql(qLoadEvents), eventByKey: t.sql(qEventByKey), markSynced: t.sql(qMarkSynced), park: t.sql(qPark),
		candidates: t.sql(qCandidates), claimRead: t.sql(qClaimRead), claim: t.sql(qClaim), rollbackClaim: t.sql(qRollbackClaim),
		redrive: t.sql(qRedrive), countTotal: t.sql(qCountTotal), countPending: t.sql(qCountPending), countFailed: t.sql(qCountFailed),
		countUndispatched: t.sql(qCountUndispatched), deleteSynced: t.sql(qDeleteSynced), lastSeq: t.sql(qLastSeq),
		floorAndLastSeq: t.sql(qFloorAndLastSeq), feed: t.sql(qFeed), feedPartition: t.sql(qFeedPartition),
		undispatched: t.sql(qUndispatched), undispatchedPartition: t.sql(qUndispatchedPartition),
		markDispatched: t.sql(qMarkDispatched), deleteDispatched: t.sql(qDeleteDispatched), outboxEntries: t.sql(qOutboxEntries),
	}
	for i, tq := range txQueries {
		q.tx[i] = t.sql(tq)
	}
	return q
}
