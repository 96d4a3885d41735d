package main

import (
	"os"
	"time"

	"github.com/prometheus/procfs"
)

// userHZ is the clock ticks per second of /proc/PID/stat's times (the
// kernel's USER_HZ, 100 on every Linux procfs serves).
const userHZ = 100

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

// serverCPU is the CPU time PostgreSQL's and Redis's processes have used,
// by pid: every live process named postgres (the postmaster, its backends
// and workers; the postmaster's count includes its reaped children, so a
// backend of a closed connection counts there) and redis-server.
type serverCPU struct {
	postgres, redis map[int]time.Duration
}

// readServerCPU reads serverCPU from /proc (empty where it cannot).
func readServerCPU() serverCPU {
	out := serverCPU{postgres: map[int]time.Duration{}, redis: map[int]time.Duration{}}
	procs, err := procfs.AllProcs()
	if err != nil {
		return out
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue
		}
		used := (time.Duration(st.UTime+st.STime) + time.Duration(st.CUTime+st.CSTime)) * time.Second / userHZ
		switch st.Comm {
		case "postgres":
			out.postgres[p.PID] = used
		case "redis-server":
			out.redis[p.PID] = used
		}
	}
	return out
}

// since returns the CPU time the processes of now used since then: each
// one's growth (a process new since then counts whole; one that exited
// meanwhile is lost, so the figure is never negative, at worst short).
func since(then, now map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, used := range now {
		d += max(0, used-then[pid])
	}
	return d
}

// pidCPU returns the CPU time process pid has used (its threads, and its
// reaped children), 0 when it cannot be read.
func pidCPU(pid int) time.Duration {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return time.Duration(st.UTime+st.STime+uint(st.CUTime+st.CSTime)) * time.Second / userHZ
}

// span is what a stage took: the wall time, the CPU time the whole machine
// used meanwhile — outboxd's processes, Redis, PostgreSQL and the bench's
// own clients alike, since on one machine they share its cores — and that
// of the stage's processes, PostgreSQL, Redis and the harness itself.
type span struct {
	wall, cpu time.Duration
	// proc is the stage's processes' CPU time (0: none given).
	proc            time.Duration
	postgres, redis time.Duration
	// harness is the bench process's own (the load generator's).
	harness time.Duration
}

// stopwatch times a span from its start.
type stopwatch struct {
	began   time.Time
	cpu     time.Duration
	servers serverCPU
	harness time.Duration
	// procs is the CPU time of the processes running at the start.
	procs map[int]time.Duration
}

// startWatch starts a stopwatch; procs are the stage's processes running
// already (those started later count from zero).
func startWatch(procs ...*proc) stopwatch {
	w := stopwatch{began: time.Now(), cpu: machineCPU(), servers: readServerCPU(), harness: pidCPU(os.Getpid()), procs: map[int]time.Duration{}}
	for _, p := range procs {
		w.procs[p.pid()] = pidCPU(p.pid())
	}
	return w
}

// stop returns the span since the start (cpu 0 when it could not be read),
// with the CPU time procs, the stage's processes, used since the start
// (read now: call it before they stop).
func (w stopwatch) stop(procs ...*proc) span {
	sp := span{wall: time.Since(w.began)}
	if w.cpu > 0 {
		sp.cpu = machineCPU() - w.cpu
	}
	s := readServerCPU()
	sp.postgres, sp.redis = since(w.servers.postgres, s.postgres), since(w.servers.redis, s.redis)
	sp.harness = pidCPU(os.Getpid()) - w.harness
	for _, p := range procs {
		sp.proc += pidCPU(p.pid()) - w.procs[p.pid()]
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
