package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/startstop"
)

// RedriveMaxDefault is how often the redrive policy redrives one event's
// dead letters when a rule names no cap.
const RedriveMaxDefault = 3

// RedriveRule redrives the dead letters of Category once they are After
// old, at most Max times per event (--redrive CATEGORY=AFTER[:MAX]).
type RedriveRule struct {
	Category string
	After    time.Duration
	Max      int
}

// String is the rule as --redrive spells it.
func (r RedriveRule) String() string {
	return fmt.Sprintf("%s=%s:%d", r.Category, r.After, r.Max)
}

// ParseRedriveRule reads CATEGORY=AFTER[:MAX] (infrastructure=10m:3); MAX
// defaults to RedriveMaxDefault.
func ParseRedriveRule(s string) (RedriveRule, error) {
	cat, spec, ok := strings.Cut(s, "=")
	if !ok || cat == "" || spec == "" {
		return RedriveRule{}, fmt.Errorf("error parsing redrive rule %q: want CATEGORY=AFTER[:MAX]", s)
	}
	after, maxs, hasMax := strings.Cut(spec, ":")
	d, err := time.ParseDuration(after)
	if err != nil {
		return RedriveRule{}, fmt.Errorf("error parsing redrive rule %q: %w", s, err)
	}
	r := RedriveRule{Category: cat, After: d, Max: RedriveMaxDefault}
	if hasMax {
		if r.Max, err = strconv.Atoi(maxs); err != nil {
			return RedriveRule{}, fmt.Errorf("error parsing redrive rule %q: MAX: %w", s, err)
		}
	}
	return r, r.validate()
}

func (r RedriveRule) validate() error {
	switch {
	case r.Category == "":
		return errors.New("invalid redrive rule: Category is empty")
	case r.After < time.Second:
		return fmt.Errorf("invalid redrive rule %s: After must be at least 1s", r)
	case r.Max < 1:
		return fmt.Errorf("invalid redrive rule %s: Max must be at least 1", r)
	}
	return nil
}

// RedrivePolicy says which dead letters redrive themselves. The zero
// policy redrives nothing: the policy is off unless a rule is given, and
// only the categories named by a rule are ever redriven.
type RedrivePolicy struct {
	// Rules, at most one per category.
	Rules []RedriveRule
	// Hold names the categories held for an operator's approval: no rule
	// may name one, and only an operator's DLQ replay redrives them.
	Hold []string
}

// Validate checks every rule, that no category has two rules, and that no
// rule names a held category.
func (p RedrivePolicy) Validate() error {
	seen := map[string]bool{}
	for _, r := range p.Rules {
		if err := r.validate(); err != nil {
			return err
		}
		if seen[r.Category] {
			return fmt.Errorf("invalid redrive policy: Rules: two rules for category %q", r.Category)
		}
		seen[r.Category] = true
		if slices.Contains(p.Hold, r.Category) {
			return fmt.Errorf("invalid redrive policy: Rules: category %q is held for an operator's approval (Hold)", r.Category)
		}
	}
	for _, h := range p.Hold {
		if h == "" {
			return errors.New("invalid redrive policy: Hold: an empty category")
		}
	}
	return nil
}

// RedriveResult is what one redrive pass did.
type RedriveResult struct {
	// Redriven counts the dead letters redriven, by category.
	Redriven map[string]int `json:"redriven"`
	// Capped counts the dead letters due but kept: their event was redriven
	// its rule's Max times already.
	Capped int `json:"capped"`
	// OriginalMissing and Failed count the dead letters kept because their
	// original does not exist, or their publish failed (tried again at the
	// next pass).
	OriginalMissing int `json:"originalMissing"`
	Failed          int `json:"failed"`
}

