package main

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// newOutboxSubscriber returns watermill-sql's subscriber of the outbox
// table, with the library's PostgreSQL schema and offsets adapters.
func newOutboxSubscriber(pool *pgxpool.Pool, poll time.Duration, logger watermill.LoggerAdapter) (*wsql.Subscriber, error) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     poll,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("error creating the outbox subscriber: %w", err)
	}
	return sub, nil
}

// newForwarder returns Watermill's Forwarder from the outbox table to the
// Redis stream.
func newForwarder(pool *pgxpool.Pool, rdb redis.UniversalClient, cfg *Config, logger watermill.LoggerAdapter) (*forwarder.Forwarder, error) {
	sub, err := newOutboxSubscriber(pool, cfg.PollInterval, logger)
	if err != nil {
		return nil, err
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb}, logger)
	if err != nil {
		return nil, fmt.Errorf("error creating the stream publisher: %w", err)
	}
	fw, err := forwarder.NewForwarder(sub, pub, logger, forwarder.Config{ForwarderTopic: cfg.ForwardTopic})
	if err != nil {
		return nil, fmt.Errorf("error creating the forwarder: %w", err)
	}
	return fw, nil
}
