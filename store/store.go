// Package store is the storage port: everything the components of outboxd
// (writer, dispatcher, worker, reconciler, status, operator commands) need
// from the system of record, each operation with one meaning.
//
// Two stores implement it: mongostore (MongoDB, for production, and lungo's
// in-process engine in tests) and sqlitestore (one SQLite file, for make
// run and single-machine setups). The conformance suite in storetest pins
// the meanings every store must keep; the algorithms that use them (the
// writer's idempotency, the dispatcher's relay order, the worker's batch,
// the reconciler's claims) live above the port, written once.
//
// Conventions for every operation:
//   - Event and entry ids are strings (see outbox.Event.ID, outbox.Entry.ID).
//   - Times are stored at millisecond precision in UTC; a time read back
//     equals the one written, truncated to the millisecond.
//   - Errors for a store that cannot be reached wrap ErrUnavailable, so
//     callers can tell an outage from a bad request (IsUnavailable).
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/outbox"
)

// Store is the storage port. A Store is safe for concurrent use.
type Store interface {
	outbox.Transactor

	// Kind names the store: "sqlite" or "mongodb".
	Kind() string
	// Migrate creates or updates the store's schema (tables, indexes). It
	// is idempotent and safe to run concurrently.
	Migrate(ctx context.Context, cfg *MigrateConfig) error
	// CheckSchema reports, with an error that says what to run, when the
	// schema the components rely on is missing (Migrate was never run).
	CheckSchema(ctx context.Context) error
	// Ping proves the store can serve requests now (readiness, start-up
	// checks); an error means it cannot. Each store says what it checks:
	// MongoDB a read and a majority-acknowledged write, so that readiness
	// fails while writes are stuck; SQLite a read of its local file.
	Ping(ctx context.Context) error
	// Close releases the store's connections; closing twice is harmless.
	Close(ctx context.Context) error

	// LoadEvents returns the originals with the given ids, by id. An id
	// with no original is absent; an original the store cannot decode is
	// present with Loaded.Err set (wrapping ErrCorrupt). ctx may carry
	// hints the store may use and never has to: the originals' idempotency
	// keys (WithEventKeys) and the positions of the commits that wrote
	// them (WithReadAfter), which a store whose reads may lag a commit
	// reads at or after.
	LoadEvents(ctx context.Context, ids []string) (map[string]Loaded, error)
	// EventByKey returns the original stored under idempotency key, or
	// ErrNotFound.
	EventByKey(ctx context.Context, key string) (*outbox.Event, error)
	// MarkSynced sets syncedAt = at and clears syncFailure on those of ids
	// whose syncedAt is null, and returns how many it changed.
	MarkSynced(ctx context.Context, ids []string, at time.Time) (int64, error)
	// Park sets syncFailure on the original id unless it is synced, and
	// reports whether it did.
	Park(ctx context.Context, id string, f outbox.SyncFailure) (bool, error)

	// Candidates returns the ids of the reconciler's candidates, oldest
	// (createdAt) first, at most q.Limit: pending (no syncedAt, no
	// syncFailure), created before q.CreatedBefore, and never claimed or
	// claimed before q.ClaimedBefore.
	Candidates(ctx context.Context, q CandidateQuery) ([]string, error)
	// Claim stamps lastRequeuedAt = at and increments requeueCount on
	// each of ids that is still a candidate (pending, and lastRequeuedAt
	// null or before claimedBefore), all in one transaction: a constant
	// number of round trips for a sweep, and a document two reconcilers
	// both ask for is claimed by one of them. It returns the claimed
	// originals as they were before the claim, with empty payloads, in the
	// order of ids; an id that is no longer a candidate (or unknown) is
	// left out, one the store cannot decode is left unclaimed in
	// Claimed.Unreadable.
	Claim(ctx context.Context, ids []string, at, claimedBefore time.Time) (Claimed, error)
	// RollbackClaims undoes the claims stamped at on claimed (Claim's
	// originals, as they were before it), in one write: each original
	// whose lastRequeuedAt still equals at gets back the lastRequeuedAt
	// of its before-image (nil: none) and one requeue fewer; one claimed
	// anew since (by another run) is left alone. It returns how many it
	// restored.
	RollbackClaims(ctx context.Context, at time.Time, claimed []*outbox.Event) (int, error)

	// ListEvents returns the originals that q selects, ordered by (q.By's
	// time, id), at most q.Limit, after q.After; without their payloads
	// (Payload is nil). It serves the operator commands (replay by
	// boundary, verify) from indexes: a range of the window's time, or of
	// (sourceKey, deviceKey, occurredAt) when both keys are given.
	ListEvents(ctx context.Context, q EventQuery) ([]*outbox.Event, error)
	// CountEvents returns how many originals q selects, ignoring q.After
	// and q.Limit (the dry run of a replay).
	CountEvents(ctx context.Context, q EventQuery) (int64, error)
	// Redrive makes those of ids that are parked (syncFailure set, syncedAt
	// null) pending again with a fresh requeue budget: it clears
	// syncFailure and lastRequeuedAt and sets requeueCount to 0, and
	// returns how many it changed. An operator calls it before
	// re-publishing a parked original, so that the reconciler takes it up
	// again should that publish be lost.
	Redrive(ctx context.Context, ids []string) (int64, error)

	// DeleteSynced removes at most limit synced originals created before
	// before that scope selects (the zero SyncedScope: every type and
	// source), oldest first, and returns how many: the retention of the
	// originals (--event-retention, and per type or source
	// --event-retention-type, --event-retention-source), run in bounded
	// calls. It never removes a pending or parked original, nor one with
	// an outbox entry still undispatched (the entry would be relayed for an
	// original that is gone). An original's idempotency key goes with it:
	// a request with that key afterwards creates a new original. A store
	// may keep the newest original (SQLite does, so that its counts stay
	// exact).
	DeleteSynced(ctx context.Context, before time.Time, scope SyncedScope, limit int) (int64, error)

	// Counts returns the figures of the status page. A store may serve
	// them from estimates, a short cache and a replica of bounded
	// staleness (see each store's doc), unless ctx asks for current
	// figures (WithCurrentCounts); it never scans every original.
	Counts(ctx context.Context) (Counts, error)

	// OpenFeed opens the outbox feed of stream after from (nil: from now):
	// the entries inserted later, in commit order; only those of
	// opts.Partition when the stream has partitions. A position the store
	// no longer has fails with an error wrapping ErrPositionLost.
	OpenFeed(ctx context.Context, stream string, from Position, opts FeedOptions) (Feed, error)
	// Undispatched returns at most limit entries of stream (of its
	// partition part; the zero Partition is the whole stream) whose
	// dispatchedAt is null and whose id sorts after after ("" for the
	// start), in id order.
	Undispatched(ctx context.Context, stream string, part Partition, after string, limit int) ([]outbox.Entry, error)
	// MarkDispatched sets dispatchedAt = at on those of ids that are not
	// dispatched yet, only while lease (the stream's lease) is still held
	// with its term; otherwise it changes nothing and returns ErrFenced.
	MarkDispatched(ctx context.Context, lease Lease, ids []string, at time.Time) error
	// MarkRelayed is MarkDispatched(ids, cp.At) and SaveCheckpoint(cp) of
	// one relayed batch in one write (one transaction): both happen or
	// neither, only while lease is held with its term (else ErrFenced,
	// nothing changed). The dispatcher writes each batch with it.
	MarkRelayed(ctx context.Context, lease Lease, ids []string, cp Checkpoint) error
	// DeleteDispatched removes entries dispatched before before and
	// returns how many. Positions before a removed entry may be lost.
	DeleteDispatched(ctx context.Context, before time.Time) (int64, error)
	// OutboxEntries returns the outbox entries of the original eventID, of
	// every stream, in the order the store hands entries out (oldest
	// first); none when it has none: it was not written through the
	// outbox, its entries were removed after dispatch (DeleteDispatched),
	// or no original has that id. It serves the operator's event journey
	// from an index on the entries' event id.
	OutboxEntries(ctx context.Context, eventID string) ([]outbox.Entry, error)

	// AcquireLease takes the lease name for owner until now+ttl when it is
	// free, expired or already owner's, incrementing its fencing term. It
	// returns a Lease with Term 0 when another owner holds it; a held
	// Lease's Expires is now+ttl on the caller's clock.
	//
	// Expiry is judged by one clock for every caller: now is the caller's
	// clock, which on other machines may be off by more than ttl. MongoDB
	// judges by the server's clock, moved by how far now is from the
	// calling process's clock (zero unless the caller runs a fake clock);
	// SQLite runs on one machine, whose clock every process of it shares,
	// and judges by now.
	AcquireLease(ctx context.Context, name, owner string, now time.Time, ttl time.Duration) (Lease, error)
	// RenewLease extends lease until now+ttl (by the clock AcquireLease
	// names), or returns ErrFenced when its owner no longer holds it with
	// its term.
	RenewLease(ctx context.Context, lease Lease, now time.Time, ttl time.Duration) (Lease, error)
	// ReleaseLease gives lease up (it expires at once) while its owner
	// still holds it with its term, and reports whether it did.
	ReleaseLease(ctx context.Context, lease Lease) (bool, error)
	// ReadLease returns the state of lease name, or nil when it never
	// existed.
	ReadLease(ctx context.Context, name string) (*LeaseState, error)
	// Partitions returns the number of partitions recorded for stream
	// (see RecordPartitions), or 0 when none was recorded.
	Partitions(ctx context.Context, stream string) (int, error)
	// RecordPartitions records n partitions for stream only while the
	// recorded number is was (0: none recorded), in one conditional write;
	// otherwise it changes nothing and returns an error wrapping
	// ErrPartitionsChanged.
	RecordPartitions(ctx context.Context, stream string, was, n int) error

	// SaveCheckpoint records, in lease's state, the feed position up to
	// which every entry is in the stream, only while lease is held with its
	// term (else ErrFenced).
	SaveCheckpoint(ctx context.Context, lease Lease, cp Checkpoint) error

	// SetMark records at as the time of the named mark (ResetMarkName,
	// SweepMarkName, ReplayCancelMarkName), unless a later time is
	// recorded: a mark never moves back. Any process may set one; it is
	// not a lease and holds no feed position.
	SetMark(ctx context.Context, name string, at time.Time) error
	// Mark returns the time of the named mark, or nil when it was never
	// set.
	Mark(ctx context.Context, name string) (*time.Time, error)
}

