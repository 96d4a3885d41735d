package reconciler

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
)

// Report is the outcome of one sweep. Durations are seconds in JSON.
type Report struct {
	// Stream is the stream the sweep published to.
	Stream string `json:"stream"`
	// StartedAt is the sweep's time by the reconciler's clock.
	StartedAt time.Time `json:"startedAt"`
	// Duration is how long the sweep took (wall time).
	Duration time.Duration `json:"-"`
	// Scanned is how many candidates the query returned.
	Scanned int `json:"scanned"`
	// ResetAt is the last reset of Redis's data (store.RecordReset) the
	// sweep took into account (nil: none); a later one calls for another
	// sweep at once.
	ResetAt *time.Time `json:"resetAt,omitempty"`
	// LimitReached is true when the query returned Limit candidates, so
	// more may wait for the next sweep. It is not a failure.
	LimitReached bool `json:"limitReached"`
	// Claimed is how many candidates this sweep claimed.
	Claimed int `json:"claimed"`
	// Skipped is how many candidates no longer matched at claim time:
	// another run claimed them, or they got synced or parked meanwhile.
	Skipped int `json:"skipped"`
	// ClaimFailed is how many claims failed with a MongoDB error.
	ClaimFailed int `json:"claimFailed"`
	// Published is how many claimed documents were added to the stream.
	Published int `json:"published"`
	// PublishFailed is how many claimed documents could not be added.
	PublishFailed int `json:"publishFailed"`
	// PublishError is the first publish failure of the sweep ("" when
	// none): the sweep logs one line with it, not one per document.
	PublishError string `json:"publishError,omitempty"`
	// RedisFull is set when the sweep stopped early because Redis refused
	// a publish for lack of memory (OOM): the remaining candidates would
	// fail the same way, so they wait for the next sweep unclaimed.
	RedisFull bool `json:"redisRefused,omitempty"`
	// Held is how many claimed candidates were left alone because a
	// worker holds their entry for a later delivery (stream.Keys.Held);
	// their claims were undone.
	Held int `json:"held"`
	// RolledBack is how many claims of failed publishes were undone.
	RolledBack int `json:"rolledBack"`
	// RollbackSkipped is how many claims of failed publishes were left
	// because a newer claim by another run owned the document.
	RollbackSkipped int `json:"rollbackSkipped"`
	// RollbackFailed is how many rollbacks failed; those documents are
	// candidates again after RequeueAfter.
	RollbackFailed int `json:"rollbackFailed"`
	// Exhausted is how many claimed documents were parked instead of
	// published: requeued MaxRequeues times already (category
	// requeue_exhausted).
	Exhausted int `json:"exhausted"`
	// OldestUnsyncedAge is the age of the oldest original with neither
	// syncedAt nor syncFailure, claimed or not; zero when there is none.
	OldestUnsyncedAge time.Duration `json:"-"`
	// Failures counts parked originals (syncFailure set, not synced) by
	// category; the known categories are always present.
	Failures map[string]int64 `json:"failures"`
}

// Failed reports whether any document failed in the sweep (a claim, a
// publish or a rollback). The reconcile role exits 1 then.
func (r Report) Failed() bool {
	return r.ClaimFailed > 0 || r.PublishFailed > 0 || r.RollbackFailed > 0
}

// DidWork reports whether the sweep found any candidate.
func (r Report) DidWork() bool { return r.Scanned > 0 }

// reportFields has Report's fields without its methods.
type reportFields Report

type reportJSON struct {
	reportFields
	OldestUnsyncedAgeSeconds float64 `json:"oldestUnsyncedAgeSeconds"`
	DurationSeconds          float64 `json:"durationSeconds"`
}

// MarshalJSON writes the durations as seconds (oldestUnsyncedAgeSeconds,
// durationSeconds).
func (r Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(reportJSON{
		reportFields:             reportFields(r),
		OldestUnsyncedAgeSeconds: r.OldestUnsyncedAge.Seconds(),
		DurationSeconds:          r.Duration.Seconds(),
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Report) UnmarshalJSON(b []byte) error {
	var j reportJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Report(j.reportFields)
	r.OldestUnsyncedAge = time.Duration(j.OldestUnsyncedAgeSeconds * float64(time.Second))
	r.Duration = time.Duration(j.DurationSeconds * float64(time.Second))
	return nil
}

// String returns a one-line summary for people.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stream %s: scanned %d", r.Stream, r.Scanned)
	if r.LimitReached {
		b.WriteString(" (limit reached)")
	}
	fmt.Fprintf(&b, ", claimed %d, skipped %d, published %d", r.Claimed, r.Skipped, r.Published)
	if r.Held > 0 {
		fmt.Fprintf(&b, ", held by a worker %d", r.Held)
	}
	if r.Exhausted > 0 {
		fmt.Fprintf(&b, ", parked as requeue_exhausted %d", r.Exhausted)
	}
	if r.Failed() || r.RollbackSkipped > 0 {
		fmt.Fprintf(&b, ", claim failed %d, publish failed %d, rolled back %d, rollback skipped %d, rollback failed %d",
			r.ClaimFailed, r.PublishFailed, r.RolledBack, r.RollbackSkipped, r.RollbackFailed)
	}
	fmt.Fprintf(&b, "; oldest unsynced %s", r.OldestUnsyncedAge.Round(time.Second))
	for _, cat := range slices.Sorted(maps.Keys(r.Failures)) {
		fmt.Fprintf(&b, ", parked %s %d", cat, r.Failures[cat])
	}
	return b.String()
}

// MarshalLogObject logs the report with snake_case keys.
func (r Report) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt("scanned", r.Scanned)
	enc.AddBool("limit_reached", r.LimitReached)
	enc.AddInt("claimed", r.Claimed)
	enc.AddInt("skipped", r.Skipped)
	enc.AddInt("held", r.Held)
	enc.AddInt("claim_failed", r.ClaimFailed)
	enc.AddInt("published", r.Published)
	enc.AddInt("publish_failed", r.PublishFailed)
	if r.PublishError != "" {
		enc.AddString("publish_error", r.PublishError)
		enc.AddBool("redis_full", r.RedisFull)
	}
	enc.AddInt("rolled_back", r.RolledBack)
	enc.AddInt("rollback_skipped", r.RollbackSkipped)
	enc.AddInt("rollback_failed", r.RollbackFailed)
	enc.AddInt("exhausted", r.Exhausted)
	enc.AddFloat64("oldest_unsynced_age_seconds", r.OldestUnsyncedAge.Seconds())
	enc.AddDuration("duration", r.Duration)
	for _, cat := range slices.Sorted(maps.Keys(r.Failures)) {
		enc.AddInt64("parked_"+cat, r.Failures[cat])
	}
	return nil
}
