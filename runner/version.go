package runner

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the version of outboxd (CHANGELOG.md; docs/api.md says what it
// promises). A release build may set it with
// -ldflags "-X github.com/outboxd/outboxd/runner.Version=…".
var Version = "0.1.0"

// versionLine is what `outboxd version` prints: the version, the Go
// release and, when the build recorded it, the commit (with "+dirty" for
// a build from a modified tree).
func versionLine() string {
	line := fmt.Sprintf("outboxd %s %s", Version, runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			line += " commit " + rev + dirty
		}
	}
	return line
}

// printVersion is `outboxd version`.
func (a *app) printVersion() error {
	_, err := fmt.Fprintln(a.stdout, versionLine())
	return err
}
