package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// latencyBucketsMs are the upper bounds of the latency histogram's ranges
// (ms); a last range holds the rest.
var latencyBucketsMs = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}

// LatencyBucket is one range of the latency histogram: the events whose
// latency is at most UpToMs and above the previous range's (UpToMs 0: the
// rest, above the last bound).
type LatencyBucket struct {
	UpToMs float64 `json:"upToMs"`
	Events int     `json:"events"`
}

// latencyHistogram counts d by latencyBucketsMs.
func latencyHistogram(d []time.Duration) []LatencyBucket {
	out := make([]LatencyBucket, len(latencyBucketsMs)+1)
	for i, b := range latencyBucketsMs {
		out[i].UpToMs = b
	}
	for _, v := range d {
		ms := msOf(v)
		i := 0
		for i < len(latencyBucketsMs) && ms > latencyBucketsMs[i] {
			i++
		}
		out[i].Events++
	}
	return out
}

// Chart geometry (px).
const (
	chartWidth  = 1000
	chartLeft   = 120 // room for the labels
	chartRight  = 340 // room for the figures
	rowHeight   = 34
	barHeight   = 12
	panelGap    = 40
	histHeight  = 180
	fontFamily  = "sans-serif"
	colourStage = "#2b6cb0"
	colourLimit = "#cbd5e0"
	colourHist  = "#dd6b20"
)

