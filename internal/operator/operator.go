package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Limits of the actions.
const (
	// ChunkDefault is how many originals one replay or verify call handles
	// unless its query says otherwise, and how many dead letters a listing
	// returns.
	ChunkDefault = 500
	// ChunkMax is the most a query may ask for.
	ChunkMax = 5000
)

// ReplayDurationBuckets are the buckets of outboxd_replay_duration_seconds:
// 1 second to 2 hours, with the 30-minute recovery target (1800) a bound
// of its own.
var ReplayDurationBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 2700, 3600, 7200}

// ReadModel is what the actions need of any read model: which originals
// it holds (readmodel.DB for the demo tables, readmodel.Keyed for a read
// model whose projector answers that). What else a read model offers is
// optional: the interfaces below, which readmodel.DB implements; without
// them verify checks only that synced originals are projected, and repair
// only re-publishes those that are not.
type ReadModel interface {
	Projected(ctx context.Context, ids []string) (map[string]bool, error)
}

// RowReadModel lists a read model's rows by occurredAt (verify's rows
// phase: rows without an original).
type RowReadModel interface {
	Rows(ctx context.Context, from, to *time.Time, after string, limit int) ([]readmodel.Row, error)
	CountRows(ctx context.Context, from, to *time.Time) (int64, error)
}

// StatsReadModel compares and recomputes derived rows (the daily
// statistics): verify's stats phase, and repair before a re-publish.
type StatsReadModel interface {
	RecomputeStats(ctx context.Context, keys []readmodel.StatsKey) error
	StatsDrift(ctx context.Context, from, to *time.Time, limit int) ([]readmodel.StatsDrift, error)
}

// RecomputeReadModel recomputes what a read model derives from the rows
// of originals (readmodel.Keyed: a projection file's -- recompute:
// statements): repair runs it for the originals it re-publishes, before it
// does, so that each is counted once when projected again. It returns how
// many of events it recomputed for (0: nothing to recompute).
type RecomputeReadModel interface {
	Recompute(ctx context.Context, events []*outbox.Event) (int, error)
}

// UnprojectReadModel removes originals' rows (replay --rebuild). A read
// model that also has CanUnproject is asked first.
type UnprojectReadModel interface {
	Unproject(ctx context.Context, ids []string) (int64, error)
}

// LookupReadModel shows an original's row and statistics (the journey).
type LookupReadModel interface {
	Lookup(ctx context.Context, eventID, idempotencyKey string, key readmodel.StatsKey) (*readmodel.Row, *readmodel.Stats, error)
}

// Config configures an Operator. Store is required; an action that needs a
// backend the Config lacks fails with ErrNotAvailable.
type Config struct {
	// Store is the system of record. Required.
	Store store.Store
	// Redis holds the stream and the dead-letter stream. Without it the
	// dead-letter actions, replay (other than a dry run), verify with
	// repair and the journey are not available.
	Redis *stream.Client
	// ReadModel is the read model in PostgreSQL (readmodel.New, or
	// readmodel.NewKeyed). Without it verify, replay with rebuild and the
	// journey are not available.
	ReadModel ReadModel
	// Message says what the replays' messages carry besides the
	// original's name and type (the payload), as ingest's do. Defaults to
	// nothing more.
	Message *outbox.MessageOptions
	// Unchecked says why this instance's read model cannot be checked (its
	// projector does not tell which originals it holds), when ReadModel is
	// nil for that reason: verify and replay --rebuild then answer
	// ErrNotAvailable with it, and the journey leaves the read model out.
	Unchecked string
	// Stream and Group name the stream (its keys are stream.NewKeys(Stream,
	// Group)) and the worker's consumer group. Default to
	// outbox.StreamDefault and stream.GroupDefault.
	Stream, Group string
	// Partitions is the stream's number of partitions (--partitions):
	// replays and DLQ replays go into the replay lane of each original's
	// partition. Defaults to 1.
	Partitions int
	// Routes sends the replay of an original of a routed type to the
	// replay lane of its route's stream (with Partitions partitions too),
	// where the writer recorded its outbox entry: give it the writer's
	// routes (--route). Defaults to none: every replay goes to Stream's.
	// Verify and repair skip the originals it routes to a stream outside
	// ProjectedStreams: another deployment's read model holds them.
	Routes outbox.Routes
	// ProjectedStreams are the streams whose workers project into
	// ReadModel (work: --stream; dev: every routed stream too). Defaults
	// to Stream alone.
	ProjectedStreams []string
	// Role names this instance's role in the detail of ErrNotAvailable, so
	// the operator knows to ask another. Defaults to "this role".
	Role string
	// EventRetention is the store's retention of synced originals
	// (--event-retention): a read-model row created before now minus it
	// whose original is gone was expired, not lost, and verify does not
	// report it as drift (VerifyResult.Expired counts it). Defaults to 0:
	// originals are kept, and every row without one is drift.
	EventRetention time.Duration
	// Now tells the time for ages. Defaults to time.Now.
	Now func() time.Time
	// Registerer receives outboxd_admin_published_total{origin}. Defaults
	// to none.
	Registerer prometheus.Registerer
}

