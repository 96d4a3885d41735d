package operator

import (
	"context"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
)

// RetriesQuery names the class whose halted retries ResumeRetries resumes.
type RetriesQuery struct {
	// Class is a failure class: failpolicy.ClassInfrastructure
	// ("infrastructure"), ClassRecord ("record") or ClassUnknown
	// ("unknown"). Required.
	Class string
}

// RetriesResult is what ResumeRetries did (POST /v1/admin/retries:resume).
type RetriesResult struct {
	Class string `json:"class"`
	// Resumed are the halts it cleared, one per component whose retries of
	// the class were halted (none when no component's were).
	Resumed []ResumedHalt `json:"resumed"`
}

// ResumedHalt is a halt that ResumeRetries cleared: the component
// (stream.ComponentWorker for the workers of the group,
// stream.ComponentDispatcher), and the code and source of the run that
// halted it.
type ResumedHalt struct {
	Component string `json:"component"`
	Code      string `json:"code"`
	Source    string `json:"source,omitempty"`
}

// Components whose error-streak rule ResumeRetries resumes.
var streakComponents = []string{stream.ComponentWorker, stream.ComponentDispatcher}

// ResumeRetries is the operator's action on the error-streak rule (seed
// 002): it clears the halt of q.Class for the workers of the group and for
// the dispatchers of the stream, in Redis, where their rule keeps its
// state (stream.Streak). Every worker and dispatcher, in every process,
// sees it within about a second (failpolicy.RefreshEvery) and takes up its
// retries: a worker delivers the entries it held at once. A class that is
// not halted is no error: the result lists what was cleared.
func (o *Operator) ResumeRetries(ctx context.Context, q RetriesQuery) (*RetriesResult, error) {
	if !slices.Contains(failpolicy.Classes, q.Class) {
		return nil, Invalid("class", "must be one of %s", strings.Join(failpolicy.Classes, ", "))
	}
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	res := &RetriesResult{Class: q.Class, Resumed: []ResumedHalt{}}
	for _, c := range streakComponents {
		cleared, _, err := o.cfg.Redis.Streak(o.keys, c).Resume(ctx, q.Class)
		if err != nil {
			return nil, redisErr("resuming the retries of "+c, err)
		}
		for _, f := range cleared {
			res.Resumed = append(res.Resumed, ResumedHalt{Component: c, Code: f.Code, Source: f.Source})
		}
	}
	o.logger.Info("retries resumed by an operator", zap.String("class", q.Class), zap.Int("halts_cleared", len(res.Resumed)))
	return res, nil
}
