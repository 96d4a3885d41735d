package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ociLabels are the image's OCI annotations the Dockerfile must set.
var ociLabels = []string{"title", "description", "source", "version", "revision", "created"}

// instruction is one instruction of a Dockerfile, continuation lines
// joined.
type instruction struct {
	cmd, args string
}

// stage is one FROM and the instructions after it.
type stage struct {
	image, name string
	ins         []instruction
}

// parseDockerfile splits a Dockerfile into its stages, with the ARG
// defaults declared before the first FROM substituted into the FROM lines.
func parseDockerfile(text string) ([]stage, error) {
	var joined []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		joined = append(joined, cur+trimmed)
		cur = ""
	}
	args := map[string]string{}
	var stages []stage
	for _, l := range joined {
		cmd, rest, _ := strings.Cut(l, " ")
		cmd, rest = strings.ToUpper(cmd), strings.TrimSpace(rest)
		switch {
		case cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case cmd == "FROM":
			fields := strings.Fields(rest)
			fields = slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--") })
			if len(fields) == 0 {
				return nil, fmt.Errorf("FROM without an image")
			}
			st := stage{image: os.Expand(fields[0], func(k string) string { return args[k] })}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			return nil, fmt.Errorf("%s before the first FROM", cmd)
		default:
			last := &stages[len(stages)-1]
			last.ins = append(last.ins, instruction{cmd: cmd, args: rest})
		}
	}
	return stages, nil
}

// goDirective reads go.mod's go and toolchain lines.
func goDirective(gomod string) (goLine, toolchain string) {
	for _, l := range strings.Split(gomod, "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goLine = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "toolchain go"); ok {
			toolchain = strings.TrimSpace(v)
		}
	}
	return goLine, toolchain
}

var goImageTag = regexp.MustCompile(`^golang:(\d+)\.(\d+)\.(\d+)(-[a-z0-9.]+)?$`)

// checkDockerfile holds a Dockerfile to the rules of docs/deploy.md.
func checkDockerfile(text, gomod string) []error {
	stages, err := parseDockerfile(text)
	if err != nil {
		return []error{err}
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if len(stages) < 2 {
		return []error{fmt.Errorf("%d stage(s): build in a Go stage and copy the binary into a final one", len(stages))}
	}
	build, final := stages[0], stages[len(stages)-1]

	// The build stage: the pinned Go, a static binary.
	goLine, toolchain := goDirective(gomod)
	m := goImageTag.FindStringSubmatch(build.image)
	if m == nil {
		fail("the build stage is %s: it must be golang:X.Y.Z, Go pinned to a patch release", build.image)
	} else {
		version := m[1] + "." + m[2] + "." + m[3]
		minor, patch := m[1]+"."+m[2], m[3]
		want := strings.SplitN(goLine+".0.0", ".", 4)
		p, _ := strconv.Atoi(patch)
		wantPatch, _ := strconv.Atoi(want[2])
		switch {
		case toolchain != "" && version != toolchain:
			fail("the build stage's Go %s is not go.mod's toolchain %s", version, toolchain)
		case minor != want[0]+"."+want[1] || p < wantPatch:
			fail("the build stage's Go %s does not build go.mod's go %s (same minor release, at least that patch)", version, goLine)
		}
	}
	var goBuild, binOut string
	for _, in := range build.ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
			if f := strings.Fields(goBuild); slices.Index(f, "-o") >= 0 && slices.Index(f, "-o")+1 < len(f) {
				binOut = f[slices.Index(f, "-o")+1]
			}
		}
	}
	switch {
	case goBuild == "":
		fail("the build stage runs no go build")
	case !strings.Contains(goBuild, "CGO_ENABLED=0"):
		fail("go build must run with CGO_ENABLED=0: a static binary for an image without libc")
	case !strings.Contains(goBuild, "-trimpath"):
		fail("go build must use -trimpath")
	case !strings.Contains(goBuild, "./cmd/outboxd"):
		fail("go build must build ./cmd/outboxd")
	}

	// The final stage: no shell, a numeric non-root user, the binary as
	// the entrypoint, OCI labels.
	if final.image != "scratch" && !strings.HasPrefix(final.image, "gcr.io/distroless/static") {
		fail("the final stage is %s: it must be distroless static or scratch, an image without a shell", final.image)
	}
	labels := map[string]bool{}
	var user, entrypoint, binDest string
	for _, in := range final.ins {
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "LABEL":
			for _, m := range regexp.MustCompile(`org\.opencontainers\.image\.([a-z]+)=`).FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = true
			}
		case "COPY":
			// The COPY of what go build wrote (-o).
			fields := strings.Fields(in.args)
			if len(fields) >= 2 && binOut != "" && fields[len(fields)-2] == binOut {
				binDest = fields[len(fields)-1]
			}
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		fail("USER %q: the final stage must run as a numeric non-root user (Kubernetes' runAsNonRoot checks the number)", user)
	}
	var ep []string
	if json.Unmarshal([]byte(entrypoint), &ep) != nil || !slices.Equal(ep, []string{"outboxd"}) {
		fail(`ENTRYPOINT %s: it must be ["outboxd"], the exec form (there is no shell to run another)`, entrypoint)
	}
	if dir := path.Dir(binDest); dir != "/usr/local/bin" && dir != "/usr/bin" && dir != "/bin" {
		fail("the binary is copied to %q: the entrypoint outboxd is found on PATH only in /usr/local/bin, /usr/bin or /bin", binDest)
	}
	for _, l := range ociLabels {
		if !labels[l] {
			fail("LABEL org.opencontainers.image.%s is missing", l)
		}
	}
	for _, st := range stages {
		for _, in := range st.ins {
			if in.cmd == "HEALTHCHECK" && !strings.EqualFold(in.args, "NONE") {
				fail("HEALTHCHECK %s: the image has no shell or HTTP client; orchestrators probe /healthz and /readyz", in.args)
			}
		}
	}
	return errs
}

