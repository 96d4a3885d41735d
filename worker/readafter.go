package worker

// appendReadAfter adds a message's read-after position (outbox.Message.
// ReadAfter: the commit of its outbox entry, as the dispatcher's feed saw
// it) to out, the positions of a batch for its read of the originals
// (store.WithReadAfter: the store reads at or after the latest). The
// messages of one commit are next to each other in the stream and carry
// the same position: it is added once for them. A message without one (a
// catch-up, the reconciler, a replay, an older dispatcher, SQLite) adds
// nothing.
func appendReadAfter(out []string, pos string) []string {
	if pos == "" || (len(out) > 0 && out[len(out)-1] == pos) {
		return out
	}
	return append(out, pos)
}
