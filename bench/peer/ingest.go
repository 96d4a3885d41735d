package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of a request, outboxd's defaults.
const (
	maxBatch = 500
	maxBody  = 1 << 20
)

// input is one event as the API takes it.
type input struct {
	SourceKey  string          `json:"sourceKey"`
	DeviceKey  string          `json:"deviceKey"`
	Type       string          `json:"type"`
	OccurredAt string          `json:"occurredAt"`
	Payload    json.RawMessage `json:"payload"`
}

// event is an original as stored and as the stream message carries it.
type event struct {
	ID             string          `json:"id"`
	IdempotencyKey string          `json:"idempotencyKey"`
	SourceKey      string          `json:"sourceKey"`
	DeviceKey      string          `json:"deviceKey"`
	Type           string          `json:"type"`
	OccurredAt     time.Time       `json:"occurredAt"`
	Payload        json.RawMessage `json:"payload"`
	CreatedAt      time.Time       `json:"createdAt"`
}

// result is the answer for one event, outboxd's.
type result struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotencyKey"`
	Duplicate      bool   `json:"duplicate"`
}

// validate checks in and returns the original it makes.
func (in *input) validate(now time.Time) (*event, error) {
	switch {
	case in.SourceKey == "":
		return nil, errors.New("sourceKey is required")
	case in.DeviceKey == "":
		return nil, errors.New("deviceKey is required")
	case len(in.Payload) == 0 || in.Payload[0] != '{':
		return nil, errors.New("payload must be a JSON object")
	}
	at, err := time.Parse(time.RFC3339Nano, in.OccurredAt)
	if err != nil {
		return nil, fmt.Errorf("occurredAt: %w", err)
	}
	typ := in.Type
	if typ == "" {
		typ = "reading"
	}
	key := in.SourceKey + ":" + in.DeviceKey + ":" + at.UTC().Format(time.RFC3339Nano)
	return &event{ID: watermill.NewULID(), IdempotencyKey: key, SourceKey: in.SourceKey, DeviceKey: in.DeviceKey,
		Type: typ, OccurredAt: at.UTC(), Payload: in.Payload, CreatedAt: now}, nil
}

// ingester serves the ingest API.
type ingester struct {
	pool         *pgxpool.Pool
	stream       string
	forwardTopic string
	logger       watermill.LoggerAdapter
}

func (g *ingester) single(w http.ResponseWriter, r *http.Request) {
	var in input
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ev, err := in.validate(time.Now().UTC())
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	res, err := g.store(r.Context(), []*event{ev})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	status := http.StatusCreated
	if res[0].Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, res[0])
}

func (g *ingester) batch(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Events []input `json:"events"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if len(body.Events) == 0 || len(body.Events) > maxBatch {
		http.Error(w, fmt.Sprintf("a batch holds 1 to %d events", maxBatch), http.StatusUnprocessableEntity)
		return
	}
	now := time.Now().UTC()
	evs := make([]*event, len(body.Events))
	for i := range body.Events {
		ev, err := body.Events[i].validate(now)
		if err != nil {
			http.Error(w, fmt.Sprintf("events[%d]: %v", i, err), http.StatusUnprocessableEntity)
			return
		}
		evs[i] = ev
	}
	res, err := g.store(r.Context(), evs)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Results []result `json:"results"`
	}{res})
}

// insertSQL inserts originals; a key stored already is skipped.
const insertSQL = `
INSERT INTO peer_originals (id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[]::jsonb[], $8::timestamptz[])
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id`

// store writes the originals and their messages in one transaction: the
// messages go into the outbox table through watermill-sql's publisher on
// that transaction, enveloped for the Forwarder.
func (g *ingester) store(ctx context.Context, evs []*event) ([]result, error) {
	cols := make([][]string, 5)
	payloads := make([]string, len(evs))
	occurred, created := make([]time.Time, len(evs)), make([]time.Time, len(evs))
	for i, ev := range evs {
		for c, v := range []string{ev.ID, ev.IdempotencyKey, ev.SourceKey, ev.DeviceKey, ev.Type} {
			cols[c] = append(cols[c], v)
		}
		payloads[i], occurred[i], created[i] = string(ev.Payload), ev.OccurredAt, ev.CreatedAt
	}
	res := make([]result, len(evs))
	err := pgx.BeginFunc(ctx, g.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, insertSQL, cols[0], cols[1], cols[2], cols[3], cols[4], occurred, payloads, created)
		if err != nil {
			return fmt.Errorf("error inserting the originals: %w", err)
		}
		inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("error inserting the originals: %w", err)
		}
		isNew := make(map[string]bool, len(inserted))
		for _, id := range inserted {
			isNew[id] = true
		}
		msgs := make([]*message.Message, 0, len(inserted))
		var dupKeys []string
		for i, ev := range evs {
			res[i] = result{ID: ev.ID, IdempotencyKey: ev.IdempotencyKey, Duplicate: !isNew[ev.ID]}
			if !isNew[ev.ID] {
				dupKeys = append(dupKeys, ev.IdempotencyKey)
				continue
			}
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			msgs = append(msgs, message.NewMessage(ev.ID, b))
		}
		if err := g.answerDuplicates(ctx, tx, dupKeys, res); err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, g.logger)
		if err != nil {
			return err
		}
		out := forwarder.NewPublisher(pub, forwarder.PublisherConfig{ForwarderTopic: g.forwardTopic})
		if err := out.Publish(g.stream, msgs...); err != nil {
			return fmt.Errorf("error publishing into the outbox: %w", err)
		}
		return nil
	})
	return res, err
}

// answerDuplicates gives the duplicates of res the id stored for their key.
func (g *ingester) answerDuplicates(ctx context.Context, tx pgx.Tx, keys []string, res []result) error {
	if len(keys) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT idempotency_key, id FROM peer_originals WHERE idempotency_key = ANY($1)`, keys)
	if err != nil {
		return fmt.Errorf("error reading the duplicates: %w", err)
	}
	ids := map[string]string{}
	var k, id string
	_, err = pgx.ForEachRow(rows, []any{&k, &id}, func() error { ids[k] = id; return nil })
	if err != nil {
		return fmt.Errorf("error reading the duplicates: %w", err)
	}
	for i := range res {
		if res[i].Duplicate {
			res[i].ID = ids[res[i].IdempotencyKey]
		}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// migrate creates the originals table and the outbox's tables (watermill-sql's
// messages and offsets tables for the forward topic).
func migrate(ctx context.Context, pool *pgxpool.Pool, forwardTopic string, logger watermill.LoggerAdapter) error {
	_, err := pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS peer_originals (
	id text PRIMARY KEY,
	idempotency_key text NOT NULL UNIQUE,
	source_key text NOT NULL,
	device_key text NOT NULL,
	type text NOT NULL,
	occurred_at timestamptz NOT NULL,
	payload jsonb NOT NULL,
	created_at timestamptz NOT NULL,
	synced_at timestamptz
)`)
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("error creating peer_originals: %w", err)
	}
	sub, err := newOutboxSubscriber(pool, PollIntervalDefault, logger)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(forwardTopic); err != nil {
		return fmt.Errorf("error creating the outbox's tables: %w", err)
	}
	return nil
}
