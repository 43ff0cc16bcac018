package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// flaggerScenario is the release of Flagger's measurement (§2.8 of the reference), with the
// two built-in checks, which the bench gives Flagger's Canary too.
func flaggerScenario(ns string) releaseSpec {
	return releaseSpec{Namespace: ns, Replicas: 2, Interval: "10s", Threshold: 5, MaxWeight: 50, StepWeight: 10, Metrics: true}
}

// results holds the samples of every figure.
type results struct {
	initS, applyS, rawRatio, overheadRatio []float64
	canaryWaitS, primaryWaitS              []float64
	// The rest of the overhead: terraform's start and plan before the Update writes, the
	// analysis beyond N × interval and the primary wait, and the time from traffic back on the
	// primary to terraform's exit.
	beforeUpdateS, analysisExtraS, afterTrafficBackS []float64
	firstShiftS                                      []float64
	// promotionS is Flagger's "promoting to finalising": primary template copied -> 100% primary.
	promotionS                []float64
	rollbackS, rollbackBoundS []float64

	parallelS, peakRSSMB, apiPerStep, promPerStep, refreshS []float64
	apiBreakdown                                            map[string]int
	scaleReleases, refreshReleases                          int

	// Flagger in the same run: its rollout, and -parallel Canaries under one controller
	// against as many releases in one apply at the same 10 s interval.
	flaggerApplyS, flaggerRatio, flaggerFirstShiftS []float64
	flaggerParallelS, parallel10S                   []float64
	// CPU seconds per release-step: the API server's (beyond its idle rate) and the
	// provider's or Flagger's own, in the parallel runs.
	apiCPUPerStep, providerCPUPerStep, flaggerAPICPU, flaggerCPU []float64
	parallelN                                                    int

	// -large releases with -parallelism equal to their number.
	largeS, largePeakRSSMB, throttleWaits []float64
	largeN                                int

	// overhead ratio per weighted router, and without the drain (weight 0 -> verdict).
	routerRatio, routerRatioNoDrain map[string][]float64
	// routerBreakdowns: where each router run's apply went, by router.
	routerBreakdowns map[string][]releaseBreakdown

	// Where the time of each release of a many-release apply went, and the CPU seconds of
	// each process over that apply, by scenario label (par10, large), over the runs.
	breakdowns  map[string][][]releaseBreakdown
	cpuAccounts map[string][]cpuAccount

	// The simulator at simPods pods (simulator.go).
	simPods                                           int
	simIdleRSSMB, simRSSMB, simPeakRSSMB, simCPUCores []float64
	simListeners, simConnections                      []float64
}

func (r *results) addRouterRatioNoDrain(router string, v float64) {
	if r.routerRatioNoDrain == nil {
		r.routerRatioNoDrain = map[string][]float64{}
	}
	r.routerRatioNoDrain[router] = append(r.routerRatioNoDrain[router], v)
}

func (r *results) addRouterBreakdown(router string, b releaseBreakdown) {
	if r.routerBreakdowns == nil {
		r.routerBreakdowns = map[string][]releaseBreakdown{}
	}
	r.routerBreakdowns[router] = append(r.routerBreakdowns[router], b)
}

func (r *results) addBreakdown(label string, bd []releaseBreakdown) {
	if r.breakdowns == nil {
		r.breakdowns = map[string][][]releaseBreakdown{}
	}
	r.breakdowns[label] = append(r.breakdowns[label], bd)
}

func (r *results) addCPUAccount(label string, a cpuAccount) {
	if r.cpuAccounts == nil {
		r.cpuAccounts = map[string][]cpuAccount{}
	}
	r.cpuAccounts[label] = append(r.cpuAccounts[label], a)
}

