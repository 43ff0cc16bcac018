package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/canary-release/terraform-provider-canary/internal/provider"
)

// version is set by goreleaser.
var version = "dev"

// defaultMemoryLimit is the provider's soft memory limit, unless GOMEMLIMIT sets another. An
// apply of hundreds of releases holds each one's plan and state while it runs; with the
// default GOGC alone the heap would grow to twice that before a collection. Near the limit
// the runtime collects more often instead, for CPU: over the bench's 300-release apply (270 s)
// the provider used 57-66 s of CPU instead of 45 s.
const defaultMemoryLimit = 192 << 20

func main() {
	var debugMode bool
	flag.BoolVar(&debugMode, "debug", false, "set to true to run the provider with support for debuggers like delve")
	flag.Parse()

	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	// CANARY_PPROF_ADDR (e.g. 127.0.0.1:6060) serves net/http/pprof, so that the provider can be
	// profiled while Terraform drives it (`go run ./internal/testbed/bench -pprof DIR`).
	if addr := os.Getenv("CANARY_PPROF_ADDR"); addr != "" {
		go servePprof(addr)
	}

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/canary-release/canary",
		Debug:   debugMode,
	})
	if err != nil {
		log.Fatal(err.Error())
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
