package mongostore

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/x/bsonx/bsoncore"
	"go.mongodb.org/mongo-driver/x/mongo/driver/wiremessage"
)

// fakeServer is a MongoDB server of the tests' own: it speaks the wire
// protocol on a loopback port (OP_QUERY for the driver's first handshake,
// OP_MSG for every command after it), so the real driver connects to it
// with its real topology, pool, sessions, transactions, retries and error
// parsing, and it answers each command with what the test scripts (by
// default: success, empty results). It stores nothing. It is a replica set
// primary of set rs0, or a mongos.
//
// Why not the driver's mtest mock deployment: it replaces the topology with
// one fixed connection answering from a queue in order, cannot make an
// answer late or withhold it, and cannot answer by command, which the
// deadline tests need (a commit that keeps failing until the caller's
// deadline, a getMore that never returns).
type fakeServer struct {
	t      testing.TB
	ln     net.Listener
	addr   string
	mongos bool
	done   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	handlers map[string]fakeHandler
	seen     []fakeCommand
	conns    map[net.Conn]struct{}
	// skew is how far the server's clock is from the test process's: the
	// $currentDate of the clock document and hello's localTime.
	skew time.Duration
	// arbiters are the arbiters hello lists (a primary's only).
	arbiters []string
}

// fakeCommand is a command the server received: its name and its document,
// with the OP_MSG document sequences (an insert's documents, an update's
// updates) as arrays of the document.
type fakeCommand struct {
	Name string
	Doc  bson.Raw
}

// lookup returns the value of key in the command.
func (c fakeCommand) lookup(key ...string) bson.RawValue { return c.Doc.Lookup(key...) }

// coll returns the collection the command names.
func (c fakeCommand) coll() string { s, _ := c.lookup(c.Name).StringValueOK(); return s }

// fakeHandler answers a command. nil answers nothing: the server keeps the
// request, as one waiting for a majority it lost.
type fakeHandler func(c fakeCommand) bson.D

// newFakeServer starts a fake replica-set primary (or a mongos), stopped at
// t's cleanup.
func newFakeServer(t testing.TB, mongos bool) *fakeServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fs := &fakeServer{t: t, ln: ln, addr: ln.Addr().String(), mongos: mongos, done: make(chan struct{}),
		handlers: map[string]fakeHandler{}, conns: map[net.Conn]struct{}{}}
	fs.wg.Go(fs.accept)
	t.Cleanup(fs.stop)
	return fs
}

// uri is the connection string of the server.
func (fs *fakeServer) uri() string {
	if fs.mongos {
		return "mongodb://" + fs.addr + "/"
	}
	return "mongodb://" + fs.addr + "/?replicaSet=rs0"
}

// handle scripts the answer to the commands called name.
func (fs *fakeServer) handle(name string, h fakeHandler) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.handlers[name] = h
}

// setSkew sets how far the server's clock runs ahead of the test's.
func (fs *fakeServer) setSkew(d time.Duration) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.skew = d
}

func (fs *fakeServer) now() time.Time {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return time.Now().Add(fs.skew)
}