// Operator performs the operator actions: it lists, replays and drops
// dead letters, replays originals by boundary, compares the originals with
// the read model (and repairs what differs) and follows one original
// through the pipeline. Every action that repairs re-enters the normal path
// (a stream message the worker projects idempotently); none writes a
// read-model row itself. It is safe for concurrent use.
type Operator struct {
	cfg       Config
	keys      stream.Keys
	scope     checkScope
	publisher *stream.Publisher // nil without Redis
	logger    *zap.Logger
	published *prometheus.CounterVec
	// replayDuration is outboxd_replay_duration_seconds.
	replayDuration prometheus.Observer
}

// New returns the operator actions over cfg's backends. A nil logger logs
// nothing.
func New(cfg *Config, logger *zap.Logger) (*Operator, error) {
	if cfg == nil || cfg.Store == nil {
		return nil, errors.New("operator: a store is required")
	}
	c := *cfg
	if err := c.Routes.Validate(); err != nil {
		return nil, fmt.Errorf("invalid operator config: Routes: %w", err)
	}
	c.Stream = cmp.Or(c.Stream, outbox.StreamDefault)
	c.Group = cmp.Or(c.Group, stream.GroupDefault)
	c.Role = cmp.Or(c.Role, "this role")
	if c.Now == nil {
		c.Now = time.Now
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	f := ometrics.NewFactory(c.Registerer, "admin", c.Stream)
	published := f.CounterVec("published_total", "Originals re-published by operator actions, by origin (replay, dlq-replay).", "origin")
	rf := ometrics.NewFactory(c.Registerer, "replay", c.Stream)
	replayDuration := rf.Histogram("duration_seconds",
		"Duration of each replay (outboxd replay, the console's), from its first chunk to the publish of its last; the replay lane's drain follows (outboxd_replay_lag).",
		ReplayDurationBuckets)
	if err := cmp.Or(f.Err(), rf.Err()); err != nil {
		return nil, fmt.Errorf("error registering operator metrics: %w", err)
	}
	o := &Operator{cfg: c, keys: stream.NewKeys(c.Stream, c.Group), published: published, replayDuration: replayDuration,
		scope:  newCheckScope(c.ReadModel, c.Routes, c.Stream, c.ProjectedStreams),
		logger: logger.Named("admin").With(zap.String("stream", c.Stream))}
	if c.Redis != nil {
		// Replays go into the replay lane, which the workers read only when
		// the stream has nothing for them, at a bounded rate: live events
		// keep their latency. Each goes to its type's stream's lane.
		o.publisher = c.Redis.Publisher(o.keys.Split(c.Partitions).ReplayLane(), &stream.PublisherConfig{Message: c.Message, Routes: c.Routes}, nil)
	}
	return o, nil
}

// Role returns the role this instance runs (Config.Role).
func (o *Operator) Role() string { return o.cfg.Role }

// The kinds of Error, matched with errors.Is.
var (
	// ErrInvalid: a query is invalid; Error.Fields name what is wrong.
	ErrInvalid = errors.New("invalid request")
	// ErrNotFound: the dead letter or original asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNotAvailable: this instance lacks the backend the action needs
	// (Error.Backend); ask an instance that has it.
	ErrNotAvailable = errors.New("not available on this instance")
	// ErrUnavailable: a backend (Error.Backend) failed or cannot be
	// reached now; what was done so far is logged and the action can run
	// again.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrCancelled: the replay a chunk belongs to was cancelled
	// (CancelReplay); start a new one to replay again.
	ErrCancelled = errors.New("cancelled")
)

// Backends named by Error.Backend.
const (
	BackendRedis    = "redis"
	BackendPostgres = "postgres"
	BackendStore    = "store"
)

// Error is an error of an action that a caller can act on: Kind (one of
// ErrInvalid, ErrNotFound, ErrNotAvailable, ErrUnavailable, ErrCancelled) says what went
// wrong and errors.Is matches it. Other errors of an action are failures
// of its own (a store error other than an outage, say).
type Error struct {
	Kind error
	// Fields name the invalid fields and why (ErrInvalid).
	Fields []FieldError
	// Backend names the missing or failing backend: BackendRedis,
	// BackendPostgres or BackendStore (ErrNotAvailable, ErrUnavailable).
	Backend string
	// Detail says what happened, for a person (ErrNotFound,
	// ErrNotAvailable).
	Detail string
	// Err is the cause, if any.
	Err error
}

func (e *Error) Error() string {
	switch {
	case errors.Is(e.Kind, ErrInvalid):
		parts := make([]string, len(e.Fields))
		for i, f := range e.Fields {
			parts[i] = f.Field + " " + f.Reason
		}
		return "invalid request: " + strings.Join(parts, "; ")
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Backend, e.Err)
	}
	return e.Detail
}

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Invalid returns an ErrInvalid error that names field, with the reason
// format says.
func Invalid(field, format string, args ...any) error {
	return &Error{Kind: ErrInvalid, Fields: []FieldError{{Field: field, Reason: fmt.Sprintf(format, args...)}}}
}

