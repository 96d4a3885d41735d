package runner

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// retentions is a repeatable flag of retentions by key: KEY=DURATION
// (--event-retention-type, --event-retention-source). A value without
// "=", with an empty key, a duration Go cannot read, a negative one or a
// key given twice is an error at start; the bounds of the durations are
// dispatcher.Config's (EventRetentionTypeShortest).
type retentions map[string]time.Duration

func (r *retentions) String() string {
	if r == nil || *r == nil {
		return ""
	}
	parts := make([]string, 0, len(*r))
	for _, k := range slices.Sorted(maps.Keys(*r)) {
		parts = append(parts, k+"="+(*r)[k].String())
	}
	return strings.Join(parts, ",")
}

// Set adds the KEY=DURATION pairs of v, separated by commas.
func (r *retentions) Set(v string) error {
	for pair := range strings.SplitSeq(v, ",") {
		if err := r.add(pair); err != nil {
			return err
		}
	}
	return nil
}

// add adds one KEY=DURATION.
func (r *retentions) add(pair string) error {
	key, d, ok := strings.Cut(pair, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("want KEY=DURATION, e.g. audit=720h (got %q)", pair)
	}
	keep, err := time.ParseDuration(strings.TrimSpace(d))
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if keep < 0 {
		return fmt.Errorf("%s: the retention must not be negative (got %s)", key, keep)
	}
	if _, dup := (*r)[key]; dup {
		return errors.New(key + " is given twice")
	}
	if *r == nil {
		*r = retentions{}
	}
	(*r)[key] = keep
	return nil
}

// retentionByKeyFlags registers --event-retention-type and
// --event-retention-source (the dispatch roles and migrate, as
// --outbox-retention).
func (o *options) retentionByKeyFlags(fs *flag.FlagSet) {
	fs.Var(&o.eventRetentionTypes, "event-retention-type", "TYPE=DURATION: keep the synced originals of this type this long instead of --event-retention "+
		"(0: forever); repeat it, or separate pairs with commas. The dispatcher's leader deletes them (docs/operations.md, Retention)")
	fs.Var(&o.eventRetentionSources, "event-retention-source", "SOURCE=DURATION: keep the synced originals of this sourceKey this long instead of --event-retention, "+
		"unless their type has a retention of its own (0: forever); repeat it, or separate pairs with commas")
}

// ttlEventRetention is the retention of MongoDB's TTL index of synced
// originals that migrate sets: --event-retention without retentions by
// type or source; with them, the longest of all, so that the index never
// deletes an original before its own retention (the dispatcher's leader
// deletes the rest), and none (0) when any of them, or --event-retention,
// keeps originals forever.
func (o *options) ttlEventRetention() time.Duration {
	ttl := o.eventRetention
	for _, m := range []retentions{o.eventRetentionTypes, o.eventRetentionSources} {
		for _, keep := range m {
			if keep == 0 || ttl == 0 {
				return 0
			}
			ttl = max(ttl, keep)
		}
	}
	return ttl
}
