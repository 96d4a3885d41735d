package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/outbox"
)

// newConsumer returns a router that projects every message of the stream
// into the read model, one PostgreSQL transaction per message.
func newConsumer(pool *pgxpool.Pool, rdb redis.UniversalClient, cfg *Config, logger watermill.LoggerAdapter) (*message.Router, error) {
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: rdb, ConsumerGroup: cfg.Group, Consumer: cfg.Consumer, OldestId: "0",
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("error creating the stream subscriber: %w", err)
	}
	r, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return nil, fmt.Errorf("error creating the router: %w", err)
	}
	p := &projector{pool: pool, proj: readmodel.NewProjector()}
	r.AddConsumerHandler("project", cfg.Stream, sub, p.handle)
	return r, nil
}

// projector is the consumer's handler.
type projector struct {
	pool *pgxpool.Pool
	proj *readmodel.Projector
}

// handle projects one message with outboxd's read-model statement and marks
// its original synced, in one transaction; an error nacks the message.
func (p *projector) handle(msg *message.Message) error {
	var ev event
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return fmt.Errorf("error decoding message %s: %w", msg.UUID, err)
	}
	ctx := msg.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	one := []*outbox.Event{{ID: ev.ID, IdempotencyKey: ev.IdempotencyKey, SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey,
		Type: ev.Type, OccurredAt: ev.OccurredAt, Payload: ev.Payload, CreatedAt: ev.CreatedAt}}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := p.proj.Project(ctx, tx, one); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE peer_originals SET synced_at = now() WHERE id = $1 AND synced_at IS NULL`, ev.ID); err != nil {
			return fmt.Errorf("error marking %s synced: %w", ev.ID, err)
		}
		return nil
	})
}