// ValidateLimit checks the limit of a query (a replay's or verify's chunk,
// a DLQ page): from 1 to ChunkMax. Its error is Invalid's, of the field
// "limit".
func ValidateLimit(n int) error {
	if n < 1 || n > ChunkMax {
		return Invalid("limit", "must be from 1 to %d", ChunkMax)
	}
	return nil
}

// FieldError is one invalid field of a query: its name as the admin API
// spells it, and what is wrong with it.
type FieldError struct {
	Field  string
	Reason string
}

func notFound(detail string) error { return &Error{Kind: ErrNotFound, Detail: detail} }

func (o *Operator) notAvailable(backend, what string) error {
	return &Error{Kind: ErrNotAvailable, Backend: backend, Detail: fmt.Sprintf(
		"this instance (%s) has no %s; run the command against an instance of `outboxd work` or `outboxd dev`", o.cfg.Role, what)}
}

func (o *Operator) needRedis() error {
	if o.cfg.Redis == nil {
		return o.notAvailable(BackendRedis, "Redis")
	}
	return nil
}

func (o *Operator) needReadModel() error {
	if o.cfg.ReadModel == nil && o.cfg.Unchecked != "" {
		return &Error{Kind: ErrNotAvailable, Backend: BackendPostgres, Detail: "this read model cannot be checked: " + o.cfg.Unchecked}
	}
	if o.cfg.ReadModel == nil {
		return o.notAvailable(BackendPostgres, "PostgreSQL")
	}
	return nil
}

// unavailable marks err, of backend, as ErrUnavailable; nil stays nil.
func unavailable(backend, what string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: ErrUnavailable, Backend: backend, Err: fmt.Errorf("error %s: %w", what, err)}
}

func redisErr(what string, err error) error { return unavailable(BackendRedis, what, err) }

func pgErr(what string, err error) error { return unavailable(BackendPostgres, what, err) }

// storeErr wraps an error of the store: an outage is ErrUnavailable, any
// other error is the action's own failure.
func storeErr(what string, err error) error {
	if store.IsUnavailable(err) {
		return unavailable(BackendStore, what, err)
	}
	return fmt.Errorf("error %s: %w", what, err)
}

// publish adds the messages of events, with origin, to the replay lane
// (stream.Keys.Replay) in one round trip, and returns which were added (by index); err is set when any
// was not.
func (o *Operator) publish(ctx context.Context, events []*outbox.Event, origin outbox.Origin) ([]bool, error) {
	ok := make([]bool, len(events))
	if len(events) == 0 {
		return ok, nil
	}
	err := o.publisher.PublishEvents(ctx, events, origin)
	n := 0
	for i := range ok {
		if ok[i] = stream.Added(err, i); ok[i] {
			n++
		}
	}
	o.published.WithLabelValues(string(origin)).Add(float64(n))
	return ok, redisErr(fmt.Sprintf("publishing %d originals", len(events)), err)
}

// Event is an original with its payload, as GET /v1/events/{id} shows it
// and a dead letter's detail (DeadLetter.Event). Times are UTC.
type Event struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	// Client is the ingest client that sent the original (absent: the
	// default client).
	Client       string              `json:"client,omitempty"`
	SourceKey    string              `json:"sourceKey"`
	DeviceKey    string              `json:"deviceKey"`
	Type         string              `json:"type"`
	OccurredAt   time.Time           `json:"occurredAt"`
	Payload      json.RawMessage     `json:"payload"`
	CreatedAt    time.Time           `json:"createdAt"`
	State        string              `json:"state"`
	SyncedAt     *time.Time          `json:"syncedAt"`
	RequeueCount int64               `json:"requeueCount"`
	SyncFailure  *outbox.SyncFailure `json:"syncFailure"`
}

// EventOf returns the view of ev.
func EventOf(ev *outbox.Event) Event {
	return Event{
		ID: ev.ID, IdempotencyKey: ev.IdempotencyKey, Client: ev.Client, SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey,
		Type: ev.Type, OccurredAt: ev.OccurredAt.UTC(), Payload: payloadOrEmpty(ev.Payload), CreatedAt: ev.CreatedAt.UTC(),
		State: ev.State(), SyncedAt: utc(ev.SyncedAt), RequeueCount: ev.RequeueCount, SyncFailure: ev.SyncFailure,
	}
}

// utc returns t in UTC; nil stays nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// payloadOrEmpty returns p, or {} when the original holds none.
func payloadOrEmpty(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage("{}")
	}
	return p
}