func (r *results) addRouterRatio(router string, v float64) {
	if r.routerRatio == nil {
		r.routerRatio = map[string][]float64{}
	}
	r.routerRatio[router] = append(r.routerRatio[router], v)
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// imageTag gives every apply of a scenario its own version.
func imageTag(n int) string { return fmt.Sprintf("6.0.%d", n) }

const podinfoImage = "ghcr.io/stefanprodan/podinfo:"

// initialise creates one release of spec in its own namespace (recording init_s) and starts
// watching it from outside.
func (b *bench) initialise(ctx context.Context, ns string, spec releaseSpec) (*workspace, *recorder, time.Duration, error) {
	if err := b.cl.createNamespaces(ctx, ns); err != nil {
		return nil, nil, 0, err
	}
	ws, err := newWorkspace(b.env, filepath.Join(b.work, ns), spec, b.extraEnv, b.opts.tflog)
	if err != nil {
		return nil, nil, 0, err
	}
	initWall, err := ws.run(ctx, nil, "apply", "-auto-approve", "-var", "image_tag="+imageTag(0))
	if err != nil {
		return nil, nil, 0, err
	}
	b.res.initS = append(b.res.initS, seconds(initWall))
	rec, err := record(ctx, b.cl.kube, b.cl.dyn, ns, "podinfo")
	return ws, rec, initWall, err
}

// rollout: a healthy canary, N=5 steps of 10 s. Each run creates a release (init_s) in its
// own namespace and then releases a new version while the bench watches from outside.
func (b *bench) rollout(ctx context.Context) error {
	for i := range b.opts.runs {
		ns := b.cl.namespace("rollout", i)
		spec := flaggerScenario(ns)
		ws, rec, initWall, err := b.initialise(ctx, ns, spec)
		if err != nil {
			return err
		}
		apply, err := ws.start(ctx, nil, "apply", "-auto-approve", "-var", "image_tag="+imageTag(1))
		if err != nil {
			rec.done()
			return err
		}
		wall, err := apply.wait()
		obs := rec.done()
		if err != nil {
			return err
		}
		t := rolloutTimeline(obs, "podinfo", podinfoImage+imageTag(1))
		canaryWait, err1 := t.canaryWait()
		primaryWait, err2 := t.primaryWait()
		firstShift, err3 := t.firstShiftAfterUpdate()
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		steps, interval := spec.steps(), spec.interval()
		b.res.applyS = append(b.res.applyS, seconds(wall))
		b.res.rawRatio = append(b.res.rawRatio, rawRatio(wall, steps, interval))
		b.res.overheadRatio = append(b.res.overheadRatio, overheadRatio(wall, canaryWait, primaryWait, steps, interval))
		b.res.canaryWaitS = append(b.res.canaryWaitS, seconds(canaryWait))
		b.res.primaryWaitS = append(b.res.primaryWaitS, seconds(primaryWait))
		b.res.firstShiftS = append(b.res.firstShiftS, seconds(firstShift))
		b.res.beforeUpdateS = append(b.res.beforeUpdateS, seconds(t.updateStart.Sub(apply.start)))
		b.oursRuns = append(b.oursRuns, chartRun{weights: splitWeights(obs, "podinfo", apply.start), end: wall})
		if analysis, err := t.trafficBack(); err == nil {
			b.res.analysisExtraS = append(b.res.analysisExtraS, seconds(analysis-time.Duration(steps)*interval-primaryWait))
			b.res.afterTrafficBackS = append(b.res.afterTrafficBackS, seconds(apply.end.Sub(t.backToPrimary)))
			b.res.promotionS = append(b.res.promotionS, seconds(t.backToPrimary.Sub(t.primaryUpdated)))
		}
		progress("rollout run %d: init %.1fs, apply %.1fs (ratio %.2f), canary ready in %.1fs, primary ready in %.1fs, first shift after %.1fs",
			i+1, initWall.Seconds(), wall.Seconds(), rawRatio(wall, steps, interval), canaryWait.Seconds(), primaryWait.Seconds(), firstShift.Seconds())
		if !b.opts.keep {
			b.cl.deleteNamespaces(ctx, ns)
		}
	}
	return nil
}

// rollbackScenario: threshold 2, a rollout webhook that answers 500. Traffic must be back on
// the primary threshold × interval after the first shift.
func (b *bench) rollbackScenario(ctx context.Context) error {
	hook, err := startFailingWebhook()
	if err != nil {
		return err
	}
	defer hook.close()
	for i := range b.opts.runs {
		ns := b.cl.namespace("rollback", i)
		spec := flaggerScenario(ns)
		spec.Threshold = 2
		spec.WebhookURL = hook.url
		ws, rec, initWall, err := b.initialise(ctx, ns, spec)
		if err != nil {
			return err
		}
		calls := hook.calls.Load()
		wall, err := ws.run(ctx, nil, "apply", "-auto-approve", "-var", "image_tag="+imageTag(1))
		obs := rec.done()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			return fmt.Errorf("run %d: the apply succeeded although the webhook failed every check", i)
		case !strings.Contains(strings.Join(strings.Fields(err.Error()), " "), "Rolled back at canary weight"):
			// Terraform wraps long diagnostics, hence the joined fields.
			return fmt.Errorf("run %d: the apply failed without the rollback message: %w", i, err)
		}
		rollback, err := rolloutTimeline(obs, "podinfo", podinfoImage+imageTag(1)).trafficBack()
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		bound := time.Duration(spec.Threshold) * spec.interval()
		b.res.rollbackS = append(b.res.rollbackS, seconds(rollback))
		b.res.rollbackBoundS = append(b.res.rollbackBoundS, seconds(bound))
		progress("rollback run %d: init %.1fs, apply failed after %.1fs, back on the primary %.1fs after the first shift (bound %s), %d webhook calls",
			i+1, initWall.Seconds(), wall.Seconds(), rollback.Seconds(), bound, hook.calls.Load()-calls)
		if !b.opts.keep {
			b.cl.deleteNamespaces(ctx, ns)
		}
	}
	return nil
}

// failingWebhook is a Flagger load tester that fails every check.
type failingWebhook struct {
	url   string
	calls atomic.Int64
	srv   *http.Server
}

func startFailingWebhook() (*failingWebhook, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &failingWebhook{url: "http://" + ln.Addr().String() + "/rollout"}
	h.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.calls.Add(1)
		http.Error(w, "load test failed: 50% errors", http.StatusInternalServerError)
	})}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *failingWebhook) close() { _ = h.srv.Shutdown(context.Background()) }