// Redrive runs one pass of p: for each rule, the dead letters of its
// category dead-lettered at least After ago whose event was redriven fewer
// than Max times are replayed as ReplayDLQ does (syncFailure cleared,
// re-published into the replay lane with origin dlq-replay, then removed),
// and their events' redrive counts grow by one, before the publish (a
// publish that fails still counts: a cap is never exceeded). Held
// categories are never touched. It reads at most dlqScanMax dead letters
// per rule.
func (o *Operator) Redrive(ctx context.Context, p RedrivePolicy) (*RedriveResult, error) {
	if err := o.needRedis(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out := &RedriveResult{Redriven: map[string]int{}}
	now := o.cfg.Now()
	for _, r := range p.Rules {
		// Until is exclusive: a dead letter exactly After old is due.
		dls, _, err := o.scan(ctx, DLQQuery{Category: r.Category, Until: now.Add(-r.After + time.Nanosecond)}, dlqScanMax)
		if err != nil {
			return out, err
		}
		var due []DeadLetter
		for _, dl := range dls {
			if dl.Redrives >= int64(r.Max) {
				out.Capped++
				continue
			}
			due = append(due, dl)
		}
		for chunk := range slices.Chunk(due, ChunkDefault) {
			res := &DLQActionResult{}
			_, err := o.replayLetters(ctx, chunk, res, func(ctx context.Context, dls []DeadLetter) error {
				if err := o.eachPartition(ctx, dls, o.cfg.Redis.CountRedrives); err != nil {
					return redisErr("counting the redrives", err)
				}
				return nil
			})
			out.Redriven[r.Category] += res.Replayed
			out.OriginalMissing += res.OriginalMissing
			out.Failed += res.Failed
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// RedriveEveryDefault is how often the Redriver runs a pass.
const RedriveEveryDefault = time.Minute

// RedriverConfig configures a Redriver.
type RedriverConfig struct {
	// Policy is what redrives itself. A policy without rules makes no
	// Redriver (NewRedriver returns nil).
	Policy RedrivePolicy
	// Every is how often a pass runs. Defaults to RedriveEveryDefault.
	Every time.Duration
	// Registerer receives outboxd_dlq_redriven_total and
	// outboxd_dlq_redrive_capped. Defaults to none.
	Registerer prometheus.Registerer
}

// Redriver runs the redrive policy on a schedule (a service of the roles
// that run the reconciler as a service).
type Redriver struct {
	op       *Operator
	cfg      RedriverConfig
	logger   *zap.Logger
	redriven *prometheus.CounterVec
	capped   prometheus.Gauge
	life     startstop.Base
}

// NewRedriver returns the service that runs cfg.Policy every cfg.Every with
// op's backends, or nil when the policy has no rule.
func NewRedriver(op *Operator, cfg *RedriverConfig, logger *zap.Logger) (*Redriver, error) {
	if op == nil || cfg == nil {
		return nil, errors.New("redriver: an operator and a config are required")
	}
	if len(cfg.Policy.Rules) == 0 {
		return nil, nil
	}
	c := *cfg
	if c.Every == 0 {
		c.Every = RedriveEveryDefault
	}
	if c.Every < time.Millisecond {
		return nil, fmt.Errorf("invalid redriver config: Every must be at least 1ms (got %s)", c.Every)
	}
	if err := c.Policy.Validate(); err != nil {
		return nil, err
	}
	if err := op.needRedis(); err != nil {
		return nil, fmt.Errorf("invalid redriver config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	f := ometrics.NewFactory(c.Registerer, "dlq", op.cfg.Stream)
	r := &Redriver{op: op, cfg: c, logger: logger.Named("redrive").With(zap.String("stream", op.cfg.Stream)),
		redriven: f.CounterVec("redriven_total", "Dead letters the redrive policy redrove, by category.", "category"),
		capped:   f.Gauge("redrive_capped", "Dead letters due for a redrive at the last pass but kept: their event reached its rule's cap."),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("error registering redrive metrics: %w", err)
	}
	for _, rule := range c.Policy.Rules {
		r.redriven.WithLabelValues(rule.Category)
	}
	r.life.Init(nil, r.run)
	return r, nil
}

// Start runs a pass every Every in the background.
func (r *Redriver) Start(ctx context.Context) error { return r.life.Start(ctx) }

// Stop ends the schedule and waits for the pass in progress.
func (r *Redriver) Stop(ctx context.Context) error { return r.life.Stop(ctx) }

func (r *Redriver) run(fetchCtx, _ context.Context) error {
	ticker := time.NewTicker(r.cfg.Every)
	defer ticker.Stop()
	for {
		select {
		case <-fetchCtx.Done():
			return nil
		case <-ticker.C:
		}
		res, err := r.Pass(fetchCtx)
		if err != nil && fetchCtx.Err() == nil {
			r.logger.Warn("redrive pass failed", zap.Error(err))
		}
		if res != nil && res.Capped > 0 {
			r.logger.Debug("dead letters at their redrive cap kept", zap.Int("capped", res.Capped))
		}
	}
}

// Pass runs one pass of the policy and counts it in the metrics.
func (r *Redriver) Pass(ctx context.Context) (*RedriveResult, error) {
	res, err := r.op.Redrive(ctx, r.cfg.Policy)
	if res != nil {
		n := 0
		for cat, k := range res.Redriven {
			r.redriven.WithLabelValues(cat).Add(float64(k))
			n += k
		}
		if err == nil {
			r.capped.Set(float64(res.Capped))
		}
		if n > 0 {
			r.logger.Info("dead letters redriven", zap.Any("redriven", res.Redriven), zap.Int("capped", res.Capped),
				zap.Int("original_missing", res.OriginalMissing), zap.Int("failed", res.Failed))
		}
	}
	return res, err
}