// Loaded is one original read by LoadEvents.
type Loaded struct {
	Event *outbox.Event
	// Err is set when the stored original cannot be decoded.
	Err error
}

// Claimed is what Claim did with the ids it was given.
type Claimed struct {
	// Events are the claimed originals as they were before the claim
	// (lastRequeuedAt, requeueCount), without payloads, in the order of
	// the ids.
	Events []*outbox.Event
	// Unreadable holds, by id, the candidates the store could not decode:
	// they are not claimed.
	Unreadable map[string]error
}

// ClaimedOf is the Claimed of a store that read read (by id) among ids
// and claims the ones it could decode: their events in the order of ids,
// the others unreadable.
func ClaimedOf(ids []string, read map[string]Loaded) Claimed {
	var c Claimed
	for _, id := range ids {
		l, ok := read[id]
		switch {
		case !ok:
		case l.Err != nil:
			if c.Unreadable == nil {
				c.Unreadable = map[string]error{}
			}
			c.Unreadable[id] = l.Err
		default:
			c.Events = append(c.Events, l.Event)
		}
	}
	return c
}

// CandidateQuery selects the reconciler's candidates.
type CandidateQuery struct {
	CreatedBefore time.Time
	ClaimedBefore time.Time
	Limit         int
}

// TimeField names the time of an original that an EventQuery's window
// bounds.
type TimeField string

