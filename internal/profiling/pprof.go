//go:build pprof

package profiling

import (
	"log"
	"net/http"
	"net/http/pprof"
	"os"
)

// Start serves net/http/pprof on CANARY_PPROF_ADDR (e.g. 127.0.0.1:6060), so that the
// provider can be profiled while Terraform drives it (`go run ./internal/testbed/bench -pprof
// DIR`). Only builds with `-tags pprof` have it (the local stack's provider does); a release
// binary serves nothing.
func Start() {
	if addr := os.Getenv("CANARY_PPROF_ADDR"); addr != "" {
		go servePprof(addr)
	}
}

// servePprof serves the profiling endpoints on their own mux; a busy address only logs, as a
// profile is never worth failing the provider.
func servePprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if err := http.ListenAndServe(addr, mux); err != nil {
		log.Printf("[WARN] CANARY_PPROF_ADDR %s: %v", addr, err)
	}
}
