// Package mongodb opens MongoDB through one code path on two engines: a real
// replica set through the official driver, or the embedded lungo engine, and
// classifies the errors of both in one place.
package mongodb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/readpref"
	"go.mongodb.org/mongo-driver/mongo/writeconcern"
)

// EmbeddedPrefix starts a URI that selects the embedded engine.
const EmbeddedPrefix = "embedded:"

// EmbeddedMemory selects the embedded engine with an in-memory store.
const EmbeddedMemory = "embedded:memory"

// ErrLocked is returned when another process holds the embedded store's file.
var ErrLocked = errors.New("embedded store is locked by another process")

// ErrEmbeddedNotAllowed is returned when a role other than dev asks for the
// embedded engine.
var ErrEmbeddedNotAllowed = errors.New("the embedded engine serves one process only, so only the dev role may use it; pass --mongo-uri mongodb://… (a replica set) for this role")

// Options tune the embedded engine; the zero value means lungo's defaults.
type Options struct {
	// MaxOplogSize bounds the embedded oplog. Defaults to lungo's 1000 entries.
	MaxOplogSize int
	// MinOplogAge keeps oplog entries younger than this even past
	// MaxOplogSize (lungo works in whole seconds). Defaults to lungo's
	// 5 minutes, or to "no age guard" when MaxOplogSize is set, so that a
	// small MaxOplogSize really bounds the oplog (tests of history loss).
	MinOplogAge time.Duration
	// ExpireInterval drives TTL indexes on the embedded engine. Defaults to 60s.
	ExpireInterval time.Duration
}

// Conn is an open MongoDB connection on either engine.
type Conn struct {
	Client lungo.IClient
	engine *lungo.Engine
	lock   *os.File
}

// IsEmbedded reports whether uri selects the embedded engine.
func IsEmbedded(uri string) bool { return strings.HasPrefix(uri, EmbeddedPrefix) }

// ValidateURI checks the form of a --mongo-uri value.
func ValidateURI(uri string) error {
	switch {
	case uri == EmbeddedMemory:
		return nil
	case IsEmbedded(uri):
		if strings.TrimPrefix(uri, EmbeddedPrefix) == "" {
			return fmt.Errorf("embedded URI needs a path: embedded:memory or embedded:PATH")
		}
		return nil
	case strings.HasPrefix(uri, "mongodb://"), strings.HasPrefix(uri, "mongodb+srv://"):
		if _, err := url.Parse(uri); err != nil {
			return fmt.Errorf("invalid MongoDB URI %s: %w", Redact(uri), err)
		}
		return nil
	default:
		return fmt.Errorf("MongoDB URI must start with mongodb://, mongodb+srv:// or embedded: (got %q)", Redact(uri))
	}
}

// Open connects to uri. For a real server it pings with a short deadline and
// uses majority write concern; for the embedded engine it opens the store
// (taking an exclusive lock on a file store).
func Open(ctx context.Context, uri string, opts *Options) (*Conn, error) {
	if err := ValidateURI(uri); err != nil {
		return nil, err
	}
	if opts == nil {
		opts = &Options{}
	}
	if !IsEmbedded(uri) {
		client, err := lungo.Connect(ctx, options.Client().ApplyURI(uri).
			SetWriteConcern(writeconcern.Majority()).
			SetServerSelectionTimeout(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("error connecting to MongoDB at %s: %w", Redact(uri), err)
		}
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := client.Ping(pingCtx, readpref.Primary()); err != nil {
			_ = client.Disconnect(context.Background())
			return nil, fmt.Errorf("error reaching MongoDB at %s (transactions and change streams need a replica set): %w", Redact(uri), err)
		}
		var hello bson.M
		if err := client.Database("admin").RunCommand(pingCtx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
			_ = client.Disconnect(context.Background())
			return nil, fmt.Errorf("error asking MongoDB at %s for its topology: %w", Redact(uri), err)
		}
		if err := checkTopology(hello); err != nil {
			_ = client.Disconnect(context.Background())
			return nil, fmt.Errorf("MongoDB at %s: %w", Redact(uri), err)
		}
		return &Conn{Client: client}, nil
	}

	lopts := lungo.Options{MaxOplogSize: opts.MaxOplogSize, ExpireInterval: opts.ExpireInterval}
	if lopts.MaxOplogSize > 0 && lopts.MinOplogSize == 0 {
		lopts.MinOplogSize = min(100, lopts.MaxOplogSize)
	}
	lopts.MinOplogAge = opts.MinOplogAge
	if lopts.MaxOplogSize > 0 && lopts.MinOplogAge == 0 {
		lopts.MinOplogAge = time.Nanosecond // lungo reads 0 as its 5-minute default
	}
	var lock *os.File
	if uri == EmbeddedMemory {
		lopts.Store = lungo.NewMemoryStore()
	} else {
		path := strings.TrimPrefix(uri, EmbeddedPrefix)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("error creating the folder of embedded store %s: %w", path, err)
		}
		var err error
		lock, err = lockFile(path + ".lock")
		if err != nil {
			return nil, err
		}
		lopts.Store = lungo.NewFileStore(path, 0o644)
	}
	client, engine, err := lungo.Open(ctx, lopts)
	if err != nil {
		if lock != nil {
			_ = lock.Close()
		}
		return nil, fmt.Errorf("error opening embedded store %s: %w", uri, err)
	}
	return &Conn{Client: client, engine: engine, lock: lock}, nil
}

// ErrStandalone is returned for a MongoDB server that is not part of a
// replica set or sharded cluster.
var ErrStandalone = errors.New("a standalone server has no transactions and no change streams; outboxd needs a replica set (a single node is enough: start mongod with --replSet rs0 and run rs.initiate()) or a sharded cluster")

// checkTopology reads a hello reply: a replica set member names its set, a
// mongos says "isdbgrid"; anything else is a standalone server.
func checkTopology(hello bson.M) error {
	if name, _ := hello["setName"].(string); name != "" {
		return nil
	}
	if msg, _ := hello["msg"].(string); msg == "isdbgrid" {
		return nil
	}
	return ErrStandalone
}

// lockFile takes an exclusive, non-blocking flock on path. The kernel drops
// the lock when the process dies, so a crash never leaves a stale lock.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("error opening lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is in use (stop the other outboxd, or point --mongo-uri elsewhere)", ErrLocked, strings.TrimSuffix(path, ".lock"))
		}
		return nil, fmt.Errorf("error locking %s: %w", path, err)
	}
	return f, nil
}

// Close disconnects, closes the embedded engine and releases the file lock.
func (c *Conn) Close(ctx context.Context) error {
	var err error
	if c.engine != nil {
		c.engine.Close()
	} else if c.Client != nil {
		err = c.Client.Disconnect(ctx)
	}
	if c.lock != nil {
		_ = c.lock.Close()
	}
	return err
}

// Redact replaces the password in a URI with "xxxxx". Strings that do not
// parse as URLs are returned with anything between "://" and "@" hidden.
func Redact(uri string) string {
	u, err := url.Parse(uri)
	if err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
		return uri
	}
	if err != nil {
		if i, j := strings.Index(uri, "://"), strings.LastIndex(uri, "@"); i >= 0 && j > i {
			return uri[:i+3] + "xxxxx" + uri[j:]
		}
	}
	return uri
}