// The times an EventQuery can bound.
const (
	// ByOccurred bounds occurredAt (the default).
	ByOccurred TimeField = "occurred"
	// ByCreated bounds createdAt, the time of ingest.
	ByCreated TimeField = "created"
)

// StateAny selects originals in every state in EventQuery.State; the
// other values are outbox.StatePending, outbox.StateFailed and
// outbox.StateSynced.
const StateAny = "any"

// EventQuery selects originals by boundary: a time window, an entity and a
// state (reprocessing by time, by entity and by state).
type EventQuery struct {
	// By is the time the window bounds. Defaults to ByOccurred.
	By TimeField
	// From and To bound the window, [From, To); a zero time leaves that
	// side open.
	From, To time.Time
	// SourceKey and DeviceKey select one source, or one device of it; ""
	// selects any.
	SourceKey, DeviceKey string
	// DeviceFrom and DeviceTo select a range of the devices of SourceKey,
	// in place of DeviceKey: those whose deviceKey lies between them,
	// both bounds included, in byte order of the keys' UTF-8 (Go's
	// string order, SQLite's BINARY collation, MongoDB's simple one), so
	// "dev-001".."dev-099" holds "dev-05" but not "dev-1". Both are set or
	// neither, with SourceKey, and DeviceFrom is not after DeviceTo.
	DeviceFrom, DeviceTo string
	// State is outbox.StatePending, outbox.StateFailed, outbox.StateSynced,
	// or StateAny ("" means StateAny).
	State string
	// After resumes a listing after the original it names (exclusive);
	// nil starts at the window's beginning.
	After *EventCursor
	// Limit bounds ListEvents' page; it must be positive.
	Limit int
}

