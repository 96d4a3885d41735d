package operator

import (
	"cmp"
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/store"
)

// PauseQuery names the stage that Pause or Resume acts on.
type PauseQuery struct {
	// Stage is "relay" (every partition), "relay:<p>", "projection" or
	// "replay" (of the Config.Group), or "projection:<group>" or
	// "replay:<group>". Required.
	Stage string
	// By names who pauses, kept with the pause. Defaults to "operator".
	By string
}

// PauseResult is a stage's state after Pause or Resume (POST
// /v1/admin/pause, /v1/admin/resume).
type PauseResult struct {
	Stage  string `json:"stage"`
	Paused bool   `json:"paused"`
	// Changed is false when the stage already was as asked (paused, or
	// running).
	Changed bool       `json:"changed"`
	By      string     `json:"by,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
}

// PausesResult lists the stages paused now (GET /v1/admin/pauses).
type PausesResult struct {
	Paused []store.PauseState `json:"paused"`
	// Stages are every stage that may be paused, as Stage names them: the
	// relay of all partitions and of each, the group's live projection and
	// its replay lane.
	Stages []string `json:"stages"`
}

// stage reads q's stage; "projection" and "replay" are the Config.Group's.
func (o *Operator) stage(s string) (store.Stage, error) {
	if s == store.StageProjection || s == store.StageReplay {
		s += ":" + o.cfg.Group
	}
	st, err := store.ParseStage(s, o.cfg.Partitions)
	if err != nil {
		return st, Invalid("stage", "%s", strings.TrimPrefix(err.Error(), "stage "))
	}
	return st, nil
}

// Pause pauses a stage, recorded in the store where every replica reads it
// (store.Pause); it survives restarts. Within about a second
// (pause.RefreshEvery) the dispatchers stop relaying the partition (or
// all), or the workers of the group stop projecting its live stream or
// its replay lane; the batch in flight finishes. A stage already paused
// stays as it was.
func (o *Operator) Pause(ctx context.Context, q PauseQuery) (*PauseResult, error) {
	s, err := o.stage(q.Stage)
	if err != nil {
		return nil, err
	}
	p, created, err := store.Pause(ctx, o.cfg.Store, o.cfg.Stream, s, cmp.Or(q.By, "operator"), o.cfg.Now())
	if err != nil {
		return nil, storeErr("pausing "+s.String(), err)
	}
	if created {
		o.logger.Info("stage paused by an operator", zap.String("stage", p.Stage), zap.String("by", p.By))
	}
	return &PauseResult{Stage: s.String(), Paused: true, Changed: created, By: p.By, Since: &p.Since}, nil
}

// Resume ends the pause of a stage; a stage that runs is no error.
func (o *Operator) Resume(ctx context.Context, q PauseQuery) (*PauseResult, error) {
	s, err := o.stage(q.Stage)
	if err != nil {
		return nil, err
	}
	ok, err := store.Resume(ctx, o.cfg.Store, o.cfg.Stream, s, o.cfg.Now())
	if err != nil {
		return nil, storeErr("resuming "+s.String(), err)
	}
	if ok {
		o.logger.Info("stage resumed by an operator", zap.String("stage", s.String()))
	}
	return &PauseResult{Stage: s.String(), Changed: ok}, nil
}

// Pauses lists the stages of the stream and the group paused now: the
// relay of all partitions and of each, the group's live projection and
// its replay lane.
func (o *Operator) Pauses(ctx context.Context) (*PausesResult, error) {
	stages := []store.Stage{{Kind: store.StageRelay, Partition: store.StageAllPartitions}}
	for p := range max(o.cfg.Partitions, 1) {
		stages = append(stages, store.Stage{Kind: store.StageRelay, Partition: p})
	}
	stages = append(stages, store.Stage{Kind: store.StageProjection, Group: o.cfg.Group}, store.Stage{Kind: store.StageReplay, Group: o.cfg.Group})
	res := &PausesResult{Paused: []store.PauseState{}, Stages: make([]string, len(stages))}
	now := o.cfg.Now()
	for i, s := range stages {
		res.Stages[i] = s.String()
		p, err := store.Paused(ctx, o.cfg.Store, o.cfg.Stream, s, now)
		if err != nil {
			return nil, storeErr("reading the pauses", err)
		}
		if p != nil {
			res.Paused = append(res.Paused, *p)
		}
	}
	return res, nil
}

// CancelResult is what CancelReplay did (POST /v1/admin/replay:cancel).
type CancelResult struct {
	// CancelledAt is the cancel's time: every replay that began before it
	// publishes nothing more.
	CancelledAt time.Time `json:"cancelledAt"`
	// Removed counts the entries of the replay lanes removed unprojected.
	Removed int64 `json:"removed"`
}

// CancelReplay cancels the running replays: it records the cancel in the
// store, so that no chunk of a replay that began before it publishes
// anything more (ErrCancelled, on every replica), then removes from every
// partition's replay lane the entries the group has not been delivered
// yet (stream.Client.DropUndelivered). The live stream is untouched; a
// batch of the lane a worker is projecting finishes, and DLQ replays
// queued in the lane are removed with the rest.
func (o *Operator) CancelReplay(ctx context.Context) (*CancelResult, error) {
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	now := o.cfg.Now().UTC()
	if err := store.RecordReplayCancel(ctx, o.cfg.Store, o.cfg.Stream, now); err != nil {
		return nil, storeErr("recording the cancel", err)
	}
	res := &CancelResult{CancelledAt: now}
	for _, k := range o.keys.Split(o.cfg.Partitions).AllPartitions() {
		n, err := o.cfg.Redis.DropUndelivered(ctx, k.ReplayLane())
		res.Removed += n
		if err != nil {
			return nil, redisErr("removing the replay lane's entries", err)
		}
	}
	o.logger.Info("replays cancelled by an operator", zap.Int64("lane_entries_removed", res.Removed))
	return res, nil
}
