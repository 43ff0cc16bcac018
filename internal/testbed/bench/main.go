// Command bench is `make bench`: it measures canary_release on the local stack with the real
// Terraform CLI, in the scenario Flagger v1.44 was measured in (osm, interval 10s, maxWeight 50,
// stepWeight 10, 2 replicas, the two built-in checks), and measures Flagger itself in the same
// run: Flagger v1.44.0, built from the Go module proxy into the cache dir, runs out of cluster
// against the same stack, for the same release and for many Canaries at once. It also covers
// every weighted router, a large apply and the API server's CPU, and it attributes every
// second of the many-release applies: where each release's time went, and each process's CPU
// seconds (breakdown.go, process_cpu.go). It prints a table, then one line of key=value pairs;
// every figure is the median of its runs. The numbers are reported,
// never judged: the command fails only when a scenario could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

type options struct {
	runs          int
	scaleRuns     int
	quick         bool
	scale         int
	refresh       int
	scaleInterval string
	only          string
	pprofDir      string
	pprofSeconds  int
	providerDir   string
	tflog         string
	keep          bool
	qps           int
	parallel      int
	large         int
	routerRuns    int
	routers       string
	chart         string
	simPods       int
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.runs, "runs", 5, "runs per figure; each figure is the median of its runs")
	fs.IntVar(&o.scaleRuns, "scale-runs", 3, "runs of the parallel apply and of the refresh (a few minutes each with 100 releases); at most -runs")
	fs.BoolVar(&o.quick, "quick", false, "a quick look while developing: 1 run, 10 releases in the scale scenarios (flags given explicitly still win)")
	fs.IntVar(&o.scale, "scale", 100, "releases in the parallel apply")
	fs.IntVar(&o.refresh, "refresh", 200, "releases in the refresh-only plan (at least -scale)")
	fs.StringVar(&o.scaleInterval, "scale-interval", "2s", "analysis interval of the parallel apply")
	fs.StringVar(&o.only, "only", strings.Join(scenarioNames, ","), "scenarios to run, comma-separated: "+strings.Join(scenarioNames, ", "))
	fs.IntVar(&o.parallel, "parallel", 100, "releases, and Flagger Canaries, in the side-by-side parallel scenarios (interval 10s)")
	fs.IntVar(&o.large, "large", 300, "releases in the large scenario's one apply (-parallelism equal to it)")
	fs.IntVar(&o.routerRuns, "router-runs", 3, "runs of the rollout scenario per weighted router; each overhead_ratio_<router> is their median (at most -runs)")
	fs.StringVar(&o.routers, "routers", "", "routers of the routers scenario, comma-separated (default: every weighted router)")
	fs.IntVar(&o.simPods, "sim-pods", 1200, "pods in the simulator scenario (in Deployments of 30, each behind an IngressRoute of the stack's Traefik)")
	fs.StringVar(&o.chart, "chart", "", "where to write the side-by-side SVG chart (default <stack dir>/bench/side-by-side.svg)")
	fs.StringVar(&o.pprofDir, "pprof", "", "write CPU, heap and goroutine profiles of the provider during the first parallel apply and the large apply to this folder")
	fs.IntVar(&o.pprofSeconds, "pprof-seconds", 20, "length of the CPU profile")
	fs.StringVar(&o.providerDir, "provider-dir", "", "use the provider binary in this folder instead of the stack's (.local/provider)")
	fs.IntVar(&o.qps, "qps", 0, "kubernetes.qps of the provider in the scale scenarios (burst twice that); 0 keeps the provider's default (100, burst 300)")
	fs.BoolVar(&o.keep, "keep", false, "keep the namespaces and workspaces for a closer look (delete them with kubectl delete ns -l canary-release.dev/bench)")
	fs.StringVar(&o.tflog, "tflog", "", "write the provider's log at this level (TF_LOG_PROVIDER, e.g. INFO) beside each terraform run's output")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["runs"] {
			o.runs = 1
		}
		if !set["scale"] {
			o.scale = 10
		}
		if !set["refresh"] {
			o.refresh = 10
		}
		if !set["parallel"] {
			o.parallel = 10
		}
		if !set["large"] {
			o.large = 20
		}
	}
	o.refresh = max(o.refresh, o.scale)
	o.scaleRuns = max(1, min(o.scaleRuns, o.runs))
	o.routerRuns = max(1, min(o.routerRuns, o.runs))
	if o.runs < 1 || o.scale < 1 || o.parallel < 1 || o.large < 1 {
		return o, fmt.Errorf("-runs, -scale, -parallel and -large must be at least 1")
	}
	for _, s := range strings.Split(o.only, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(scenarioNames, s) {
			return o, fmt.Errorf("-only: unknown scenario %q (known: %s)", s, strings.Join(scenarioNames, ", "))
		}
	}
	return o, nil
}