// commands returns the commands received so far, without the handshakes
// and heartbeats (hello, isMaster), optionally only those named.
func (fs *fakeServer) commands(names ...string) []fakeCommand {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []fakeCommand
	for _, c := range fs.seen {
		if isHandshake(c.Name) || (len(names) > 0 && !slices.Contains(names, c.Name)) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// handshakes returns the hello and isMaster commands received.
func (fs *fakeServer) handshakes() []fakeCommand {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []fakeCommand
	for _, c := range fs.seen {
		if isHandshake(c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// reset forgets the commands received so far.
func (fs *fakeServer) reset() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.seen = nil
}

func isHandshake(name string) bool {
	return name == "hello" || name == "isMaster" || name == "ismaster"
}

// wait pauses a handler for d, as a slow server would, or until the server
// stops.
func (fs *fakeServer) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-fs.done:
	}
}

func (fs *fakeServer) stop() {
	close(fs.done)
	_ = fs.ln.Close()
	fs.mu.Lock()
	for c := range fs.conns {
		_ = c.Close()
	}
	fs.mu.Unlock()
	fs.wg.Wait()
}

func (fs *fakeServer) accept() {
	for {
		conn, err := fs.ln.Accept()
		if err != nil {
			return
		}
		fs.mu.Lock()
		select {
		case <-fs.done:
			fs.mu.Unlock()
			_ = conn.Close()
			return
		default:
		}
		fs.conns[conn] = struct{}{}
		fs.mu.Unlock()
		fs.wg.Go(func() { fs.serve(conn) })
	}
}

// serve answers the requests of one connection, one after the other (the
// driver sends one at a time on a connection).
func (fs *fakeServer) serve(conn net.Conn) {
	defer func() {
		fs.mu.Lock()
		delete(fs.conns, conn)
		fs.mu.Unlock()
		_ = conn.Close()
	}()
	for {
		var hdr [16]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		length := int32(binary.LittleEndian.Uint32(hdr[:4]))
		if length < 16 || length > 48_000_000 {
			return
		}
		wm := make([]byte, length)
		copy(wm, hdr[:])
		if _, err := io.ReadFull(conn, wm[16:]); err != nil {
			return
		}
		reply, err := fs.answer(wm)
		if err != nil {
			fs.t.Errorf("fake MongoDB server: %v", err)
			return
		}
		if reply == nil {
			continue // withheld: the client gives up on its own deadline
		}
		if _, err := conn.Write(reply); err != nil {
			return
		}
	}
}

// answer decodes one request and returns the wire message of its reply,
// or nil when the handler withholds it.
func (fs *fakeServer) answer(wm []byte) ([]byte, error) {
	_, reqID, _, opcode, rem, ok := wiremessage.ReadHeader(wm)
	if !ok {
		return nil, fmt.Errorf("malformed header")
	}
	switch opcode {
	// The driver's first handshake of a connection is OP_QUERY, which the
	// wiremessage package keeps only for it (deprecated for the rest).
	case wiremessage.OpQuery: //nolint:staticcheck // see above
		_, rem, ok = wiremessage.ReadQueryFlags(rem) //nolint:staticcheck // see above
		if ok {
			_, rem, ok = wiremessage.ReadQueryFullCollectionName(rem) //nolint:staticcheck // see above
		}
		if ok {
			_, rem, ok = wiremessage.ReadQueryNumberToSkip(rem) //nolint:staticcheck // see above
		}
		if ok {
			_, rem, ok = wiremessage.ReadQueryNumberToReturn(rem) //nolint:staticcheck // see above
		}
		var query bsoncore.Document
		if ok {
			query, _, ok = wiremessage.ReadQueryQuery(rem) //nolint:staticcheck // see above
		}
		if !ok {
			return nil, fmt.Errorf("malformed OP_QUERY")
		}
		doc := fs.dispatch(bson.Raw(query))
		if doc == nil {
			return nil, nil
		}
		body, err := bson.Marshal(doc)
		if err != nil {
			return nil, err
		}
		idx, dst := wiremessage.AppendHeaderStart(nil, wiremessage.NextRequestID(), reqID, wiremessage.OpReply)
		dst = wiremessage.AppendReplyFlags(dst, 0)
		dst = wiremessage.AppendReplyCursorID(dst, 0)
		dst = wiremessage.AppendReplyStartingFrom(dst, 0)
		dst = wiremessage.AppendReplyNumberReturned(dst, 1)
		dst = append(dst, body...)
		return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:]))), nil
	case wiremessage.OpMsg:
		flags, rem, ok := wiremessage.ReadMsgFlags(rem)
		if !ok {
			return nil, fmt.Errorf("malformed OP_MSG")
		}
		if flags&wiremessage.ChecksumPresent != 0 {
			rem = rem[:len(rem)-4]
		}
		var body bson.D
		var seqs bson.D
		for len(rem) > 0 {
			var stype wiremessage.SectionType
			stype, rem, ok = wiremessage.ReadMsgSectionType(rem)
			if !ok {
				return nil, fmt.Errorf("malformed OP_MSG section")
			}
			switch stype {
			case wiremessage.SingleDocument:
				var doc bsoncore.Document
				doc, rem, ok = wiremessage.ReadMsgSectionSingleDocument(rem)
				if !ok {
					return nil, fmt.Errorf("malformed OP_MSG body")
				}
				if err := bson.Unmarshal(doc, &body); err != nil {
					return nil, err
				}
			case wiremessage.DocumentSequence:
				var ident string
				var docs []bsoncore.Document
				ident, docs, rem, ok = wiremessage.ReadMsgSectionDocumentSequence(rem)
				if !ok {
					return nil, fmt.Errorf("malformed OP_MSG document sequence")
				}
				arr := make(bson.A, len(docs))
				for i, d := range docs {
					arr[i] = bson.Raw(d)
				}
				seqs = append(seqs, bson.E{Key: ident, Value: arr})
			default:
				return nil, fmt.Errorf("unknown OP_MSG section %d", stype)
			}
		}
		raw, err := bson.Marshal(append(body, seqs...))
		if err != nil {
			return nil, err
		}
		doc := fs.dispatch(raw)
		if doc == nil {
			return nil, nil
		}
		out, err := bson.Marshal(doc)
		if err != nil {
			return nil, err
		}
		idx, dst := wiremessage.AppendHeaderStart(nil, wiremessage.NextRequestID(), reqID, wiremessage.OpMsg)
		dst = wiremessage.AppendMsgFlags(dst, 0)
		dst = wiremessage.AppendMsgSectionType(dst, wiremessage.SingleDocument)
		dst = append(dst, out...)
		return bsoncore.UpdateLength(dst, idx, int32(len(dst[idx:]))), nil
	}
	return nil, fmt.Errorf("unsupported opcode %v", opcode)
}

