package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/mongodb"
)

// FaultBetweenInserts fires after the originals are inserted and before their
// outbox entries are (tests only).
const FaultBetweenInserts = "outbox.between-inserts"

// WriteAttemptsDefault is how often Write runs its transaction when a
// concurrent writer inserted the same idempotency key first.
const WriteAttemptsDefault = 5

// ErrIdempotencyMismatch is matched by *MismatchError.
var ErrIdempotencyMismatch = errors.New("idempotency key reused with different content")

// MismatchError reports an idempotency key that already names an original
// with other content. The original is left untouched.
type MismatchError struct {
	Key        string
	ExistingID string
	// Index is the position of the offending input in the request.
	Index int
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("idempotency key %q already names event %s with different content", e.Key, e.ExistingID)
}

// Is makes errors.Is(err, ErrIdempotencyMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrIdempotencyMismatch }

// Result is the outcome for one input, in request order.
type Result struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	Duplicate      bool   `json:"duplicate"`
}

// WriterConfig configures a Writer. A nil config means all defaults.
type WriterConfig struct {
	// Stream is recorded in each outbox entry. Defaults to StreamDefault.
	Stream string
	// Clock stamps createdAt. Defaults to the system clock.
	Clock clock.Clock
	// Faults arms fault points in tests. Defaults to none.
	Faults *fault.Set
}

// Writer stores originals and their outbox entries atomically.
type Writer struct {
	db     lungo.IDatabase
	stream string
	clock  clock.Clock
	faults *fault.Set
}

// NewWriter returns a Writer on db.
func NewWriter(db lungo.IDatabase, cfg *WriterConfig) *Writer {
	if cfg == nil {
		cfg = &WriterConfig{}
	}
	return &Writer{
		db:     db,
		stream: cmp.Or(cfg.Stream, StreamDefault),
		clock:  cmp.Or[clock.Clock](cfg.Clock, clock.System),
		faults: cfg.Faults,
	}
}

// Validate checks inputs without writing; field names carry the index
// ("events[2].occurredAt") when there is more than one input.
func (w *Writer) Validate(inputs []Input) error {
	_, err := w.prepareAll(inputs)
	return err
}

// Batch is a set of inputs that Prepare validated and normalised, ready for
// WriteBatch.
type Batch struct {
	prep []prepared
}

// Prepare validates inputs like Validate and returns them ready to write, so
// a caller that validates before writing (the HTTP handler renames fields
// first) does the work once.
func (w *Writer) Prepare(inputs []Input) (*Batch, error) {
	prep, err := w.prepareAll(inputs)
	if err != nil {
		return nil, err
	}
	return &Batch{prep: prep}, nil
}

func (w *Writer) prepareAll(inputs []Input) ([]prepared, error) {
	now := w.clock.Now()
	out := make([]prepared, len(inputs))
	var all []FieldError
	for i, in := range inputs {
		prefix := ""
		if len(inputs) > 1 {
			prefix = fmt.Sprintf("events[%d].", i)
		}
		p, errs := prepare(in, now, prefix)
		out[i] = p
		all = append(all, errs...)
	}
	if len(all) > 0 {
		return nil, &ValidationError{Fields: all}
	}
	return out, nil
}

// Write validates inputs and stores them, with their outbox entries, in one
// transaction: all or nothing. An input whose key already exists with the
// same content yields the existing id and Duplicate; with other content the
// whole write fails with a *MismatchError. A transaction that loses a race on
// the idempotency index, or fails transiently, is run again.
func (w *Writer) Write(ctx context.Context, inputs []Input) ([]Result, error) {
	b, err := w.Prepare(inputs)
	if err != nil {
		return nil, err
	}
	return w.WriteBatch(ctx, b)
}

// WriteBatch writes a batch from Prepare, as Write does.
func (w *Writer) WriteBatch(ctx context.Context, b *Batch) ([]Result, error) {
	prep := b.prep
	sess, err := w.db.Client().StartSession()
	if err != nil {
		return nil, fmt.Errorf("error starting MongoDB session: %w", err)
	}
	defer sess.EndSession(context.WithoutCancel(ctx))

	for attempt := 1; ; attempt++ {
		res, err := sess.WithTransaction(ctx, func(sc lungo.ISessionContext) (any, error) {
			return w.write(sc, prep)
		})
		if err == nil {
			return res.([]Result), nil
		}
		if attempt >= WriteAttemptsDefault || !retryable(err) || ctx.Err() != nil {
			return nil, err
		}
	}
}

