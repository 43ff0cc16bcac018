package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// scale: -scale releases (100 namespaces, 1 kwok replica each) released in one apply with
// -parallelism=100 at a short interval, then -refresh releases refreshed by
// `terraform plan -refresh-only`. The provider reaches the API server and Prometheus through
// counting proxies, and its processes' peak RSS is polled from /proc.
func (b *bench) scale(ctx context.Context) error {
	apiProxy, err := startAPIProxy(b.cl.rest)
	if err != nil {
		return err
	}
	defer apiProxy.close()
	promURL, err := url.Parse(b.env.PrometheusURL)
	if err != nil {
		return err
	}
	promProxy, err := startProxy(promURL, http.DefaultTransport, false)
	if err != nil {
		return err
	}
	defer promProxy.close()

	prefix := b.cl.namespace("scale")
	spec := releaseSpec{Count: b.opts.scale, NamespacePrefix: prefix, Replicas: 1, Interval: b.opts.scaleInterval,
		Threshold: 5, MaxWeight: 50, StepWeight: 10, Metrics: true, QPS: b.opts.qps}
	kubeconfig := filepath.Join(b.work, prefix+".kubeconfig")
	if err := writeProxyKubeconfig(kubeconfig, apiProxy.URL); err != nil {
		return err
	}
	ws, err := newWorkspace(b.env, filepath.Join(b.work, prefix), spec, append(b.extraEnv,
		"KUBECONFIG="+kubeconfig, "KUBE_CONFIG_PATH="+kubeconfig, "CANARY_PROMETHEUS_ADDRESS="+promProxy.URL), b.opts.tflog)
	if err != nil {
		return err
	}
	var names []string
	for i := range b.opts.refresh {
		names = append(names, fmt.Sprintf("%s-%03d", prefix, i))
	}
	if !b.opts.keep {
		defer b.cl.deleteNamespaces(context.WithoutCancel(ctx), names...)
	}
	if err := b.cl.createNamespaces(ctx, names...); err != nil {
		return err
	}
	releases := func(n int) string { return "releases=" + strconv.Itoa(n) }
	parallel := "-parallelism=100"

	wall, err := ws.run(ctx, nil, "apply", "-auto-approve", parallel, "-var", "image_tag="+imageTag(0), "-var", releases(b.opts.scale))
	if err != nil {
		return err
	}
	progress("scale: created %d releases in %.1fs", b.opts.scale, wall.Seconds())
	b.res.scaleReleases, b.res.refreshReleases = b.opts.scale, b.opts.refresh

	for i := range b.opts.scaleRuns {
		// One release's timeline tells the readiness waits from the provider's own time.
		rec, err := record(ctx, b.cl.kube, b.cl.dyn, names[0], "podinfo")
		if err != nil {
			return err
		}
		apiBefore, promBefore := apiProxy.snapshot(), promProxy.snapshot()
		at, err := b.attributedApply(ctx, ws, fmt.Sprintf("apply%d", i+1), names[:b.opts.scale], spec.interval(), podinfoImage+imageTag(i+1), i == 0,
			"apply", "-auto-approve", parallel, "-var", "image_tag="+imageTag(i+1), "-var", releases(b.opts.scale))
		o := at.processFigures
		obs := rec.done()
		if err != nil {
			return err
		}
		b.res.addBreakdown("scale", at.breakdown)
		b.res.addCPUAccount("scale", at.cpu)
		t := rolloutTimeline(obs, "podinfo", podinfoImage+imageTag(i+1))
		progress("scale run %d, release %s: Update's first write at +%.1fs, canary Ready after %.1fs, first shift at +%.1fs, primary updated at +%.1fs and Ready after %.1fs, back on the primary at +%.1fs",
			i+1, names[0], since(o.start, t.updateStart), sub(t.canaryScaled, t.canaryReady), since(o.start, t.firstShift),
			since(o.start, t.primaryUpdated), sub(t.primaryUpdated, t.primaryReady), since(o.start, t.backToPrimary))
		apiDelta, apiTotal := delta(apiBefore, apiProxy.snapshot())
		promDelta, _ := delta(promBefore, promProxy.snapshot())
		queries := promDelta["/api/v1/query"] + promDelta["/api/v1/query_range"]
		steps := spec.steps()
		b.res.parallelS = append(b.res.parallelS, seconds(o.wall))
		b.res.peakRSSMB = append(b.res.peakRSSMB, o.peakMB)
		b.res.apiPerStep = append(b.res.apiPerStep, perUnit(float64(apiTotal), b.opts.scale, steps))
		b.res.promPerStep = append(b.res.promPerStep, perUnit(float64(queries), b.opts.scale, steps))
		b.res.apiBreakdown = apiDelta
		progress("scale run %d: %d releases in %.1fs (%s), %d API requests %v, %d Prometheus queries",
			i+1, b.opts.scale, o.wall.Seconds(), o, apiTotal, apiDelta, queries)
	}

	if b.opts.refresh > b.opts.scale {
		wall, err := ws.run(ctx, nil, "apply", "-auto-approve", parallel, "-var", "image_tag="+imageTag(b.opts.scaleRuns), "-var", releases(b.opts.refresh))
		if err != nil {
			return err
		}
		progress("scale: created %d more releases in %.1fs", b.opts.refresh-b.opts.scale, wall.Seconds())
	}
	for i := range b.opts.scaleRuns {
		apiBefore := apiProxy.snapshot()
		o, err := b.observed(ctx, ws, i == 0, fmt.Sprintf("refresh%d", i+1), "plan", "-refresh-only",
			"-var", "image_tag="+imageTag(b.opts.scaleRuns), "-var", releases(b.opts.refresh))
		if err != nil {
			return err
		}
		apiDelta, _ := delta(apiBefore, apiProxy.snapshot())
		b.res.refreshS = append(b.res.refreshS, seconds(o.wall))
		progress("refresh run %d: %d releases in %.1fs (%s), API requests %v", i+1, b.opts.refresh, o.wall.Seconds(), o, apiDelta)
	}
	return nil
}

