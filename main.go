package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"net/http/pprof"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/canary-release/terraform-provider-canary/internal/provider"
)

// version is set by goreleaser.
var version = "dev"

func main() {
	var debug bool
	flag.BoolVar(&debug, "debug", false, "set to true to run the provider with support for debuggers like delve")
	flag.Parse()

	// CANARY_PPROF_ADDR (e.g. 127.0.0.1:6060) serves net/http/pprof, so that the provider can be
	// profiled while Terraform drives it (`go run ./internal/bench -pprof DIR`).
	if addr := os.Getenv("CANARY_PPROF_ADDR"); addr != "" {
		go servePprof(addr)
	}

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/canary-release/canary",
		Debug:   debug,
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
