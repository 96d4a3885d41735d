//go:build !unix

package httpapi

// fileLimit is the process's limit of open files: 1024 where it cannot be
// read.
func fileLimit() uint64 { return 1024 }
