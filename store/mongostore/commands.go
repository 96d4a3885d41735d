package mongostore

import (
	"context"
	"maps"
	"sync"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/event"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// CommandCounter counts the commands a store sends, by command name
// (Options.Commands). On a server it counts every command the driver
// sends, with the driver's command monitor (event.CommandMonitor): a
// cursor's getMores, a transaction's commit and abort, a session's end;
// the driver's handshakes and heartbeats are not commands of the store.
// lungo has no wire protocol, so there it counts at the engine's boundary:
// each call of a collection's method, named after the command the driver
// sends for it ("insert" for an InsertMany, "aggregate" for a
// CountDocuments), and each commit and abort; a lungo cursor sends no
// getMore. It is safe for concurrent use.
type CommandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts one command called name.
func (c *CommandCounter) Add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

// Counts returns the commands counted so far, by name.
func (c *CommandCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// Total returns how many commands were counted.
func (c *CommandCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.n {
		total += n
	}
	return total
}

// Reset forgets the counts.
func (c *CommandCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = nil
}

// monitor is the driver's command monitor that counts into c.
func (c *CommandCounter) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) { c.Add(e.CommandName) }}
}

// lungoCommand counts, on lungo, a command the driver would send (a
// commit, an abort); on a server the monitor counts them.
func (s *Store) lungoCommand(name string) {
	if s.lungo && s.opts.Commands != nil {
		s.opts.Commands.Add(name)
	}
}

// countedCollection counts the calls of the collection methods the store
// uses on lungo, named as the driver's commands.
type countedCollection struct {
	lungo.ICollection
	c *CommandCounter
}

func (cc countedCollection) CountDocuments(ctx context.Context, filter any, opts ...*options.CountOptions) (int64, error) {
	cc.c.Add("aggregate")
	return cc.ICollection.CountDocuments(ctx, filter, opts...)
}

func (cc countedCollection) DeleteMany(ctx context.Context, filter any, opts ...*options.DeleteOptions) (*mongo.DeleteResult, error) {
	cc.c.Add("delete")
	return cc.ICollection.DeleteMany(ctx, filter, opts...)
}

func (cc countedCollection) EstimatedDocumentCount(ctx context.Context, opts ...*options.EstimatedDocumentCountOptions) (int64, error) {
	cc.c.Add("count")
	return cc.ICollection.EstimatedDocumentCount(ctx, opts...)
}

func (cc countedCollection) Find(ctx context.Context, filter any, opts ...*options.FindOptions) (lungo.ICursor, error) {
	cc.c.Add("find")
	return cc.ICollection.Find(ctx, filter, opts...)
}

func (cc countedCollection) FindOne(ctx context.Context, filter any, opts ...*options.FindOneOptions) lungo.ISingleResult {
	cc.c.Add("find")
	return cc.ICollection.FindOne(ctx, filter, opts...)
}

func (cc countedCollection) FindOneAndUpdate(ctx context.Context, filter, update any, opts ...*options.FindOneAndUpdateOptions) lungo.ISingleResult {
	cc.c.Add("findAndModify")
	return cc.ICollection.FindOneAndUpdate(ctx, filter, update, opts...)
}

func (cc countedCollection) InsertMany(ctx context.Context, docs []any, opts ...*options.InsertManyOptions) (*mongo.InsertManyResult, error) {
	cc.c.Add("insert")
	return cc.ICollection.InsertMany(ctx, docs, opts...)
}

func (cc countedCollection) InsertOne(ctx context.Context, doc any, opts ...*options.InsertOneOptions) (*mongo.InsertOneResult, error) {
	cc.c.Add("insert")
	return cc.ICollection.InsertOne(ctx, doc, opts...)
}

func (cc countedCollection) UpdateMany(ctx context.Context, filter, update any, opts ...*options.UpdateOptions) (*mongo.UpdateResult, error) {
	cc.c.Add("update")
	return cc.ICollection.UpdateMany(ctx, filter, update, opts...)
}

func (cc countedCollection) UpdateOne(ctx context.Context, filter, update any, opts ...*options.UpdateOptions) (*mongo.UpdateResult, error) {
	cc.c.Add("update")
	return cc.ICollection.UpdateOne(ctx, filter, update, opts...)
}

func (cc countedCollection) Watch(ctx context.Context, pipeline any, opts ...*options.ChangeStreamOptions) (lungo.IChangeStream, error) {
	cc.c.Add("aggregate")
	return cc.ICollection.Watch(ctx, pipeline, opts...)
}