// dispatch records the command and returns its answer (ok: 1 added when
// the answer has no ok), or nil to withhold it.
func (fs *fakeServer) dispatch(doc bson.Raw) bson.D {
	elems, err := doc.Elements()
	if err != nil || len(elems) == 0 {
		return bson.D{{Key: "ok", Value: 0}, {Key: "errmsg", Value: "empty command"}}
	}
	c := fakeCommand{Name: elems[0].Key(), Doc: doc}
	fs.mu.Lock()
	fs.seen = append(fs.seen, c)
	h := fs.handlers[c.Name]
	fs.mu.Unlock()
	if h == nil {
		h = fs.byDefault
	}
	reply := h(c)
	if reply == nil {
		return nil
	}
	for _, e := range reply {
		if e.Key == "ok" {
			return reply
		}
	}
	return append(reply, bson.E{Key: "ok", Value: 1})
}

// electionID names the fake primary's term.
var electionID = primitive.NewObjectID()

// byDefault answers as a healthy server with empty collections would.
func (fs *fakeServer) byDefault(c fakeCommand) bson.D {
	ns := func() string { db, _ := c.lookup("$db").StringValueOK(); return db + "." + c.coll() }
	switch c.Name {
	case "hello", "isMaster", "ismaster":
		return fs.hello()
	case "aggregate":
		if _, ok := c.lookup("pipeline", "0", "$changeStream").DocumentOK(); ok {
			return changeStreamReply(ns(), "firstBatch")
		}
		return cursorReply(ns(), "firstBatch")
	case "find", "listIndexes":
		return cursorReply(ns(), "firstBatch")
	case "getMore":
		db, _ := c.lookup("$db").StringValueOK()
		coll, _ := c.lookup("collection").StringValueOK()
		if id, _ := c.lookup("getMore").AsInt64OK(); id == changeStreamCursor {
			return changeStreamReply(db+"."+coll, "nextBatch")
		}
		return cursorReply(db+"."+coll, "nextBatch")
	case "insert":
		docs, _ := c.lookup("documents").ArrayOK()
		vals, _ := docs.Values()
		return bson.D{{Key: "n", Value: int32(len(vals))}}
	case "update":
		ups, _ := c.lookup("updates").ArrayOK()
		vals, _ := ups.Values()
		return bson.D{{Key: "n", Value: int32(len(vals))}, {Key: "nModified", Value: int32(len(vals))}}
	case "delete":
		return bson.D{{Key: "n", Value: int32(0)}}
	case "count":
		return bson.D{{Key: "n", Value: int32(0)}}
	case "findAndModify":
		if c.coll() == ClockCollection { // $currentDate: the server's clock
			return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: 1}, {Key: "updatedExisting", Value: true}}},
				{Key: "value", Value: bson.D{{Key: "_id", Value: clockID}, {Key: clockField, Value: fs.now()}}}}
		}
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: 0}}}, {Key: "value", Value: nil}}
	}
	return bson.D{}
}

