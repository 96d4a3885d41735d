package testkit

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// RequireNoDeps fails t when pkg (an import path), or anything it imports
// directly or through others, is a package under one of prefixes: the
// transitive check that depguard's direct-import rules cannot make. It runs
// `go list -deps` on the production files of pkg (tests excluded), so it
// needs the go command, which `go test` has.
func RequireNoDeps(t testing.TB, pkg string, prefixes ...string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	require.NoError(t, err, "go list -deps %s: %s", pkg, out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, pkg, "go list names the package itself")
	var found []string
	for _, dep := range deps {
		for _, p := range prefixes {
			if dep == p || strings.HasPrefix(dep, strings.TrimSuffix(p, "/")+"/") {
				found = append(found, dep)
			}
		}
	}
	require.Empty(t, found, "%s must not depend on %s", pkg, strings.Join(prefixes, ", "))
}
