package httpapi

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// profilesPrefix is where Go's profiles are served (Config.Profiles).
const profilesPrefix = "/debug/pprof/"

// profileRoutes serves Go's profiles (Config.Profiles) to the operator
// token. The command line is not one of them: its arguments may hold a
// token or a password.
func profileRoutes() []route {
	return []route{{http.MethodGet, profilesPrefix, http.HandlerFunc(profiles), accessOperate}}
}

// profiles serves the profile the path names, as net/http/pprof does.
func profiles(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, profilesPrefix) {
	case "cmdline":
		writeProblem(w, r, newProblem(http.StatusNotFound, "", "",
			"the command line is not served: its arguments may hold secrets (give them in the environment or in files)"))
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default: // the index, and the runtime's profiles by name (heap, goroutine, …)
		pprof.Index(w, r)
	}
}