// observation of one terraform run and its provider processes.
type processFigures struct {
	start       time.Time
	wall        time.Duration
	peakMB      float64
	providerCPU time.Duration // CPU time of the provider processes
	totalCPU    time.Duration // CPU time of terraform and everything it waited for
	providers   int
}

func (f processFigures) String() string {
	return fmt.Sprintf("provider peak RSS %.0f MiB, CPU: provider %.1fs in %d process(es), terraform %.1fs",
		f.peakMB, f.providerCPU.Seconds(), f.providers, (f.totalCPU - f.providerCPU).Seconds())
}

// observed runs terraform while polling its provider processes; with profile set and -pprof
// given, it also saves profiles of them.
func (b *bench) observed(ctx context.Context, ws *workspace, profile bool, label string, args ...string) (processFigures, error) {
	var extra []string
	var pprofAddr string
	if profile && b.opts.pprofDir != "" {
		addr, err := freeAddr()
		if err != nil {
			return processFigures{}, err
		}
		pprofAddr = addr
		extra = append(extra, "CANARY_PPROF_ADDR="+pprofAddr)
	}
	r, err := ws.start(ctx, extra, args...)
	if err != nil {
		return processFigures{}, err
	}
	wctx, stopWatching := context.WithCancel(ctx)
	var onNew func(int)
	if pprofAddr != "" {
		onNew = func(pid int) { go b.captureProfiles(ctx, pprofAddr, label, pid) }
	}
	rss := watchProviderRSS(wctx, r.cmd.Process.Pid, 100*time.Millisecond, onNew)
	wall, err := r.wait()
	stopWatching()
	f := processFigures{start: r.start, wall: wall, peakMB: rss.peakMB(), providerCPU: rss.cpu(), providers: rss.processes()}
	if ps := r.cmd.ProcessState; ps != nil {
		f.totalCPU = ps.UserTime() + ps.SystemTime()
	}
	return f, err
}

// since and sub are seconds between two moments, NaN when one was not seen.
func since(start, at time.Time) float64 { return sub(start, at) }

func sub(a, b time.Time) float64 {
	if a.IsZero() || b.IsZero() {
		return math.NaN()
	}
	return b.Sub(a).Seconds()
}

// freeAddr finds a loopback port for the provider's pprof server.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// captureProfiles saves a CPU profile, then a heap and a goroutine profile, of the provider
// process pid. Terraform runs one provider process per walk (plan, apply), one at a time, so
// whichever process answers on addr is pid; a capture cut short by the process's exit is
// dropped.
func (b *bench) captureProfiles(ctx context.Context, addr, label string, pid int) {
	base := "http://" + addr + "/debug/pprof/"
	// The process needs a moment to start serving.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return fetch(ctx, base+"cmdline", io.Discard) == nil, nil
	})
	if err != nil {
		return
	}
	if err := os.MkdirAll(b.opts.pprofDir, 0o755); err != nil {
		progress("pprof: %v", err)
		return
	}
	for _, p := range []struct{ name, path string }{
		{"cpu", "profile?seconds=" + strconv.Itoa(b.opts.pprofSeconds)},
		{"heap", "heap"},
		{"goroutine", "goroutine"},
	} {
		file := filepath.Join(b.opts.pprofDir, fmt.Sprintf("%s-%s-%d.pprof", label, p.name, pid))
		f, err := os.Create(file)
		if err != nil {
			progress("pprof: %v", err)
			return
		}
		err = fetch(ctx, base+p.path, f)
		f.Close()
		if err != nil {
			os.Remove(file)
			return
		}
		progress("pprof: wrote %s", file)
	}
}

func fetch(ctx context.Context, u string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
