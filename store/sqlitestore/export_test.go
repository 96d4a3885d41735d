package sqlitestore

import "github.com/outboxd/outboxd/store"

// OnFeedWait makes the SQLite feed f call fn each time its Next found
// nothing and is about to wait.
func OnFeedWait(f store.Feed, fn func()) { f.(*feed).onWait = fn }

// WithWALRestartFrames sets the WAL size, in frames, from which o's
// Store makes the WAL restart (walRestartFrames).
func WithWALRestartFrames(o *Options, frames int) *Options {
	o.walRestartFrames = frames
	return o
}
