//go:build unix

package httpapi

import "golang.org/x/sys/unix"

// fileLimit is the process's limit of open files (RLIMIT_NOFILE, as Go
// raised it at start), 1024 when it cannot be read.
func fileLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1024
	}
	return rl.Cur
}
