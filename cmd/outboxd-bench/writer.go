package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The SQLite store's writer histograms (cmd/outboxd, sqlitestore.Options):
// per role, the wait for the write connection and lock, and the time the
// transaction then held it.
const (
	writerWaitMetric = "outboxd_store_writer_wait_seconds"
	writerHeldMetric = "outboxd_store_writer_held_seconds"
)

// The worker's histograms of its batches (worker/metrics.go).
const (
	workerBatchMetric      = "outboxd_worker_batch_entries"
	workerProjectionMetric = "outboxd_worker_projection_seconds"
)

// WorkerBatches is what the worker's batches were during a stage: how
// many, their mean size, and their PostgreSQL transaction.
type WorkerBatches struct {
	Batches          int64   `json:"batches"`
	MeanEntries      float64 `json:"meanEntries"`
	ProjectionMeanMs float64 `json:"projectionMeanMs"`
	// ProjectionP99Ms is the upper bound of the bucket of the 99th
	// percentile.
	ProjectionP99Ms float64 `json:"projectionP99Ms"`
	// ProjectionTotalS is the time every transaction took, in seconds.
	ProjectionTotalS float64 `json:"projectionTotalS"`
}

// String renders b on one line.
func (b *WorkerBatches) String() string {
	return fmt.Sprintf("%d batches, mean %.1f entries; PostgreSQL transaction mean %.2f ms, p99 ≤ %.1f ms, %.2f s in all",
		b.Batches, b.MeanEntries, b.ProjectionMeanMs, b.ProjectionP99Ms, b.ProjectionTotalS)
}

// merge returns what the batches of b and o were together (either nil:
// the other): the workers of one stage.
func (b *WorkerBatches) merge(o *WorkerBatches) *WorkerBatches {
	if b == nil || o == nil {
		return cmp.Or(b, o)
	}
	n := b.Batches + o.Batches
	total := b.ProjectionTotalS + o.ProjectionTotalS
	return &WorkerBatches{
		Batches:          n,
		MeanEntries:      (b.MeanEntries*float64(b.Batches) + o.MeanEntries*float64(o.Batches)) / float64(n),
		ProjectionMeanMs: total / float64(n) * 1e3,
		ProjectionP99Ms:  max(b.ProjectionP99Ms, o.ProjectionP99Ms),
		ProjectionTotalS: total,
	}
}

// parseWorkerBatches reads the worker's histograms (one series: the
// stage's stream); nil when the process processed no batch.
func parseWorkerBatches(r io.Reader) (*WorkerBatches, error) {
	series, err := parseHistograms(r, "", workerBatchMetric, workerProjectionMetric)
	if err != nil {
		return nil, err
	}
	batch, proj := series[workerBatchMetric][""], series[workerProjectionMetric][""]
	if batch == nil || batch.count == 0 {
		return nil, nil
	}
	b := &WorkerBatches{Batches: batch.count, MeanEntries: batch.sum / float64(batch.count)}
	if proj != nil && proj.count > 0 {
		b.ProjectionMeanMs, b.ProjectionP99Ms, b.ProjectionTotalS = proj.sum/float64(proj.count)*1e3, proj.quantile(0.99)*1e3, proj.sum
	}
	return b, nil
}

// WriterRole is what one role's write transactions spent on the SQLite
// store's one writer during a stage.
type WriterRole struct {
	Role         string `json:"role"`
	Transactions int64  `json:"transactions"`
	// WaitMeanMs and HeldMeanMs are the mean wait for the writer and the
	// mean time held; WaitP99Ms the upper bound of the histogram bucket
	// that holds the 99th percentile of the wait (at most the largest
	// finite bound, 0.8 s).
	WaitMeanMs float64 `json:"waitMeanMs"`
	WaitP99Ms  float64 `json:"waitP99Ms"`
	HeldMeanMs float64 `json:"heldMeanMs"`
	// WaitTotalS and HeldTotalS are the sums, in seconds.
	WaitTotalS float64 `json:"waitTotalS"`
	HeldTotalS float64 `json:"heldTotalS"`
}

