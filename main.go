package main

import (
	"context"
	"flag"
	"log"
	"os"
	"runtime/debug"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/canary-release/terraform-provider-canary/internal/profiling"
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
	profiling.Start()

	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		Address: "registry.terraform.io/canary-release/canary",
		Debug:   debugMode,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}
