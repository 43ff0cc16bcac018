// Package profiling serves the provider's runtime profiles (net/http/pprof on
// CANARY_PPROF_ADDR), in builds made with `-tags pprof` only: the local stack's provider, which
// the bench profiles. A release binary links none of it.
package profiling