// SVG renders the results as one SVG picture (bench-results.svg): each
// stage's rate beside the rate of the limit it is bound by (both on one
// scale per row: the longer of the two spans the plot), with its ratio and
// its CPU per event (the stage's processes, PostgreSQL, Redis, the whole
// machine) where it was measured; then the latency stage's
// distribution of ingest → syncedAt, with its p50 and p99. The standard
// library writes it; any browser shows it.
func (r *Results) SVG() []byte {
	var b bytes.Buffer
	plot := float64(chartWidth - chartLeft - chartRight)
	stagesTop := 60
	histTop := stagesTop + len(r.Stages)*rowHeight + panelGap + 30
	height := stagesTop + len(r.Stages)*rowHeight + 20
	if r.Latency != nil && len(r.Latency.Histogram) > 0 {
		height = histTop + histHeight + 60
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height, fontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(&b, 10, 22, "start", "bold", 15, fmt.Sprintf("outboxd benchmark: %d events, %s, %s", r.Events, r.Machine, r.StartedAt.Format("2006-01-02 15:04 MST")))
	text(&b, 10, 44, "start", "normal", 12, "each stage's events/s (blue) beside the raw limit it is bound by (grey), measured in the same run; under it the CPU per event")
	for i, s := range r.Stages {
		y := float64(stagesTop + i*rowHeight)
		top := math.Max(s.EventsPerSecond, s.LimitEventsPerSecond)
		scale := 0.0
		if top > 0 {
			scale = plot / top
		}
		text(&b, chartLeft-10, y+barHeight, "end", "normal", 12, s.Name)
		rect(&b, chartLeft, y, s.LimitEventsPerSecond*scale, barHeight, colourLimit, "limit "+s.LimitName)
		rect(&b, chartLeft, y+barHeight+2, s.EventsPerSecond*scale, barHeight, colourStage, s.Name)
		label := fmt.Sprintf("%s of %s ev/s (%s), ratio %.2f", thousands(s.EventsPerSecond), thousands(s.LimitEventsPerSecond), s.LimitName, s.Ratio)
		if s.LimitEventsPerSecond == 0 {
			label = thousands(s.EventsPerSecond) + " ev/s"
		}
		text(&b, chartLeft+plot+8, y+barHeight+4, "start", "normal", 11, label)
		if c := s.CPU; c != nil {
			text(&b, chartLeft+plot+8, y+barHeight+17, "start", "normal", 10, cpuLabel(c))
		}
	}
	if l := r.Latency; l != nil && len(l.Histogram) > 0 {
		r.latencyPanel(&b, float64(histTop), plot+float64(chartRight)-20)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// cpuLabel is a stage's CPU per event, as the chart shows it under the
// stage's rate.
func cpuLabel(c *CPUPerEvent) string {
	return fmt.Sprintf("CPU µs/event: process %s · PostgreSQL %s · Redis %s · machine %s",
		thousands(c.Process), thousands(c.Postgres), thousands(c.Redis), thousands(c.Machine))
}

// latencyPanel draws the latency histogram at top, width wide.
func (r *Results) latencyPanel(b *bytes.Buffer, top, width float64) {
	l := r.Latency
	text(b, 10, top-14, "start", "bold", 13, fmt.Sprintf("ingest → syncedAt at %.0f events/s offered (%.0f/s achieved, %d events): p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms",
		l.OfferedEventsPerSecond, l.AchievedEventsPerSecond, l.Events, l.P50Ms, l.P95Ms, l.P99Ms, l.MaxMs))
	most := 0
	for _, h := range l.Histogram {
		most = max(most, h.Events)
	}
	n := float64(len(l.Histogram))
	slot := width / n
	base := top + histHeight
	line(b, chartLeft, base, chartLeft+width, base, "#4a5568")
	for i, h := range l.Histogram {
		x := chartLeft + float64(i)*slot
		bar := 0.0
		if most > 0 {
			bar = float64(h.Events) / float64(most) * (histHeight - 16)
		}
		name := "≤" + trimMs(h.UpToMs)
		if h.UpToMs == 0 {
			name = ">" + trimMs(latencyBucketsMs[len(latencyBucketsMs)-1])
		}
		rect(b, x+4, base-bar, slot-8, bar, colourHist, fmt.Sprintf("%s ms: %d events", name, h.Events))
		if h.Events > 0 {
			text(b, x+slot/2, base-bar-4, "middle", "normal", 10, thousands(float64(h.Events)))
		}
		text(b, x+slot/2, base+14, "middle", "normal", 11, name)
	}
	text(b, chartLeft-10, base+14, "end", "normal", 11, "ms")
	text(b, chartLeft-10, top+12, "end", "normal", 11, "events")
	// The percentiles, placed in their range (linear inside it).
	for i, p := range []struct {
		name string
		ms   float64
	}{{"p50", l.P50Ms}, {"p99", l.P99Ms}} {
		x := chartLeft + percentileX(p.ms)*slot
		line(b, x, top, x, base, "#1a202c")
		text(b, x+3, top+10+float64(i)*14, "start", "bold", 11, fmt.Sprintf("%s %.1f ms", p.name, p.ms))
	}
}

// percentileX is where ms falls on the histogram's axis, in slots.
func percentileX(ms float64) float64 {
	lo := 0.0
	for i, hi := range latencyBucketsMs {
		if ms <= hi {
			return float64(i) + (ms-lo)/(hi-lo)
		}
		lo = hi
	}
	return float64(len(latencyBucketsMs)) + 0.5
}

func trimMs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gs", v/1000)
	}
	return fmt.Sprintf("%g", v)
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			out.WriteByte(',')
		}
		out.WriteRune(c)
	}
	return out.String()
}

func text(b *bytes.Buffer, x, y float64, anchor, weight string, size int, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-weight="%s" font-size="%d">%s</text>`+"\n", x, y, anchor, weight, size, escape(s))
}

func rect(b *bytes.Buffer, x, y, w, h float64, fill, title string) {
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n", x, y, math.Max(w, 0), math.Max(h, 0), fill, escape(title))
}

func line(b *bytes.Buffer, x1, y1, x2, y2 float64, stroke string) {
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", x1, y1, x2, y2, stroke)
}

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// WriteSVG writes the chart to path.
func (r *Results) WriteSVG(path string) error {
	if err := os.WriteFile(path, r.SVG(), 0o644); err != nil {
		return fmt.Errorf("error writing %s: %w", path, err)
	}
	return nil
}
