package runner

import (
	"flag"
	"strings"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/operator"
)

// redriveRules is --redrive: one rule of the redrive policy per flag.
type redriveRules struct{ p *operator.RedrivePolicy }

func (r redriveRules) String() string {
	if r.p == nil {
		return ""
	}
	out := make([]string, len(r.p.Rules))
	for i, rule := range r.p.Rules {
		out[i] = rule.String()
	}
	return strings.Join(out, ",")
}

// Set adds the rules of v, one or more separated by commas (as
// OUTBOXD_REDRIVE gives them).
func (r redriveRules) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		rule, err := operator.ParseRedriveRule(s)
		if err != nil {
			return err
		}
		r.p.Rules = append(r.p.Rules, rule)
	}
	return nil
}

// heldCategories is --hold-category: the categories held for an
// operator's approval.
type heldCategories struct{ p *operator.RedrivePolicy }

func (h heldCategories) String() string {
	if h.p == nil {
		return ""
	}
	return strings.Join(h.p.Hold, ",")
}

func (h heldCategories) Set(v string) error {
	h.p.Hold = append(h.p.Hold, strings.Split(v, ",")...)
	return nil
}

// redriveFlags registers --redrive and --hold-category (the reconciler's
// service form and dev).
func (o *options) redriveFlags(fs *flag.FlagSet) {
	fs.Var(redriveRules{&o.redrive}, "redrive", "CATEGORY=AFTER[:MAX] (repeatable or comma-separated; with --every): redrive the dead letters of CATEGORY by themselves once AFTER old, at most MAX times per event (default 3), e.g. infrastructure=10m:3; off by default, and no category is redriven without a rule (docs/operations.md, The redrive policy)")
	fs.Var(heldCategories{&o.redrive}, "hold-category", "CATEGORY (repeatable or comma-separated): dead letters of CATEGORY wait for an operator's approval: no --redrive rule may name it, only dlq replay redrives them")
}

// validateRedrive checks --redrive and --hold-category.
func (o *options) validateRedrive() error {
	if err := o.redrive.Validate(); err != nil {
		return config.Invalid("redrive", "%v", err)
	}
	return nil
}

// newRedriver returns the redrive policy's service (every --every, with
// the admin actions of this instance), or nil when no rule is given.
func (a *app) newRedriver() (service, error) {
	if len(a.o.redrive.Rules) == 0 {
		return nil, nil
	}
	admin, err := a.newAdmin()
	if err != nil {
		return nil, err
	}
	r, err := operator.NewRedriver(admin, &operator.RedriverConfig{Policy: a.o.redrive, Every: a.o.every, Registerer: a.reg}, a.log)
	if err != nil {
		return nil, err
	}
	return r, nil
}