// EventCursor is the place of an original in a listing: its time of the
// query's TimeField and its id.
type EventCursor struct {
	At time.Time
	ID string
}

// CursorOf returns the cursor just after ev in a listing of q.
func (q EventQuery) CursorOf(ev *outbox.Event) *EventCursor {
	at := ev.OccurredAt
	if q.By == ByCreated {
		at = ev.CreatedAt
	}
	return &EventCursor{At: at.UTC(), ID: ev.ID}
}

// Validate checks q's fields; the error names the field.
func (q EventQuery) Validate() error {
	switch q.By {
	case "", ByOccurred, ByCreated:
	default:
		return fmt.Errorf("invalid EventQuery.By %q: must be %q or %q", q.By, ByOccurred, ByCreated)
	}
	switch q.State {
	case "", StateAny, outbox.StatePending, outbox.StateFailed, outbox.StateSynced:
	default:
		return fmt.Errorf("invalid EventQuery.State %q: must be pending, failed, synced or any", q.State)
	}
	if !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To) {
		return fmt.Errorf("invalid EventQuery window: From %s must be before To %s", q.From.Format(time.RFC3339Nano), q.To.Format(time.RFC3339Nano))
	}
	if q.DeviceKey != "" && q.SourceKey == "" {
		return errors.New("invalid EventQuery.DeviceKey: a device is named within its source; set SourceKey too")
	}
	return q.validateDeviceRange()
}

// HasDeviceRange reports whether q selects a range of devices (DeviceFrom
// and DeviceTo).
func (q EventQuery) HasDeviceRange() bool { return q.DeviceFrom != "" || q.DeviceTo != "" }

// validateDeviceRange checks DeviceFrom and DeviceTo.
func (q EventQuery) validateDeviceRange() error {
	switch {
	case !q.HasDeviceRange():
		return nil
	case q.DeviceFrom == "" || q.DeviceTo == "":
		return errors.New("invalid EventQuery.DeviceFrom/DeviceTo: a range of devices needs both bounds")
	case q.SourceKey == "":
		return errors.New("invalid EventQuery.DeviceFrom: a range of devices is named within its source; set SourceKey too")
	case q.DeviceKey != "":
		return errors.New("invalid EventQuery.DeviceKey: one device or a range of devices (DeviceFrom, DeviceTo), not both")
	case q.DeviceFrom > q.DeviceTo:
		return fmt.Errorf("invalid EventQuery.DeviceTo %q: must not be before DeviceFrom %q", q.DeviceTo, q.DeviceFrom)
	}
	return nil
}

