package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kinds of stage an operator can pause (Stage.Kind).
const (
	// StageRelay is the dispatcher's relay of the outbox into the stream:
	// of every partition (Stage{Kind: StageRelay}, "relay") or of one
	// ("relay:<p>").
	StageRelay = "relay"
	// StageProjection is the workers' live projection of a consumer
	// group: "projection:<group>".
	StageProjection = "projection"
	// StageReplay is the workers' reading of the replay lane for a
	// consumer group: "replay:<group>".
	StageReplay = "replay"
)

// StageAllPartitions is the Stage.Partition of a relay paused in every
// partition.
const StageAllPartitions = -1

// Stage names what a pause stops: the relay of one partition or all, or
// the live projection or the replay lane of a consumer group.
type Stage struct {
	Kind string
	// Partition is the relay's partition, or StageAllPartitions.
	Partition int
	// Group is the consumer group of a projection or replay stage.
	Group string
}

// String returns the stage as ParseStage reads it: "relay", "relay:<p>",
// "projection:<group>" or "replay:<group>".
func (s Stage) String() string {
	switch {
	case s.Kind == StageRelay && s.Partition == StageAllPartitions:
		return StageRelay
	case s.Kind == StageRelay:
		return StageRelay + ":" + strconv.Itoa(s.Partition)
	default:
		return s.Kind + ":" + s.Group
	}
}

// ParseStage reads a stage as Stage.String writes it; partitions is the
// stream's number of partitions, which bounds a relay's partition.
func ParseStage(s string, partitions int) (Stage, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch kind {
	case StageRelay:
		if arg == "" {
			return Stage{Kind: StageRelay, Partition: StageAllPartitions}, nil
		}
		p, err := strconv.Atoi(arg)
		if err != nil || p < 0 || p >= max(partitions, 1) {
			return Stage{}, fmt.Errorf("stage %q: the partition must be from 0 to %d", s, max(partitions, 1)-1)
		}
		return Stage{Kind: StageRelay, Partition: p}, nil
	case StageProjection, StageReplay:
		if arg == "" {
			return Stage{}, fmt.Errorf("stage %q: name the consumer group (%s:<group>)", s, kind)
		}
		return Stage{Kind: kind, Group: arg}, nil
	}
	return Stage{}, fmt.Errorf("stage %q: must be relay, relay:<partition>, projection:<group> or replay:<group>", s)
}

// PauseTTL is how long a pause lease lasts: until an operator resumes.
const PauseTTL = 100 * 365 * 24 * time.Hour

// PauseState is a recorded pause.
type PauseState struct {
	Stage string    `json:"stage"`
	By    string    `json:"by"`
	Since time.Time `json:"since"`
}

// Pause records in st that stage of stream is paused, by by, from now. A
// stage already paused stays paused as it was (its state is returned, with
// created false).
func Pause(ctx context.Context, st Store, stream string, stage Stage, by string, now time.Time) (_ *PauseState, created bool, err error) {
	if p, err := Paused(ctx, st, stream, stage, now); err != nil || p != nil {
		return p, false, err
	}
	name := PauseLeaseName(stream, stage)
	lease, err := st.AcquireLease(ctx, name, by, now, PauseTTL)
	if err != nil {
		return nil, false, fmt.Errorf("error pausing %s: %w", stage, err)
	}
	if !lease.Held() { // another operator paused it meanwhile
		p, err := Paused(ctx, st, stream, stage, now)
		return p, false, err
	}
	if err := st.SaveCheckpoint(ctx, lease, Checkpoint{At: now}); err != nil {
		return nil, false, fmt.Errorf("error recording when %s was paused: %w", stage, err)
	}
	return &PauseState{Stage: stage.String(), By: by, Since: now.UTC()}, true, nil
}

// Resume ends the pause of stage of stream; it reports whether the stage
// was paused.
func Resume(ctx context.Context, st Store, stream string, stage Stage, now time.Time) (bool, error) {
	ls, err := st.ReadLease(ctx, PauseLeaseName(stream, stage))
	if err != nil {
		return false, fmt.Errorf("error reading the pause of %s: %w", stage, err)
	}
	if ls == nil || !ls.Expires.After(now) || ls.Owner == "" {
		return false, nil
	}
	ok, err := st.ReleaseLease(ctx, Lease{Name: PauseLeaseName(stream, stage), Owner: ls.Owner, Term: ls.Term, Expires: ls.Expires})
	if err != nil {
		return false, fmt.Errorf("error resuming %s: %w", stage, err)
	}
	return ok, nil
}

// Paused returns the pause of stage of stream, or nil when it runs.
func Paused(ctx context.Context, st Store, stream string, stage Stage, now time.Time) (*PauseState, error) {
	ls, err := st.ReadLease(ctx, PauseLeaseName(stream, stage))
	if err != nil {
		return nil, fmt.Errorf("error reading the pause of %s: %w", stage, err)
	}
	if ls == nil || ls.Owner == "" || !ls.Expires.After(now) {
		return nil, nil
	}
	p := &PauseState{Stage: stage.String(), By: ls.Owner}
	if ls.CheckpointAt != nil {
		p.Since = ls.CheckpointAt.UTC()
	}
	return p, nil
}
