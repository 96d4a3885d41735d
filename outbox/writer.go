package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/tracing"
)

// faultBetweenInserts fires after the originals are inserted and before their
// outbox entries are (tests only).
const faultBetweenInserts = "outbox.between-inserts"

// WriteAttemptsDefault is how often Write runs its transaction when a
// concurrent writer stored one of its idempotency keys first: the next run
// finds the winner's original and answers with it.
const WriteAttemptsDefault = 3

// ErrDuplicateKey is wrapped by the error of Tx.InsertEvents when an
// idempotency key is already stored: another writer committed it after this
// transaction looked the key up. The transaction then fails as a whole. A
// taken event id (two NewEventID draws collided) fails it the same way: the
// transaction run again draws new ids.
var ErrDuplicateKey = errors.New("idempotency key already stored")

// ErrIdempotencyMismatch is matched by *MismatchError.
var ErrIdempotencyMismatch = errors.New("idempotency key reused with different content")

// MismatchError reports an idempotency key that already names an event
// with other content. Nothing of the request was written.
type MismatchError struct {
	Key string
	// ExistingID is the original the key names (stored, or written by an
	// earlier request of the same Committer group), or "" when the key
	// conflicts with an earlier item of the same batch (OtherIndex).
	ExistingID string
	// Index is the position of the offending input in the request.
	Index int
	// OtherIndex is the earlier input of the same request that uses the key
	// with other content, or -1.
	OtherIndex int
}