// dockerignored tells whether a path of the build context is left out by
// the .dockerignore patterns, by Docker's rules for the forms used here (a
// pattern matches the path or a folder above it; * and ? within a path
// element, ** across them; a later ! pattern takes a match back).
func dockerignored(patterns []string, p string) bool {
	elems := strings.Split(p, "/")
	out := false
	for _, pat := range patterns {
		neg := strings.HasPrefix(pat, "!")
		re := globRegexp(strings.TrimPrefix(pat, "!"))
		for i := 1; i <= len(elems); i++ {
			if re.MatchString(strings.Join(elems[:i], "/")) {
				out = !neg
				break
			}
		}
	}
	return out
}

func globRegexp(pat string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; {
		case strings.HasPrefix(pat[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(pat[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// buildInputs are the files of the repository that building ./cmd/outboxd
// reads: go.mod, go.sum, and the Go and embedded files of every package of
// the module it imports.
func buildInputs(t *testing.T) []string {
	t.Helper()
	list := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "github.com/outboxd/outboxd"}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{"\n"}}{{end}}{{end}}`,
		"./cmd/outboxd")
	list.Dir = ".." // the product's module
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, _ := filepath.Abs("..")
	files := []string{"go.mod", "go.sum"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		dir, err := filepath.Rel(root, fields[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields[1:] {
			files = append(files, filepath.ToSlash(filepath.Join(dir, f)))
		}
	}
	return files
}

// checkDockerignore checks that the build context keeps every file the
// build reads and leaves out the repository's history and local data.
func checkDockerignore(text string, inputs []string) []error {
	var patterns []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, strings.TrimPrefix(l, "/"))
		}
	}
	var errs []error
	for _, f := range inputs {
		if dockerignored(patterns, f) {
			errs = append(errs, fmt.Errorf(".dockerignore leaves out %s, which the build of ./cmd/outboxd reads", f))
		}
	}
	for _, f := range []string{".git/config", "data/outboxd.db", "bin/outboxd"} {
		if !dockerignored(patterns, f) {
			errs = append(errs, fmt.Errorf(".dockerignore must leave out %s (history, local data and builds stay out of the build context)", f))
		}
	}
	return errs
}

func readRoot(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDockerfile reads the Dockerfile and .dockerignore (Docker cannot
// build here: this is what holds them right).
func TestDockerfile(t *testing.T) {
	gomod := readRoot(t, "go.mod")
	if err := joinErrs(checkDockerfile(readRoot(t, "Dockerfile"), gomod)); err != nil {
		t.Fatal(err)
	}
	inputs := buildInputs(t)
	if !slices.Contains(inputs, "migrations/postgres/00001_read_model.sql") || !slices.Contains(inputs, "cmd/outboxd/main.go") {
		t.Fatalf("the build's inputs miss files it reads: %v", inputs)
	}
	if err := joinErrs(checkDockerignore(readRoot(t, ".dockerignore"), inputs)); err != nil {
		t.Fatal(err)
	}
}

// TestDockerfileBroken proves that each check can fail.
func TestDockerfileBroken(t *testing.T) {
	dockerfile, gomod, ignore := readRoot(t, "Dockerfile"), readRoot(t, "go.mod"), readRoot(t, ".dockerignore")
	goLine, _ := goDirective(gomod)
	inputs := buildInputs(t)
	cases := []struct {
		name, file, old, new, want string
	}{
		{"OtherGoMinor", "Dockerfile", "ARG GO_VERSION=1.26.8", "ARG GO_VERSION=1.25.9", "does not build go.mod's go " + goLine},
		{"GoNotPinned", "Dockerfile", "ARG GO_VERSION=1.26.8", "ARG GO_VERSION=1.26", "Go pinned to a patch release"},
		{"OtherToolchain", "go.mod", "go " + goLine + "\n", "go " + goLine + "\n\ntoolchain go1.26.9\n", "is not go.mod's toolchain 1.26.9"},
		{"Cgo", "Dockerfile", "CGO_ENABLED=0", "CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"NoTrimpath", "Dockerfile", "go build -trimpath", "go build", "-trimpath"},
		{"ShellInFinal", "Dockerfile", "FROM gcr.io/distroless/static-debian13:nonroot", "FROM debian:13-slim", "must be distroless static or scratch"},
		{"UserByName", "Dockerfile", "USER 65532:65532", "USER nonroot", "numeric non-root user"},
		{"RootUser", "Dockerfile", "USER 65532:65532", "USER 0", "numeric non-root user"},
		{"ShellEntrypoint", "Dockerfile", `ENTRYPOINT ["outboxd"]`, "ENTRYPOINT outboxd", `it must be ["outboxd"]`},
		{"OffPath", "Dockerfile", "/usr/local/bin/outboxd\n", "/app/outboxd\n", `copied to "/app/outboxd"`},
		{"Healthcheck", "Dockerfile", "EXPOSE 8080", "EXPOSE 8080\nHEALTHCHECK CMD curl -f http://127.0.0.1:8080/healthz", "HEALTHCHECK CMD curl"},
		{"NoSourceLabel", "Dockerfile", `org.opencontainers.image.source="https://github.com/outboxd/outboxd" \`, `\`, "org.opencontainers.image.source is missing"},
		{"OneStage", "Dockerfile", "FROM gcr.io/distroless/static-debian13:nonroot\n", "", "build in a Go stage and copy the binary into a final one"},
		{"IgnoresMigrations", ".dockerignore", "docs\n", "docs\nmigrations\n", "leaves out migrations/postgres/00001_read_model.sql"},
		{"IgnoresEmbeds", ".dockerignore", "docs\n", "docs\n**/*.html\n", "leaves out internal/httpapi/console/templates/layout.html"},
		{"KeepsHistory", ".dockerignore", ".git\n", "", "must leave out .git/config"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{"Dockerfile": dockerfile, "go.mod": gomod, ".dockerignore": ignore}
			files[c.file] = replaceOnce(t, c.file, files[c.file], c.old, c.new)
			errs := checkDockerfile(files["Dockerfile"], files["go.mod"])
			errs = append(errs, checkDockerignore(files[".dockerignore"], inputs)...)
			err := joinErrs(errs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error with %q, got:\n%v", c.want, err)
			}
		})
	}
}
