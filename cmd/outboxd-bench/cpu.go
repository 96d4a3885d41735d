package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/stat's times: USER_HZ, which Linux fixes at
// 100 for the /proc interface whatever the kernel's own tick rate
// (proc(5)).
const userHZ = 100

// machineCPU returns the CPU time every process of the machine has used
// since boot: the user, nice, system, irq, softirq and steal columns of
// /proc/stat's first line (not idle or iowait). It returns 0 where
// /proc/stat cannot be read (not Linux); a stage then shows no CPU figure.
func machineCPU() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0
	}
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system [idle iowait] irq softirq steal
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ
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