func (o options) wants(scenario string) bool {
	for _, s := range strings.Split(o.only, ",") {
		if strings.TrimSpace(s) == scenario {
			return true
		}
	}
	return false
}

func main() {
	opts, err := parseOptions(os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// scenarioNames are the scenarios in the order they run.
var scenarioNames = []string{"rollout", "flagger", "rollback", "parallel", "flagger-parallel", "scale", "large", "routers", "simulator"}

// bench is what the scenarios share.
type bench struct {
	opts     options
	env      *localstack.Env
	cl       *cluster
	work     string
	extraEnv []string
	res      results
	// oursRuns and flaggerRuns are the weight timelines of the rollout runs, for the chart.
	oursRuns, flaggerRuns []chartRun
	// chartPath is where the side-by-side chart was written, if it was.
	chartPath string
	// breakdownCharts are the stacked charts of the many-release applies, by scenario label.
	breakdownCharts map[string]string
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, opts options) error {
	env, err := localstack.Ensure(ctx)
	if err != nil {
		return err
	}
	cl, err := newCluster(env, "b"+time.Now().Format("150405"))
	if err != nil {
		return err
	}
	b := &bench{opts: opts, env: env, cl: cl, work: filepath.Join(localstack.StackDir(env.Root), "bench", cl.id)}
	// The keys name the counts asked for, so a scenario left out still has its key.
	b.res.scaleReleases, b.res.refreshReleases, b.res.parallelN, b.res.largeN = opts.scale, opts.refresh, opts.parallel, opts.large
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return err
	}
	if opts.providerDir != "" {
		rc, err := writeCLIConfig(b.work, opts.providerDir)
		if err != nil {
			return err
		}
		b.extraEnv = append(b.extraEnv, "TF_CLI_CONFIG_FILE="+rc)
	}
	defer func() {
		if opts.keep {
			progress("kept the namespaces labelled %s=%s and the workspaces in %s", benchLabel, cl.id, b.work)
			return
		}
		// Cleanup runs even after Ctrl-C, on a context of its own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		progress("cleanup: deleting the bench namespaces (label %s=%s) and %s", benchLabel, cl.id, b.work)
		if err := cl.deleteAll(cctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		}
		_ = os.RemoveAll(b.work)
	}()

	progress("bench %s: %d run(s) per scenario (%d of the scale scenarios), nproc %d, work dir %s", cl.id, opts.runs, opts.scaleRuns, runtime.NumCPU(), b.work)
	var failed []string
	for _, sc := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"rollout", b.rollout},
		{"flagger", b.flaggerRollout},
		{"rollback", b.rollbackScenario},
		{"parallel", b.parallelTen},
		{"flagger-parallel", b.flaggerParallel},
		{"scale", b.scale},
		{"large", b.scaleLarge},
		{"routers", b.routers},
		{"simulator", b.simulatorScenario},
	} {
		if !opts.wants(sc.name) {
			continue
		}
		if err := sc.run(ctx); err != nil {
			progress("scenario %s failed: %v", sc.name, err)
			failed = append(failed, sc.name)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if path, err := b.writeChart(); err != nil {
		progress("side-by-side chart: %v", err)
	} else if path != "" {
		b.chartPath = path
	}
	if paths, err := b.writeBreakdownCharts(); err != nil {
		progress("breakdown chart: %v", err)
	} else {
		b.breakdownCharts = paths
	}
	b.report(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("scenario(s) %s did not complete; their figures are missing or partial", strings.Join(failed, ", "))
	}
	return ctx.Err()
}

// writeCLIConfig points Terraform's dev_overrides at another provider build.
func writeCLIConfig(dir, providerDir string) (string, error) {
	abs, err := filepath.Abs(providerDir)
	if err != nil {
		return "", err
	}
	rc := filepath.Join(dir, "terraformrc")
	text := fmt.Sprintf(`provider_installation {
  dev_overrides {
    "registry.terraform.io/canary-release/canary" = %q
  }
  direct {}
}
`, abs)
	return rc, os.WriteFile(rc, []byte(text), 0o644)
}
