package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// publicAPI are the packages other modules may import (docs/api.md); every
// other package of the module is a command or lives under internal/.
var publicAPI = []string{
	"dispatcher",
	"migrations",
	"outbox",
	"projection",
	"reconciler",
	"runner",
	"store",
	"store/mongostore",
	"store/sqlitestore",
	"store/storetest",
	"worker",
}

const modulePath = "github.com/outboxd/outboxd"

// TestPublicAPI: the packages a module outside this one can import are
// exactly the declared API, each of them builds there, and a plumbing
// package (internal/...) does not.
func TestPublicAPI(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", modulePath+"/...").Output()
	require.NoError(t, err)
	var importable []string
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		path, name, _ := strings.Cut(strings.TrimSpace(line), " ")
		rel := strings.TrimPrefix(strings.TrimPrefix(path, modulePath), "/")
		if name == "main" || strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/") {
			continue
		}
		importable = append(importable, rel)
	}
	slices.Sort(importable)
	require.Equal(t, publicAPI, importable,
		"a new importable package is API: declare it in docs/api.md and here, or move it under internal/")

	// A scratch module that imports the module by a replace directive: the
	// API builds, internal/stream is refused by the go command.
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), gosum, 0o644))
	gomod := "module scratch\n\ngo 1.26\n\nrequire " + modulePath + " v0.0.0\n\nreplace " + modulePath + " => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	write := func(imports ...string) {
		var b strings.Builder
		b.WriteString("package main\n\nimport (\n")
		for _, p := range imports {
			b.WriteString("\t_ \"" + modulePath + "/" + p + "\"\n")
		}
		b.WriteString(")\n\nfunc main() {}\n")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.String()), 0o644))
	}
	goCmd := func(args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	write(publicAPI...)
	out2, err := goCmd("vet", ".")
	require.NoError(t, err, "the public API does not build from another module:\n%s", out2)
	write("internal/stream")
	out2, err = goCmd("vet", ".")
	require.Error(t, err)
	require.Contains(t, out2, "use of internal package")
}
