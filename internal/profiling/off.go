//go:build !pprof

package profiling

// Start does nothing: net/http/pprof is linked only into builds with `-tags pprof`
// (pprof.go), never into a release binary.
func Start() {}
