package store

// SyncedScope selects the originals Store.DeleteSynced may remove, for
// retentions per type or per source beside the global one: each original
// is kept for the retention of its type when it has one, else for that of
// its sourceKey when it has one, else for the global retention. The zero
// SyncedScope selects every original.
type SyncedScope struct {
	// Type, when set, selects only the originals of that type.
	Type string
	// Source, when set, selects only the originals of that sourceKey.
	Source string
	// ExceptTypes leaves out the originals of these types.
	ExceptTypes []string
	// ExceptSources leaves out the originals of these sourceKeys.
	ExceptSources []string
}

// Matches tells whether scope selects an original of type typ and source
// key source: what each store's query selects, for tests and fakes.
func (s SyncedScope) Matches(typ, source string) bool {
	if (s.Type != "" && typ != s.Type) || (s.Source != "" && source != s.Source) {
		return false
	}
	for _, t := range s.ExceptTypes {
		if t == typ {
			return false
		}
	}
	for _, src := range s.ExceptSources {
		if src == source {
			return false
		}
	}
	return true
}
