package stream

import (
	"context"
	"errors"

	"github.com/outboxd/outboxd/outbox"
)

// Partitions returns the number of partitions of k's stream (1 when it is
// not split).
func (k Keys) Partitions() int { return max(k.partitions, 1) }

// PartitionIndex returns the partition k names (0 when the stream is not
// split).
func (k Keys) PartitionIndex() int { return k.partition }

// Split returns the keys of partition 0 of k's stream split into n
// partitions (k unchanged for n ≤ 1): the keys a component that serves
// the whole stream is built with. A Publisher on them writes each event of
// PublishEvents into its own partition (ForEvent); AllPartitions lists
// every partition's keys.
func (k Keys) Split(n int) Keys { return k.Partition(0, n) }

// ForEvent returns the keys of the partition that the events of sourceKey
// and deviceKey belong to (outbox.PartitionOf), in k's lane.
func (k Keys) ForEvent(sourceKey, deviceKey string) Keys {
	n := k.Partitions()
	return k.Partition(outbox.PartitionOf(sourceKey, deviceKey, n), n)
}

// Routed returns the keys of the stream of the events of typ (routes'
// stream for it, k's own stream for a type without a route), in k's lane,
// partition and group.
func (k Keys) Routed(routes outbox.Routes, typ string) Keys {
	k.name = routes.StreamOf(typ, k.name)
	return k
}

// AllPartitions returns the keys of every partition of k's stream, in
// partition order, in k's lane (k alone when the stream is not split).
func (k Keys) AllPartitions() []Keys {
	n := k.Partitions()
	out := make([]Keys, n)
	for p := range out {
		out[p] = k.Partition(p, n)
	}
	return out
}

// Partition returns a Publisher that writes into partition i of n of p's
// stream, sharing p's circuit breaker: the dispatcher relays each
// partition through one.
func (p *Publisher) Partition(i, n int) *Publisher {
	q := *p
	q.keys = p.keys.Partition(i, n)
	return &q
}

// publishByPartition adds each of msgs (the messages of events) to the
// stream of its event's partition (of its type's stream, with routes), one
// pipeline per partition (a pipeline of one partition's keys stays in one
// slot of a Redis Cluster). The *PublishError it returns, if any, is in
// the order of msgs.
func (p *Publisher) publishByPartition(ctx context.Context, events []*outbox.Event, msgs []string) error {
	byKeys := map[Keys][]int{}
	var order []Keys
	for i, ev := range events {
		k := p.keys.Routed(p.routes, ev.Type).ForEvent(ev.SourceKey, ev.DeviceKey)
		if _, ok := byKeys[k]; !ok {
			order = append(order, k)
		}
		byKeys[k] = append(byKeys[k], i)
	}
	errs := make([]error, len(msgs))
	failed := false
	for _, k := range order {
		idx := byKeys[k]
		part := make([]string, len(idx))
		for j, i := range idx {
			part[j] = msgs[i]
		}
		err := p.publish(ctx, k, part)
		if err == nil {
			continue
		}
		failed = true
		var pe *PublishError
		for j, i := range idx {
			switch {
			case errors.As(err, &pe) && j < len(pe.Errs):
				errs[i] = pe.Errs[j]
			default:
				errs[i] = err
			}
		}
	}
	if !failed {
		return nil
	}
	return &PublishError{Errs: errs}
}

// AllFigures returns Figures summed over every partition of keys' stream
// (Figures of keys itself when it is not split): lengths, pending counts,
// lags and reads add up, the oldest dead letter is the oldest of all, the
// halts are every partition's, and an error of any partition is the part's
// error. One round trip per partition (each in its own slot).
func (c *Client) AllFigures(ctx context.Context, keys Keys) Figures {
	all := keys.AllPartitions()
	if len(all) == 1 {
		return c.Figures(ctx, keys)
	}
	var out Figures
	lag := int64(0)
	lagKnown := true
	for _, k := range all {
		f := c.Figures(ctx, k)
		out.Length += f.Length
		out.Pending += f.Pending
		out.StreamErr = cmpErr(out.StreamErr, f.StreamErr)
		out.Replay.Length += f.Replay.Length
		out.Replay.Pending += f.Replay.Pending
		out.Replay.Read += f.Replay.Read
		out.Replay.Err = cmpErr(out.Replay.Err, f.Replay.Err)
		if f.Replay.Lag == nil {
			lagKnown = false
		} else {
			lag += *f.Replay.Lag
		}
		out.Halts = append(out.Halts, f.Halts...)
		out.HaltsErr = cmpErr(out.HaltsErr, f.HaltsErr)
		out.DLQLength += f.DLQLength
		if f.DLQOldest != nil && (out.DLQOldest == nil || f.DLQOldest.Before(*out.DLQOldest)) {
			out.DLQOldest = f.DLQOldest
		}
		out.DLQErr = cmpErr(out.DLQErr, f.DLQErr)
	}
	if lagKnown {
		out.Replay.Lag = &lag
	}
	return out
}

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}
