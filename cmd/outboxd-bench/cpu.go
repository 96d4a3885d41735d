package main

import (
	"time"

	"github.com/prometheus/procfs"
)

// machineCPU returns the CPU time every process of the machine has used
// since boot: /proc/stat's user, nice, system, irq, softirq and steal times
// (not idle or iowait), read with procfs. It returns 0 where /proc/stat
// cannot be read (not Linux); a stage then shows no CPU figure.
func machineCPU() time.Duration {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	st, err := fs.Stat()
	if err != nil {
		return 0
	}
	c := st.CPUTotal
	return time.Duration((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal) * float64(time.Second))
}

// span is what a stage took: the wall time, and the CPU time the whole
// machine used meanwhile — outboxd's processes, Redis, PostgreSQL and the
// bench's own clients alike, since on one machine they share its cores.
type span struct {
	wall, cpu time.Duration
}

// stopwatch times a span from its start.
type stopwatch struct {
	began time.Time
	cpu   time.Duration
}

// startWatch starts a stopwatch.
func startWatch() stopwatch { return stopwatch{began: time.Now(), cpu: machineCPU()} }

// stop returns the span since the start (cpu 0 when it could not be read).
func (w stopwatch) stop() span {
	sp := span{wall: time.Since(w.began)}
	if w.cpu > 0 {
		sp.cpu = machineCPU() - w.cpu
	}
	return sp
}

// cpuBusy returns the share of the machine's cores sp kept busy (0 when its
// CPU time could not be read).
func cpuBusy(sp span, cores int) float64 {
	if sp.wall <= 0 || cores <= 0 {
		return 0
	}
	return sp.cpu.Seconds() / (sp.wall.Seconds() * float64(cores))
}