// String renders r on one line.
func (r *WriterRole) String() string {
	return fmt.Sprintf("%s %d transactions, wait mean %.2f ms, p99 ≤ %.2f ms (%.2f s in all), held mean %.2f ms (%.2f s)",
		r.Role, r.Transactions, r.WaitMeanMs, r.WaitP99Ms, r.WaitTotalS, r.HeldMeanMs, r.HeldTotalS)
}

// histogram is one series of a Prometheus histogram as the text format
// gives it.
type histogram struct {
	les        []float64
	cumulative []int64
	sum        float64
	count      int64
}

// quantile returns the upper bound of the bucket holding quantile q, at
// most the largest finite bound.
func (h *histogram) quantile(q float64) float64 {
	want := int64(math.Ceil(q * float64(h.count)))
	top := 0.0
	for i, c := range h.cumulative {
		if !math.IsInf(h.les[i], 1) {
			top = h.les[i]
		}
		if c >= want {
			return top
		}
	}
	return top
}

// parseHistograms reads the histograms names from Prometheus's text
// format: by metric, then by the value of label by (one series per value;
// "" when the series has no such label).
func parseHistograms(r io.Reader, by string, names ...string) (map[string]map[string]*histogram, error) {
	series := map[string]map[string]*histogram{}
	for _, n := range names {
		series[n] = map[string]*histogram{}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		metric, suffix := "", ""
		for m := range series {
			if rest, ok := strings.CutPrefix(line, m+"_"); ok {
				metric, suffix = m, rest
			}
		}
		if metric == "" {
			continue
		}
		kind, rest, labelled := strings.Cut(suffix, "{")
		labels, value := "", ""
		if labelled {
			labels, value, _ = strings.Cut(rest, "} ")
		} else {
			kind, value, _ = strings.Cut(suffix, " ")
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("error parsing %q: %w", line, err)
		}
		key := ""
		if by != "" {
			key = label(labels, by)
		}
		h := series[metric][key]
		if h == nil {
			h = &histogram{}
			series[metric][key] = h
		}
		switch kind {
		case "bucket":
			bound, err := strconv.ParseFloat(label(labels, "le"), 64)
			if err != nil {
				return nil, fmt.Errorf("error parsing %q: %w", line, err)
			}
			h.les, h.cumulative = append(h.les, bound), append(h.cumulative, int64(v))
		case "sum":
			h.sum = v
		case "count":
			h.count = int64(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return series, nil
}

// parseWriterRoles reads the writer histograms from Prometheus's text
// format, one WriterRole per role, by role.
func parseWriterRoles(r io.Reader) ([]WriterRole, error) {
	series, err := parseHistograms(r, "role", writerWaitMetric, writerHeldMetric)
	if err != nil {
		return nil, err
	}
	var out []WriterRole
	for role, wait := range series[writerWaitMetric] {
		if wait.count == 0 {
			continue
		}
		w := WriterRole{Role: role, Transactions: wait.count, WaitTotalS: wait.sum,
			WaitMeanMs: wait.sum / float64(wait.count) * 1e3, WaitP99Ms: wait.quantile(0.99) * 1e3}
		if held := series[writerHeldMetric][role]; held != nil && held.count > 0 {
			w.HeldTotalS, w.HeldMeanMs = held.sum, held.sum/float64(held.count)*1e3
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b WriterRole) int { return strings.Compare(a.Role, b.Role) })
	return out, nil
}

// label returns the value of label name in a Prometheus label list
// (`a="x",b="y"`), or "".
func label(labels, name string) string {
	_, v, ok := strings.Cut(","+labels, ","+name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// printWriter prints the writer of a stage, a line per role.
func printWriter(w io.Writer, stage string, roles []WriterRole) {
	for i := range roles {
		fmt.Fprintf(w, "%s store writer: %s\n", stage, &roles[i])
	}
}
