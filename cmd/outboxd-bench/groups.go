package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// groupMetric is the histogram of ingest's group commit: events per shared
// store transaction (cmd/outboxd, outbox.Committer).
const groupMetric = "outboxd_ingest_group_events"

// GroupSizes is the histogram of a stage's group commit: how many store
// transactions (groups) wrote its single-event requests, and how many
// events each held.
type GroupSizes struct {
	Groups int64   `json:"groups"`
	Events float64 `json:"events"`
	// Mean is Events / Groups.
	Mean float64 `json:"mean"`
	// Buckets count the groups of each size range (not cumulative): Le is
	// the range's upper bound ("+Inf" for the last).
	Buckets []GroupBucket `json:"buckets"`
}

// GroupBucket is one range of GroupSizes.
type GroupBucket struct {
	Le     string `json:"le"`
	Groups int64  `json:"groups"`
}

// String renders the histogram on one line: "groups 1,234, mean 3.1
// events: ≤1 100, ≤2 300, …" (empty ranges left out).
func (g *GroupSizes) String() string {
	parts := make([]string, 0, len(g.Buckets))
	for _, b := range g.Buckets {
		if b.Groups > 0 {
			parts = append(parts, fmt.Sprintf("≤%s %d", b.Le, b.Groups))
		}
	}
	return fmt.Sprintf("%d groups, mean %.1f events: %s", g.Groups, g.Mean, strings.Join(parts, ", "))
}

// scraped is what a stage reads from its process's /metrics.
type scraped struct {
	groups *GroupSizes  // nil when the process wrote no group
	writer []WriterRole // empty when no write was observed
	worker *WorkerBatches
}

// scrapeMetrics reads the process's /metrics: the group-commit histogram,
// the SQLite writer's wait by role and the worker's batches.
func scrapeMetrics(ctx context.Context, p *proc) (scraped, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url("/metrics"), nil)
	if err != nil {
		return scraped{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return scraped{}, fmt.Errorf("error reading the metrics of %s: %w", p.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return scraped{}, fmt.Errorf("error reading the metrics of %s: %s", p.name, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return scraped{}, fmt.Errorf("error reading the metrics of %s: %w", p.name, err)
	}
	var out scraped
	if out.groups, err = parseGroupSizes(bytes.NewReader(body)); err != nil {
		return scraped{}, err
	}
	if out.writer, err = parseWriterRoles(bytes.NewReader(body)); err != nil {
		return scraped{}, err
	}
	out.worker, err = parseWorkerBatches(bytes.NewReader(body))
	return out, err
}

// parseGroupSizes reads groupMetric from Prometheus's text format (one
// series: the stage's stream).
func parseGroupSizes(r io.Reader) (*GroupSizes, error) {
	series, err := parseHistograms(r, "", groupMetric)
	if err != nil {
		return nil, err
	}
	h := series[groupMetric][""]
	if h == nil || h.count == 0 {
		return nil, nil
	}
	g := &GroupSizes{Groups: h.count, Events: h.sum, Mean: h.sum / float64(h.count)}
	var below int64
	for i, c := range h.cumulative {
		g.Buckets = append(g.Buckets, GroupBucket{Le: strconv.FormatFloat(h.les[i], 'g', -1, 64), Groups: c - below})
		below = c
	}
	return g, nil
}