// Counts are the status figures of a store.
type Counts struct {
	// Total counts originals; it may be an estimate (Estimated).
	Total     int64
	Estimated bool
	// Synced, Pending and Failed count originals by state; Pending and
	// Failed are exact, Synced is Total-Pending-Failed when Total is
	// estimated.
	Synced  int64
	Pending int64
	Failed  int64
	// FailedByCategory splits Failed by syncFailure.category; a store that
	// cannot tell categories outboxd does not write apart counts them under
	// CategoryOther.
	FailedByCategory map[string]int64
	// Undispatched counts outbox entries not yet relayed.
	Undispatched int64
	// OldestPending is the createdAt of the oldest pending original, nil
	// when none is pending.
	OldestPending *time.Time
	// ReadAt is when the figures were read (they may come from a cache).
	ReadAt time.Time
}

// Position is a place in a stream's outbox feed, opaque to its users: a
// change-stream resume token, or a sequence number.
type Position []byte

// FeedOptions tune a Feed.
type FeedOptions struct {
	// PollInterval is how long Next waits between two looks at the store
	// when nothing arrived. Defaults to the store's choice (100ms).
	PollInterval time.Duration
	// Gather is how long Next, woken by a commit while it waited, waits
	// for more commits before it reads, so that under a light load the
	// entries of several commits come in one batch (one read, one relay,
	// one store write downstream) instead of one batch per commit. It
	// never delays a read that finds a backlog: only a wake-up after an
	// empty read waits. 0 reads at once. Stores whose feed does not wake
	// per commit (MongoDB's change stream) ignore it.
	Gather time.Duration
	// Partition is the part of the stream the feed delivers; the zero
	// Partition is the whole stream.
	Partition Partition
}

// Partition names one partition of a stream's outbox: the entries whose
// outbox.Entry.Partition is Index, of Count partitions. With Count ≤ 1 it
// is the whole stream (every entry, whatever partition it records), so a
// deployment with one partition reads its outbox as before partitions.
type Partition struct {
	Index, Count int
}

// Whole reports whether p is the whole stream (one partition).
func (p Partition) Whole() bool { return p.Count <= 1 }

// Feed delivers a stream's outbox entries in commit order.
type Feed interface {
	// Next returns the next entries, at most max, waiting up to wait for
	// the first one; none (and no error) when nothing arrived. The feed's
	// end (ErrFeedInvalidated) and a lost position (ErrPositionLost) are
	// errors; reopen the feed from the outbox then.
	Next(ctx context.Context, max int, wait time.Duration) ([]outbox.Entry, error)
	// Position returns the position just after the last entry Next
	// returned, or a later one while the feed is quiet; nil when the store
	// has none yet.
	Position() Position
	// Close releases the feed.
	Close(ctx context.Context) error
}

// Lease is a held (Term > 0) or refused (Term == 0) lease.
type Lease struct {
	Name    string
	Owner   string
	Term    int64
	Expires time.Time
}

// Held reports whether the lease was granted.
func (l Lease) Held() bool { return l.Term > 0 }

// LeaseState is what a store keeps of a lease.
type LeaseState struct {
	Name    string
	Owner   string
	Term    int64
	Expires time.Time
	// Position is the last checkpoint's feed position (nil: none).
	Position Position
	// PositionInvalid is set when the stored position cannot be read: it
	// counts as lost.
	PositionInvalid bool
	// CheckpointAt is when the last checkpoint was written (nil: never).
	CheckpointAt *time.Time
}

// Checkpoint is what the dispatcher records after a relayed batch or while
// idle.
type Checkpoint struct {
	// Position replaces the saved position when not nil.
	Position Position
	// Forget clears the saved position (it was lost) when Position is nil.
	Forget bool
	// At is the checkpoint time.
	At time.Time
}

