package mongostore

// The queries the explain tests (mongostore_test) check against a server:
// the store builds them unexported.
var (
	CandidateFilter     = candidateFilter
	CandidateSort       = candidateSort
	EventQueryFilter    = eventQueryFilter
	FeedPipeline        = feedPipeline
	OldestPendingQuery  = oldestPendingQuery
	OutboxEntriesFilter = outboxEntriesFilter
	SyncedBeforeFilter  = syncedBeforeFilter
	CountQueries        = countQueries
	CollModTTL          = collModTTL
)

// CountQuery is countQuery for the explain tests.
type CountQuery = countQuery