func (e *MismatchError) Error() string {
	if e.OtherIndex >= 0 {
		return fmt.Sprintf("idempotency key %q of item %d is used by item %d with different content", e.Key, e.Index, e.OtherIndex)
	}
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

// KeyRecord is what a store keeps of an idempotency key: the original it
// names and that original's content hash.
type KeyRecord struct {
	ID          string
	ContentHash string
}

// Tx is what the writer needs inside one store transaction. Every store of
// the storage port provides it (store.Store.WriteTx), and a store may hand
// one out for a transaction its caller runs (see WriteInTx).
type Tx interface {
	// LookupKeys returns the stored originals named by keys, by key.
	LookupKeys(ctx context.Context, keys []string) (map[string]KeyRecord, error)
	// InsertEvents inserts originals. A key stored meanwhile by another
	// transaction fails it with an error wrapping ErrDuplicateKey.
	InsertEvents(ctx context.Context, events []Event) error
	// InsertEntries inserts outbox entries; the store assigns their IDs.
	InsertEntries(ctx context.Context, entries []Entry) error
}

// KeyRanger is implemented by a Tx that can tell cheaply whether it holds
// any key in a range (SQLite: one probe of the key's index). The Writer
// then looks up the form up to 0.1.0 of its keyless events' keys (see
// DeriveKey) only in the namespaces where keys of that form are stored:
// in a store that holds none, a keyless event costs one lookup, not two.
// A Tx without it has both forms looked up.
type KeyRanger interface {
	// AnyKeyBetween reports whether an original is stored under a key k
	// with from <= k < to (byte order).
	AnyKeyBetween(ctx context.Context, from, to string) (bool, error)
}

// PayloadSizer is implemented by a store that can tell how many bytes a
// payload takes in it (MongoDB: the BSON document it becomes, which may be
// several times its JSON). The Writer measures each event with it, so the
// Committer can bound its groups in bytes and refuse an event that would
// not fit one (CommitterConfig.GroupMaxBytes). A store without it is
// measured by the payload's JSON.
type PayloadSizer interface {
	// PayloadSize returns the bytes payload, a valid canonical JSON object,
	// takes in the store.
	PayloadSize(payload json.RawMessage) (int, error)
}

// recordOverhead bounds the bytes an original and its outbox entry take
// beyond the payload and their strings: ids, times, the content hash, the
// field names and the entry's message around its strings.
const recordOverhead = 1024

// Transactor runs fn in one store transaction, committing when fn returns
// nil and rolling back otherwise. It may run fn again after a transient
// failure of the store (fn must be repeatable).
type Transactor interface {
	WriteTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
}

// WriterConfig configures a Writer. A nil config means all defaults.
type WriterConfig struct {
	// Stream is recorded in each outbox entry. Defaults to StreamDefault.
	Stream string
	// Partitions is the stream's number of partitions (--partitions): each
	// entry records PartitionOf its original's sourceKey and deviceKey.
	// Defaults to PartitionsDefault.
	Partitions int
	// Now stamps createdAt. Defaults to time.Now; tests set a fake clock.
	Now func() time.Time
	// Message says what each outbox entry's message carries besides the
	// original's name and type (the payload). Defaults to nothing more.
	Message *MessageOptions
	// Routes records the outbox entry of an event of a routed type for
	// its route's stream instead of Stream (--route). Each routed stream
	// has Partitions partitions too. Defaults to none. Invalid routes
	// (Routes.Validate) fail every write.
	Routes Routes

	// faults arms fault points in tests (export_test.go).
	faults *fault.Set
}

// Writer stores originals and their outbox entries atomically.
type Writer struct {
	db         Transactor
	stream     string
	partitions int
	now        func() time.Time
	faults     *fault.Set
	sizer      PayloadSizer // nil: the payload's JSON
	message    *MessageOptions
	routes     Routes
	// routesErr is why the routes are invalid; every write returns it.
	routesErr error
	// checked is set once the store's record of the number of partitions
	// of every stream the Writer writes to was found to agree with
	// partitions (checkPartitions).
	checked atomic.Bool
}

// PartitionsReader is implemented by a store that records the number of
// partitions of each stream (both stores of the storage port do).
type PartitionsReader interface {
	// Partitions returns the number recorded for stream, 0 when none is.
	Partitions(ctx context.Context, stream string) (int, error)
}

// ErrPartitionsMismatch is wrapped by the error of a write whose Writer was
// configured with another number of partitions than the store records for
// its stream: its entries would go to partitions that the rest of the
// deployment does not read.
var ErrPartitionsMismatch = errors.New("the number of partitions differs from the store's record")

// checkPartitions compares WriterConfig.Partitions with the number the
// store records for each stream the Writer writes to (when it implements
// PartitionsReader; the first dispatcher, worker or reconciler to start
// records it). Once every stream's record agrees it is not read again. A
// stream without a record yet is read again at the next write, so that a
// number recorded later (by a dispatcher started after the first writes)
// is still compared. The Writer records nothing itself: a write in the
// caller's transaction (WriteInTx) must not open another write
// transaction, which on SQLite would wait for the caller's.
func (w *Writer) checkPartitions(ctx context.Context) error {
	if w.checked.Load() {
		return nil
	}
	pr, ok := w.db.(PartitionsReader)
	if !ok {
		w.checked.Store(true)
		return nil
	}
	recorded := true
	for _, stream := range w.routes.Streams(w.stream) {
		n, err := pr.Partitions(ctx, stream)
		if err != nil {
			return fmt.Errorf("error reading the number of partitions of stream %s: %w", stream, err)
		}
		if n != 0 && n != w.partitions {
			return fmt.Errorf("%w: the store records %d partitions for stream %s, this Writer was configured with %d (WriterConfig.Partitions; the CLI's --partitions)",
				ErrPartitionsMismatch, n, stream, w.partitions)
		}
		recorded = recorded && n != 0
	}
	w.checked.Store(recorded)
	return nil
}

// NewWriter returns a Writer that writes through db (a store of the storage
// port). A nil cfg means all defaults.
func NewWriter(db Transactor, cfg *WriterConfig) *Writer {
	if cfg == nil {
		cfg = &WriterConfig{}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	sizer, _ := db.(PayloadSizer)
	w := &Writer{db: db, stream: cmp.Or(cfg.Stream, StreamDefault), partitions: max(cfg.Partitions, PartitionsDefault),
		now: now, faults: cfg.faults, sizer: sizer, message: cfg.Message, routes: maps.Clone(cfg.Routes)}
	if err := w.routes.Validate(); err != nil {
		w.routesErr = fmt.Errorf("invalid WriterConfig.Routes: %w", err)
	}
	return w
}

// Stream returns the stream the writer's outbox entries name: the default
// one, for the events of a type without a route.
func (w *Writer) Stream() string { return w.stream }

// StreamOf returns the stream the outbox entries of the events of typ name
// (WriterConfig.Routes).
func (w *Writer) StreamOf(typ string) string { return w.routes.StreamOf(typ, w.stream) }

// Validate checks inputs without writing. Its error is a *ValidationError
// whose FieldErrors name each invalid field by its input's index and its
// path inside the input.
func (w *Writer) Validate(inputs []Input) error {
	_, err := w.prepareAll(inputs, false)
	return err
}

// Batch is a set of inputs that Prepare validated and normalised, ready for
// WriteBatch.
type Batch struct {
	prep []prepared
}

// Len returns the number of inputs in b.
func (b *Batch) Len() int { return len(b.prep) }

// Key returns the idempotency key of input i (given or derived) as the
// client knows it; the store holds ClientKey of it.
func (b *Batch) Key(i int) string { return b.prep[i].clientKey }

// ContentHash returns the content hash of input i: two inputs with the same
// key and hash are the same event.
func (b *Batch) ContentHash(i int) string { return b.prep[i].hash }

// Bytes returns what input i takes in the store, its original and its
// outbox entry: the store's measure of its payload (PayloadSizer) and the
// rest estimated from above, within a KiB.
func (b *Batch) Bytes(i int) int { return b.prep[i].bytes }

// Prepare validates inputs like Validate and returns them ready to write, so
// a caller that validates before writing does the work once. It also makes
// what the write's transaction does not decide (each input's event id,
// stream and partition, and its stream message but for createdAt), so that
// the transaction, which on SQLite holds the store's one writer, does less:
// the event ids carry the time of Prepare.
func (w *Writer) Prepare(inputs []Input) (*Batch, error) {
	prep, err := w.prepareAll(inputs, true)
	if err != nil {
		return nil, err
	}
	return &Batch{prep: prep}, nil
}

// prepareAll validates and prepares inputs; with drafts it also makes each
// one's draft, which only a write uses.
func (w *Writer) prepareAll(inputs []Input, drafts bool) ([]prepared, error) {
	if w.routesErr != nil {
		return nil, w.routesErr
	}
	now := w.now()
	out := make([]prepared, len(inputs))
	var all []FieldError
	for i, in := range inputs {
		p, errs := prepare(in, now, i)
		if len(errs) == 0 {
			var err error
			if p.bytes, err = w.size(p); err != nil {
				errs = append(errs, FieldError{Index: i, Field: "payload", Reason: "cannot be stored: " + err.Error()})
			}
		}
		out[i] = p
		all = append(all, errs...)
	}
	if len(all) > 0 {
		return nil, &ValidationError{Fields: all}
	}
	if drafts {
		for i := range out {
			out[i].draft = w.draft(out[i])
		}
	}
	return out, nil
}

// size returns what p takes in the store (see Batch.Bytes).
func (w *Writer) size(p prepared) (int, error) {
	n := len(p.payload)
	if w.sizer != nil {
		var err error
		if n, err = w.sizer.PayloadSize(p.payload); err != nil {
			return 0, err
		}
	}
	return n + 2*(len(p.key)+len(p.sourceKey)+len(p.deviceKey)) + len(p.typ) + len(p.client) + recordOverhead, nil
}

// Write validates inputs and stores them, with their outbox entries, in one
// transaction: all or nothing. An input whose key already exists with the
// same content yields the existing id and Duplicate; with other content the
// whole write fails with a *MismatchError.
func (w *Writer) Write(ctx context.Context, inputs []Input) ([]Result, error) {
	b, err := w.Prepare(inputs)
	if err != nil {
		return nil, err
	}
	return w.WriteBatch(ctx, b)
}

// WriteBatch writes a batch from Prepare, as Write does. A transaction that
// loses the race for an idempotency key to a concurrent writer runs again
// after a short jittered pause (at most WriteAttemptsDefault runs, within
// ctx) and then answers with the winner's original. Other failures are
// returned as they are: the store already retried what was transient.
func (w *Writer) WriteBatch(ctx context.Context, b *Batch) ([]Result, error) {
	m := &member{prep: b.prep, traceParent: tracing.TraceParent(ctx)}
	err := w.retryTx(ctx, func(ctx context.Context, tx Tx, redraw bool) error {
		if err := w.writeGroup(ctx, tx, []*member{m}, redraw); err != nil {
			return err
		}
		return m.err // nothing of m was inserted; roll back
	})
	if err != nil {
		return nil, err
	}
	return m.results, nil
}

// retryTx runs fn in one store transaction, and again (at most
// WriteAttemptsDefault runs, within ctx, after a short jittered pause) when
// it loses the race for an idempotency key to a concurrent writer or an
// event id is taken (ErrDuplicateKey); redraw is false on the first run
// and true on the others, which must draw new event ids.
func (w *Writer) retryTx(ctx context.Context, fn func(ctx context.Context, tx Tx, redraw bool) error) error {
	if err := w.checkPartitions(ctx); err != nil {
		return err
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(5*time.Millisecond),
		backoff.WithMaxInterval(100*time.Millisecond), backoff.WithMaxElapsedTime(0))
	runs := 0
	op := func() error {
		redraw := runs > 0
		runs++
		err := w.db.WriteTx(ctx, func(ctx context.Context, tx Tx) error { return fn(ctx, tx, redraw) })
		if err != nil && !errors.Is(err, ErrDuplicateKey) {
			return backoff.Permanent(err)
		}
		return err
	}
	return backoff.Retry(op, backoff.WithContext(backoff.WithMaxRetries(bo, WriteAttemptsDefault-1), ctx))
}

// WriteInTx stores inputs inside a transaction the caller runs, so the
// caller's own writes commit or abort together with them. tx comes from the
// store: mongostore.Store.Tx for a MongoDB session, sqlitestore.Store.Tx for
// a *sql.Tx. A concurrent writer of the same key makes it fail with an error
// wrapping ErrDuplicateKey; run the whole transaction again then. After
// any error, roll the transaction back: some of the inputs may have been
// written before the failure.
func (w *Writer) WriteInTx(ctx context.Context, tx Tx, inputs []Input) ([]Result, error) {
	prep, err := w.prepareAll(inputs, true)
	if err != nil {
		return nil, err
	}
	if err := w.checkPartitions(ctx); err != nil {
		return nil, err
	}
	m := &member{prep: prep, traceParent: tracing.TraceParent(ctx)}
	if err := w.writeGroup(ctx, tx, []*member{m}, false); err != nil {
		return nil, err
	}
	return m.results, m.err
}

// member is one all-or-nothing part of a transaction: a request's inputs.
// writeGroup sets either results (in input order) or err (nothing of the
// member inserted).
type member struct {
	prep    []prepared
	results []Result
	err     error
	// traceParent is the trace context of the request (internal/tracing),
	// stored with its originals and entries; "" when it is not traced.
	traceParent string
}

// writeGroup writes members in tx: each is all or nothing for itself, the
// others still go in. An input whose key is already stored, or inserted by
// an earlier member or an earlier input of the same member, with the same
// content is a Duplicate of that original; with other content its member
// gets a *MismatchError and is left out. It returns an error only for the
// transaction as a whole (then nothing may be committed); it is repeatable,
// as a Transactor may run it again. With redraw the originals get new event
// ids rather than their drafts' (a run after an id was taken).
func (w *Writer) writeGroup(ctx context.Context, tx Tx, members []*member, redraw bool) error {
	hashed, err := hashedKeysStored(ctx, tx, members)
	if err != nil {
		return err
	}
	var keys []string
	inputs := 0
	for _, m := range members {
		m.results, m.err = nil, nil
		inputs += len(m.prep)
		for _, p := range m.prep {
			keys = append(keys, p.key)
			if p.hashedClientKey != "" && hashed[p.client] {
				keys = append(keys, ClientKey(p.client, p.hashedClientKey))
			}
		}
	}
	known, err := tx.LookupKeys(ctx, keys)
	if err != nil {
		return fmt.Errorf("error looking up idempotency keys: %w", err)
	}
	if known == nil {
		known = map[string]KeyRecord{}
	}
	now := w.now().UTC().Truncate(time.Millisecond)
	events, entries := make([]Event, 0, inputs), make([]Entry, 0, inputs)
	for _, m := range members {
		res, evs, ens, err := w.plan(m.prep, known, now, m.traceParent, redraw)
		if err != nil {
			m.err = err
			continue
		}
		m.results = res
		events, entries = append(events, evs...), append(entries, ens...)
	}
	if len(events) == 0 {
		return nil
	}
	if err := tx.InsertEvents(ctx, events); err != nil {
		return fmt.Errorf("error inserting originals: %w", err)
	}
	if err := w.faults.Check(faultBetweenInserts); err != nil {
		return err
	}
	if err := tx.InsertEntries(ctx, entries); err != nil {
		return fmt.Errorf("error inserting outbox entries: %w", err)
	}
	return nil
}

// hashedKeysStored returns, for the namespace (prepared.client) of each
// keyless input of members, whether keys of the 0.1.0 derived form
// (hashedDerivedKey: DerivedKeyPrefix and 64 hex digits, so between
// "derived:0" and "derived:g") are stored in it; all true when tx is no
// KeyRanger.
func hashedKeysStored(ctx context.Context, tx Tx, members []*member) (map[string]bool, error) {
	out := map[string]bool{}
	kr, probe := tx.(KeyRanger)
	for _, m := range members {
		for _, p := range m.prep {
			if _, seen := out[p.client]; seen || p.hashedClientKey == "" {
				continue
			}
			if !probe {
				out[p.client] = true
				continue
			}
			found, err := kr.AnyKeyBetween(ctx, ClientKey(p.client, DerivedKeyPrefix+"0"), ClientKey(p.client, DerivedKeyPrefix+"g"))
			if err != nil {
				return nil, fmt.Errorf("error looking up idempotency keys: %w", err)
			}
			out[p.client] = found
		}
	}
	return out, nil
}

// stored returns the original known under p's key, or, for a derived key,
// under its form up to 0.1.0 (prepared.hashedClientKey), with the key as
// the client knows it.
func stored(known map[string]KeyRecord, p prepared) (KeyRecord, string, bool) {
	if k, ok := known[p.key]; ok {
		return k, p.clientKey, true
	}
	if p.hashedClientKey != "" {
		if k, ok := known[ClientKey(p.client, p.hashedClientKey)]; ok {
			return k, p.hashedClientKey, true
		}
	}
	return KeyRecord{}, "", false
}

// plan decides what each input of one member is, against the keys known
// so far (stored, or inserted by earlier members of the group), and returns
// the member's results with the originals and entries to insert, which it
// adds to known. With a *MismatchError it leaves known as it was.
func (w *Writer) plan(prep []prepared, known map[string]KeyRecord, now time.Time, traceParent string, redraw bool) ([]Result, []Event, []Entry, error) {
	results := make([]Result, len(prep))
	mine := make(map[string]int, len(prep)) // key -> index of the input of this member that inserts it
	events, entries := make([]Event, 0, len(prep)), make([]Entry, 0, len(prep))
	for i, p := range prep {
		if j, ok := mine[p.key]; ok {
			if prep[j].hash != p.hash {
				return nil, nil, nil, &MismatchError{Key: p.clientKey, Index: i, OtherIndex: j}
			}
			results[i] = Result{ID: results[j].ID, IdempotencyKey: p.clientKey, Duplicate: true}
			continue
		}
		if k, clientKey, ok := stored(known, p); ok {
			if k.ContentHash != p.hash {
				return nil, nil, nil, &MismatchError{Key: clientKey, ExistingID: k.ID, Index: i, OtherIndex: -1}
			}
			results[i] = Result{ID: k.ID, IdempotencyKey: clientKey, Duplicate: true}
			continue
		}
		ev, entry := w.record(p, now, traceParent, redraw)
		mine[p.key] = i
		events = append(events, ev)
		entries = append(entries, entry)
		results[i] = Result{ID: ev.ID, IdempotencyKey: p.clientKey}
	}
	for _, ev := range events {
		known[ev.IdempotencyKey] = KeyRecord{ID: ev.ID, ContentHash: ev.ContentHash}
	}
	return results, events, entries, nil
}

// record builds the original and the outbox entry for a prepared input
// (prepareAll with drafts), created at now, both with the trace context of
// its request: from its draft, or with redraw from a new one.
func (w *Writer) record(p prepared, now time.Time, traceParent string, redraw bool) (Event, Entry) {
	d := p.draft
	if redraw {
		d = w.draft(p)
	}
	ev := Event{
		ID: d.id, IdempotencyKey: p.key, Client: p.client, SourceKey: p.sourceKey, DeviceKey: p.deviceKey,
		Type: p.typ, OccurredAt: p.occurredAt, Payload: p.payload, ContentHash: p.hash, CreatedAt: now,
		TraceParent: traceParent,
	}
	return ev, Entry{EventID: d.id, Stream: d.stream, Partition: d.partition, Message: d.message(now), CreatedAt: now, TraceParent: traceParent}
}

// draft is what record makes of a prepared input that no transaction
// decides: the event id, the entry's stream and partition, and the
// message's JSON but for createdAt. prepareAll makes it in the caller's
// goroutine, so that a group's transaction, which on SQLite holds the
// store's one writer, only joins the message's parts (docs/benchmarks.md,
// "Seventh pass"). The id is drawn then, and so sorts by that time rather
// than the commit's, a few milliseconds earlier at most but for a group
// queued behind a slow store; the original's createdAt is the
// transaction's time, as before.
type draft struct {
	id        string
	stream    string
	partition int
	// msgHead and msgTail are the message's JSON up to createdAt's value
	// and after it (each with the value's quote).
	msgHead, msgTail string
}

// draftCreatedAt stands for createdAt in a draft's message: its JSON
// (draftCreatedAtJSON) is where the draft cuts the message. No field
// before createdAt can hold that text: they are JSON strings, whose quotes
// are escaped, and the payload comes after it.
var draftCreatedAt = time.Date(1, time.January, 1, 0, 0, 0, 1, time.UTC)

const draftCreatedAtJSON = `"createdAt":"0001-01-01T00:00:00.000000001Z"`

// draft makes p's draft with a new event id.
func (w *Writer) draft(p prepared) draft {
	ev := Event{ID: NewEventID(), IdempotencyKey: p.key, SourceKey: p.sourceKey, DeviceKey: p.deviceKey,
		Type: p.typ, OccurredAt: p.occurredAt, Payload: p.payload, CreatedAt: draftCreatedAt}
	head, tail, ok := strings.Cut(ev.MessageWith(OriginOutbox, w.message).Encode(), draftCreatedAtJSON)
	if !ok { // cannot happen (see draftCreatedAt)
		panic("outbox: a message without createdAt")
	}
	return draft{id: ev.ID, stream: w.StreamOf(ev.Type), partition: PartitionOf(ev.SourceKey, ev.DeviceKey, w.partitions),
		msgHead: head + `"createdAt":"`, msgTail: `"` + tail}
}

// message returns the draft's message created at now (UTC, a four-digit
// year: what encoding/json writes as RFC 3339 with nanoseconds, as Encode
// does).
func (d *draft) message(now time.Time) string {
	var buf [len(time.RFC3339Nano) + 8]byte
	at := now.AppendFormat(buf[:0], time.RFC3339Nano)
	var b strings.Builder
	b.Grow(len(d.msgHead) + len(at) + len(d.msgTail))
	b.WriteString(d.msgHead)
	b.Write(at)
	b.WriteString(d.msgTail)
	return b.String()
}

// Records validates inputs and returns the originals and outbox entries that
// Write would insert for them, without reading or writing anything: no
// idempotency lookup, no transaction. It serves bulk loads whose keys are
// known to be new (test fixtures, benchmarks, migrations from another
// store); insert both slices in one transaction (Tx.InsertEvents and
// Tx.InsertEntries). Write is the safe path.
func (w *Writer) Records(inputs []Input) ([]Event, []Entry, error) {
	prep, err := w.prepareAll(inputs, true)
	if err != nil {
		return nil, nil, err
	}
	now := w.now().UTC().Truncate(time.Millisecond)
	events, entries := make([]Event, len(prep)), make([]Entry, len(prep))
	for i, p := range prep {
		events[i], entries[i] = w.record(p, now, "", false)
	}
	return events, entries, nil
}