// WriteInSession stores inputs inside the caller's running transaction (sc
// from the caller's WithTransaction), so the caller's own writes commit or
// abort together with them. A concurrent writer of the same key makes the
// caller's transaction fail with a duplicate-key error; retry the whole
// transaction then (WithTransaction does so for transient errors).
func (w *Writer) WriteInSession(sc lungo.ISessionContext, inputs []Input) ([]Result, error) {
	prep, err := w.prepareAll(inputs)
	if err != nil {
		return nil, err
	}
	return w.write(sc, prep)
}

func retryable(err error) bool {
	if mongodb.IsDuplicateKey(err) {
		return true
	}
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel("TransientTransactionError")
}

func (w *Writer) write(ctx context.Context, prep []prepared) ([]Result, error) {
	events := w.db.Collection(EventsCollection)
	keys := make([]string, len(prep))
	for i, p := range prep {
		keys[i] = p.key
	}
	type existing struct {
		ID          primitive.ObjectID `bson:"_id"`
		Key         string             `bson:"idempotencyKey"`
		ContentHash string             `bson:"contentHash"`
	}
	cur, err := events.Find(ctx, bson.M{"idempotencyKey": bson.M{"$in": keys}},
		options.Find().SetProjection(bson.M{"_id": 1, "idempotencyKey": 1, "contentHash": 1}))
	if err != nil {
		return nil, fmt.Errorf("error looking up idempotency keys: %w", err)
	}
	var found []existing
	if err := cur.All(ctx, &found); err != nil {
		return nil, fmt.Errorf("error reading idempotency keys: %w", err)
	}
	known := make(map[string]existing, len(found))
	for _, f := range found {
		known[f.Key] = f
	}

	now := w.clock.Now().UTC().Truncate(time.Millisecond)
	results := make([]Result, len(prep))
	var docs, entries []any
	for i, p := range prep {
		if k, ok := known[p.key]; ok {
			if k.ContentHash != p.hash {
				return nil, &MismatchError{Key: p.key, ExistingID: k.ID.Hex(), Index: i}
			}
			results[i] = Result{ID: k.ID.Hex(), IdempotencyKey: p.key, Duplicate: true}
			continue
		}
		ev, entry := w.record(p, now)
		known[p.key] = existing{ID: ev.ID, Key: p.key, ContentHash: p.hash}
		docs = append(docs, ev)
		entries = append(entries, entry)
		results[i] = Result{ID: ev.ID.Hex(), IdempotencyKey: p.key}
	}
	if len(docs) == 0 {
		return results, nil
	}
	if _, err := events.InsertMany(ctx, docs); err != nil {
		return nil, fmt.Errorf("error inserting originals: %w", err)
	}
	if err := w.faults.Check(FaultBetweenInserts); err != nil {
		return nil, err
	}
	if _, err := w.db.Collection(OutboxCollection).InsertMany(ctx, entries); err != nil {
		return nil, fmt.Errorf("error inserting outbox entries: %w", err)
	}
	return results, nil
}

// record builds the original and the outbox entry for a validated input.
func (w *Writer) record(p prepared, now time.Time) (Event, Entry) {
	ev := Event{
		ID: primitive.NewObjectID(), IdempotencyKey: p.key, SourceKey: p.sourceKey, DeviceKey: p.deviceKey,
		Type: p.typ, OccurredAt: p.occurredAt, Payload: p.payload, ContentHash: p.hash, CreatedAt: now,
	}
	return ev, Entry{
		ID: primitive.NewObjectID(), EventID: ev.ID, Stream: w.stream,
		Message: ev.Message(OriginOutbox).Encode(), CreatedAt: now,
	}
}

// Records validates inputs and returns the originals and outbox entries that
// Write would insert for them, without reading or writing anything: no
// idempotency lookup, no transaction. It serves bulk loads whose keys are
// known to be new (test fixtures, benchmarks, migrations from another
// store); insert both slices in one transaction. Write is the safe path.
func (w *Writer) Records(inputs []Input) ([]Event, []Entry, error) {
	prep, err := w.prepareAll(inputs)
	if err != nil {
		return nil, nil, err
	}
	now := w.clock.Now().UTC().Truncate(time.Millisecond)
	events, entries := make([]Event, len(prep)), make([]Entry, len(prep))
	for i, p := range prep {
		events[i], entries[i] = w.record(p, now)
	}
	return events, entries, nil
}

// FindEvent returns the original with id, or ErrNotFound.
func FindEvent(ctx context.Context, db lungo.IDatabase, id string) (*Event, error) {
	oid, err := primitive.ObjectIDFromHex(id)
	if err != nil {
		return nil, ErrNotFound
	}
	var ev Event
	err = db.Collection(EventsCollection).FindOne(ctx, bson.M{"_id": oid}).Decode(&ev)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("error reading event %s: %w", id, err)
	}
	return &ev, nil
}

// ErrNotFound is returned for an unknown event id.
var ErrNotFound = errors.New("event not found")