// hello is the server's hello reply: a primary of rs0, or a mongos;
// MongoDB 6.0's wire version. It carries no topologyVersion, so the driver
// polls instead of streaming heartbeats.
func (fs *fakeServer) hello() bson.D {
	d := bson.D{
		{Key: "helloOk", Value: true}, {Key: "isWritablePrimary", Value: true}, {Key: "ismaster", Value: true},
		{Key: "maxBsonObjectSize", Value: int32(16 * 1024 * 1024)}, {Key: "maxMessageSizeBytes", Value: int32(48_000_000)},
		{Key: "maxWriteBatchSize", Value: int32(100_000)}, {Key: "localTime", Value: fs.now()},
		{Key: "logicalSessionTimeoutMinutes", Value: int32(30)}, {Key: "connectionId", Value: int32(1)},
		{Key: "minWireVersion", Value: int32(0)}, {Key: "maxWireVersion", Value: int32(17)}, {Key: "readOnly", Value: false},
	}
	if fs.mongos {
		return append(d, bson.E{Key: "msg", Value: "isdbgrid"})
	}
	fs.mu.Lock()
	arbiters := slices.Clone(fs.arbiters)
	fs.mu.Unlock()
	if len(arbiters) > 0 {
		d = append(d, bson.E{Key: "arbiters", Value: arbiters})
	}
	return append(d,
		bson.E{Key: "setName", Value: "rs0"}, bson.E{Key: "setVersion", Value: int32(1)}, bson.E{Key: "electionId", Value: electionID},
		bson.E{Key: "secondary", Value: false}, bson.E{Key: "hosts", Value: bson.A{fs.addr}},
		bson.E{Key: "primary", Value: fs.addr}, bson.E{Key: "me", Value: fs.addr})
}

// findOneIn returns a find handler that answers doc from the collection
// coll and answers every other find by default.
func (fs *fakeServer) findOneIn(coll string, doc bson.D) fakeHandler {
	return func(c fakeCommand) bson.D {
		if c.coll() != coll {
			return fs.byDefault(c)
		}
		db, _ := c.lookup("$db").StringValueOK()
		return cursorReply(db+"."+coll, "firstBatch", doc)
	}
}

// cursorReply is a cursor reply with the documents docs, exhausted.
func cursorReply(ns, batch string, docs ...any) bson.D {
	if docs == nil {
		docs = bson.A{}
	}
	return bson.D{{Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "ns", Value: ns}, {Key: batch, Value: bson.A(docs)}}}}
}

// changeStreamCursor is the id of every change stream's cursor.
const changeStreamCursor = int64(42)

// changeStreamReply is a change stream's empty batch: its cursor stays
// open, and the post-batch resume token moves the position.
func changeStreamReply(ns, batch string) bson.D {
	return bson.D{{Key: "cursor", Value: bson.D{{Key: "id", Value: changeStreamCursor}, {Key: "ns", Value: ns},
		{Key: batch, Value: bson.A{}}, {Key: "postBatchResumeToken", Value: bson.D{{Key: "_data", Value: "8200000001"}}}}}}
}

// commandError is a failed command's reply with the server's code and
// labels.
func commandError(code int32, name string, labels ...string) bson.D {
	d := bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: code}, {Key: "codeName", Value: name},
		{Key: "errmsg", Value: "fake server: " + name}}
	if len(labels) > 0 {
		d = append(d, bson.E{Key: "errorLabels", Value: labels})
	}
	return d
}

// writeConcernTimeout is the reply of a write (or commit) applied on the
// primary that a majority did not acknowledge within wtimeout.
func writeConcernTimeout(reply bson.D) bson.D {
	return append(reply, bson.E{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: int32(codeWriteConcernTimeout)},
		{Key: "codeName", Value: "WriteConcernTimeout"}, {Key: "errmsg", Value: "waiting for replication timed out"},
		{Key: "errInfo", Value: bson.D{{Key: "wtimeout", Value: true}}}}})
}

// failFirst answers the first n commands h sees with reply and the others
// with h.
func failFirst(n int, reply bson.D, h fakeHandler) fakeHandler {
	var mu sync.Mutex
	return func(c fakeCommand) bson.D {
		mu.Lock()
		fail := n > 0
		n--
		mu.Unlock()
		if fail {
			return reply
		}
		return h(c)
	}
}