// MigrateConfig tunes Migrate. A nil config means defaults.
type MigrateConfig struct {
	// OutboxRetention is how long a dispatched entry is kept, where the
	// store expires entries itself (MongoDB's TTL index). Defaults to
	// OutboxRetentionDefault.
	OutboxRetention time.Duration
	// EventRetention is how long a synced original is kept after its
	// createdAt, where the store expires originals itself (MongoDB's
	// partial TTL index on synced originals); 0, the default, keeps them
	// and removes the index a longer retention set before.
	EventRetention time.Duration
}

// Bounds of MigrateConfig, checked by Validate.
const (
	// OutboxRetentionShortest is the shortest MigrateConfig.OutboxRetention
	// (--outbox-retention): MongoDB's TTL index counts whole seconds.
	OutboxRetentionShortest = time.Second
	// EventRetentionShortest is the shortest MigrateConfig.EventRetention
	// other than 0 (--event-retention): below it a client still retrying
	// could find its idempotency key forgotten.
	EventRetentionShortest = time.Hour
)

// Validate checks c as Migrate takes it (a zero OutboxRetention is
// OutboxRetentionDefault); each error names its field, and they are
// joined. The retentions are the deployment's, so outboxd checks them
// with it in every role that takes --outbox-retention or
// --event-retention, not only in migrate.
func (c *MigrateConfig) Validate() error {
	var out MigrateConfig
	if c != nil {
		out = *c
	}
	var errs []error
	if r := cmp.Or(out.OutboxRetention, OutboxRetentionDefault); r < OutboxRetentionShortest {
		errs = append(errs, bounds.Errorf("OutboxRetention", r, "must be at least %s", OutboxRetentionShortest))
	}
	if r := out.EventRetention; r < 0 || (r > 0 && r < EventRetentionShortest) {
		errs = append(errs, bounds.Errorf("EventRetention", r, "must be 0 (keep originals forever) or at least %s", EventRetentionShortest))
	}
	return errors.Join(errs...)
}

// CategoryRequeueExhausted is the syncFailure category of an original the
// reconciler parked after requeueing it the most times it may
// (reconciler.Config.MaxRequeues) without it reaching syncedAt. Stores count
// it apart in Counts.FailedByCategory, like the worker's categories.
const CategoryRequeueExhausted = "requeue_exhausted"

// CategoryOther collects, in Counts.FailedByCategory, the failures of
// categories outboxd does not write itself.
const CategoryOther = "other"

// OutboxRetentionDefault is how long a dispatched outbox entry is kept.
const OutboxRetentionDefault = 24 * time.Hour

// Errors of the port. Stores wrap them; compare with errors.Is.
var (
	// ErrNotFound: no such original.
	ErrNotFound = errors.New("not found")
	// ErrFenced: the lease is held by another owner or a newer term.
	ErrFenced = errors.New("fenced out: the lease is held by another owner or a newer term")
	// ErrPositionLost: the feed position is no longer in the store's
	// history (or cannot be read); catch up from the outbox.
	ErrPositionLost = errors.New("feed position lost")
	// ErrFeedInvalidated: the feed ended because its collection was
	// dropped, renamed or replaced; reopen from now and catch up.
	ErrFeedInvalidated = errors.New("feed invalidated (outbox dropped or renamed)")
	// ErrUnavailable: the store cannot be reached or is not accepting
	// writes now (network, failover, shutdown); retry later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCorrupt: a stored document cannot be decoded.
	ErrCorrupt = errors.New("stored document is corrupt")
	// ErrPartitionsChanged: the number of partitions recorded for a stream
	// is not the one expected (RecordPartitions).
	ErrPartitionsChanged = errors.New("the recorded number of partitions changed")
	// ErrSchema: the schema is missing or out of date; run migrate.
	ErrSchema = errors.New("store schema missing or out of date")
	// ErrForeign: Migrate found, under the name of one of outboxd's
	// tables or collections, one that outboxd did not create (a service's
	// own); name another with the store's options
	// (sqlitestore.Options.EventsTable, mongostore.Options.EventsCollection
	// and their outbox twins).
	ErrForeign = errors.New("outboxd needs a table or collection of its own")
)

// IsUnavailable reports an error that means the store cannot serve now.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
