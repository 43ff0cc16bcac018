package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// parallelSpec is the release of the many-release scenarios: Flagger's analysis with the two
// checks, one replica each (count releases in namespaces prefix-000, -001, …).
func parallelSpec(count int, prefix string) releaseSpec {
	return releaseSpec{Count: count, NamespacePrefix: prefix, Replicas: 1, Interval: "10s",
		Threshold: 5, MaxWeight: 50, StepWeight: 10, Metrics: true}
}

// manyRun is the outcome of one apply that releases many releases at once.
type manyRun struct {
	processFigures
	apiCPU float64 // API server CPU seconds over the apply
	tflog  string  // the provider's log of the release apply, when asked for
}

// manyReleases creates spec.Count releases in one apply, then releases a new version of all
// of them in one more, with -parallelism=parallelism, and measures the second apply. With
// logLevel set, the provider's log of that apply is kept (TF_LOG_PROVIDER).
func (b *bench) manyReleases(ctx context.Context, label string, spec releaseSpec, parallelism int, logLevel string) (manyRun, error) {
	spec.NamespacePrefix = b.cl.namespace(label)
	spec.QPS = b.opts.qps
	names := make([]string, spec.Count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", spec.NamespacePrefix, i)
	}
	if !b.opts.keep {
		defer b.cl.deleteNamespaces(context.WithoutCancel(ctx), names...)
	}
	if err := b.cl.createNamespaces(ctx, names...); err != nil {
		return manyRun{}, err
	}
	ws, err := newWorkspace(b.env, filepath.Join(b.work, spec.NamespacePrefix), spec, b.extraEnv, b.opts.tflog)
	if err != nil {
		return manyRun{}, err
	}
	args := func(tag string) []string {
		return []string{"apply", "-auto-approve", "-parallelism=" + strconv.Itoa(parallelism),
			"-var", "image_tag=" + tag, "-var", "releases=" + strconv.Itoa(spec.Count)}
	}
	if logLevel != "" {
		ws.tflog = logLevel
	}
	wall, err := ws.run(ctx, nil, args(imageTag(0))...)
	if logLevel != "" {
		logThrottleWaits(label+" (create)", ws.lastTFLog())
	}
	if err != nil {
		return manyRun{}, err
	}
	progress("%s: created %d releases in %.1fs", label, spec.Count, wall.Seconds())
	win, err := b.cl.startCPUWindow(ctx)
	if err != nil {
		return manyRun{}, err
	}
	at, err := b.attributedApply(ctx, ws, label, names, spec.interval(), podinfoImage+imageTag(1), true, args(imageTag(1))...)
	o := at.processFigures
	r := manyRun{processFigures: o}
	r.tflog = ws.lastTFLog()
	if logLevel != "" && err != nil {
		logThrottleWaits(label, r.tflog)
	}
	if err != nil {
		// What the provider used is worth knowing even when some releases failed.
		progress("%s: the apply failed after %.1fs (%s)", label, o.wall.Seconds(), o)
		return manyRun{}, err
	}
	b.res.addBreakdown(label, at.breakdown)
	b.res.addCPUAccount(label, at.cpu)
	if r.apiCPU, err = win.end(ctx); err != nil {
		return r, err
	}
	return r, nil
}

// parallelTen: -parallel releases in one apply at an interval of 10 s, the counterpart of
// flaggerParallel, timed from the apply's start (the image change) to its end.
func (b *bench) parallelTen(ctx context.Context) error {
	n := b.opts.parallel
	spec := parallelSpec(n, "")
	r, err := b.manyReleases(ctx, "par10", spec, 100, "WARN")
	if err != nil {
		return err
	}
	steps := spec.steps()
	b.res.parallel10S = append(b.res.parallel10S, seconds(r.wall))
	b.res.apiCPUPerStep = append(b.res.apiCPUPerStep, perUnit(r.apiCPU, n, steps))
	b.res.providerCPUPerStep = append(b.res.providerCPUPerStep, perUnit(r.providerCPU.Seconds(), n, steps))
	b.res.parallelN = n
	progress("parallel 10s: %d releases in %.1fs (%s), API server CPU %.1fs", n, r.wall.Seconds(), r.processFigures, r.apiCPU)
	return nil
}

// scaleLarge: -large releases in one apply with -parallelism equal to their number; all must
// finish. The provider's peak RSS and its client-side throttling waits over 1 s are reported
// (client-go logs those at most once per 10 s per process, so the count is a lower bound;
// zero means none).
func (b *bench) scaleLarge(ctx context.Context) error {
	n := b.opts.large
	spec := parallelSpec(n, "")
	r, err := b.manyReleases(ctx, "large", spec, n, "WARN")
	if err != nil {
		return err
	}
	waits := logThrottleWaits("large", r.tflog)
	b.res.largeN = n
	b.res.largeS = append(b.res.largeS, seconds(r.wall))
	b.res.largePeakRSSMB = append(b.res.largePeakRSSMB, r.peakMB)
	b.res.throttleWaits = append(b.res.throttleWaits, float64(countOver(waits, time.Second)))
	progress("large: %d releases in %.1fs (%s), %d throttling wait(s) over 1s logged (provider log %s)",
		n, r.wall.Seconds(), r.processFigures, countOver(waits, time.Second), r.tflog)
	return nil
}

// logThrottleWaits prints the throttling waits of a provider log and returns them.
func logThrottleWaits(label, path string) []throttleWait {
	waits, err := throttleWaitsInFile(path)
	if err != nil {
		progress("%s: reading %s: %v", label, path, err)
	}
	for _, w := range waits {
		progress("%s: client-side throttling wait of %s: %s", label, w.delay, w.line)
	}
	return waits
}
