package runner

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
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

// apiGolden lists the exported top-level names of each public package
// (TestPublicAPINames).
const apiGolden = "testdata/api.txt"

// TestPublicAPINames: the exported top-level names of each public package
// (functions, types, methods of exported types as Type.Method, constants,
// variables; test files left out) are those testdata/api.txt lists, so
// that the API grows or shrinks only by a deliberate change. After one,
// rewrite the list with OUTBOXD_UPDATE_API=1 go test -run
// TestPublicAPINames ./runner, and say it in CHANGELOG.md.
func TestPublicAPINames(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for _, pkg := range publicAPI {
		names := exportedNames(t, filepath.Join("..", pkg))
		fmt.Fprintf(&b, "# %s (%d)\n", pkg, len(names))
		for _, n := range names {
			b.WriteString(n + "\n")
		}
	}
	got := b.String()
	if os.Getenv("OUTBOXD_UPDATE_API") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(apiGolden), 0o755))
		require.NoError(t, os.WriteFile(apiGolden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(apiGolden)
	require.NoError(t, err)
	if got != string(want) {
		wantLines, gotLines := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		var added, removed []string
		for _, l := range gotLines {
			if !slices.Contains(wantLines, l) {
				added = append(added, l)
			}
		}
		for _, l := range wantLines {
			if !slices.Contains(gotLines, l) {
				removed = append(removed, l)
			}
		}
		t.Fatalf("the public API changed (added %q, removed %q): if you meant it, rewrite %s with OUTBOXD_UPDATE_API=1 "+
			"go test -run TestPublicAPINames ./runner, and update docs/api.md and CHANGELOG.md", added, removed, apiGolden)
	}
}

// exportedNames returns the exported top-level names of the package in
// dir, sorted: functions, types, constants, variables, and the methods of
// its exported types as Type.Method.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					names = append(names, d.Name.Name)
					continue
				}
				recv := d.Recv.List[0].Type
				if star, ok := recv.(*ast.StarExpr); ok {
					recv = star.X
				}
				switch r := recv.(type) {
				case *ast.IndexExpr:
					recv = r.X
				case *ast.IndexListExpr:
					recv = r.X
				}
				if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
					names = append(names, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	return names
}
