package config

import (
	"os"
	"strconv"
)

// InstanceName is the default name of a component instance in a group
// (a consumer, a lease owner): "<hostname>-<pid>", with "-<n>" appended for
// the n-th (n > 1) instance of one process. fallback replaces an unknown
// hostname.
func InstanceName(fallback string, n int64) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = fallback
	}
	name := host + "-" + strconv.Itoa(os.Getpid())
	if n > 1 {
		name += "-" + strconv.FormatInt(n, 10)
	}
	return name
}
