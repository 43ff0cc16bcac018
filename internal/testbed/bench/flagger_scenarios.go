package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// flaggerRollout: Flagger's OSM scenario, exactly as rollout runs ours (the same Deployment,
// N=5 steps of 10 s, the same checks), timed from the image change to phase Succeeded.
func (b *bench) flaggerRollout(ctx context.Context) error {
	f, err := b.startFlagger(ctx, "rollout")
	if err != nil {
		return err
	}
	defer f.stop()
	phases, err := watchPhases(ctx, b.cl.dyn)
	if err != nil {
		return err
	}
	defer phases.close()
	for i := range b.opts.runs {
		ns := b.cl.namespace("flagger", i)
		spec := flaggerScenario(ns)
		if err := b.flaggerInit(ctx, phases, spec, ns); err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		rec, err := record(ctx, b.cl.kube, b.cl.dyn, ns, "podinfo")
		if err != nil {
			return err
		}
		start := time.Now()
		if err := b.setImages(ctx, imageTag(1), ns); err != nil {
			rec.done()
			return err
		}
		done, err := phases.waitAll(ctx, []string{ns}, "Succeeded", start, 10*time.Minute)
		obs := rec.done()
		if err != nil {
			return fmt.Errorf("run %d: %w (phases: %s; log %s)", i, err, phases.history(ns, start), f.log)
		}
		wall := done.Sub(start)
		steps, interval := spec.steps(), spec.interval()
		t := rolloutTimeline(obs, "podinfo", podinfoImage+imageTag(1))
		b.res.flaggerApplyS = append(b.res.flaggerApplyS, seconds(wall))
		b.res.flaggerRatio = append(b.res.flaggerRatio, rawRatio(wall, steps, interval))
		if shift, err := t.firstShiftAfterUpdate(); err == nil {
			b.res.flaggerFirstShiftS = append(b.res.flaggerFirstShiftS, seconds(shift))
		}
		b.flaggerRuns = append(b.flaggerRuns, chartRun{weights: splitWeights(obs, "podinfo", start), end: wall})
		progress("flagger run %d: image change to Succeeded in %.1fs (ratio %.2f); phases: %s",
			i+1, wall.Seconds(), rawRatio(wall, steps, interval), phases.history(ns, start))
		if !b.opts.keep {
			b.cl.deleteNamespaces(ctx, ns)
		}
	}
	return nil
}

// flaggerParallel: -parallel Canaries under one Flagger, released at once, timed from the
// image changes to the last Succeeded; the API server's and Flagger's CPU are measured over
// the same window.
func (b *bench) flaggerParallel(ctx context.Context) error {
	n := b.opts.parallel
	spec := parallelSpec(n, "")
	prefix := b.cl.namespace("fpar")
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	if !b.opts.keep {
		defer b.cl.deleteNamespaces(context.WithoutCancel(ctx), names...)
	}
	f, err := b.startFlagger(ctx, "parallel")
	if err != nil {
		return err
	}
	defer f.stop()
	phases, err := watchPhases(ctx, b.cl.dyn)
	if err != nil {
		return err
	}
	defer phases.close()
	initStart := time.Now()
	if err := b.flaggerInit(ctx, phases, spec, names...); err != nil {
		return err
	}
	progress("flagger parallel: %d Canaries initialized in %.1fs", n, time.Since(initStart).Seconds())
	win, err := b.cl.startCPUWindow(ctx)
	if err != nil {
		return err
	}
	cpu0, _ := processCPU(f.cmd.Process.Pid)
	start := time.Now()
	if err := b.setImages(ctx, imageTag(1), names...); err != nil {
		return err
	}
	last, err := phases.waitAll(ctx, names, "Succeeded", start, 20*time.Minute)
	if err != nil {
		return fmt.Errorf("%w (first Canary's phases: %s; log %s)", err, phases.history(names[0], start), f.log)
	}
	wall := last.Sub(start)
	apiCPU, err := win.end(ctx)
	if err != nil {
		return err
	}
	cpu1, _ := processCPU(f.cmd.Process.Pid)
	steps := spec.steps()
	b.res.flaggerParallelS = append(b.res.flaggerParallelS, seconds(wall))
	b.res.flaggerAPICPU = append(b.res.flaggerAPICPU, perUnit(apiCPU, n, steps))
	b.res.flaggerCPU = append(b.res.flaggerCPU, perUnit((cpu1-cpu0).Seconds(), n, steps))
	b.res.parallelN = n
	progress("flagger parallel: %d Canaries from the image changes to the last Succeeded in %.1fs; API server CPU %.1fs, Flagger CPU %.1fs",
		n, wall.Seconds(), apiCPU, (cpu1 - cpu0).Seconds())
	return nil
}

// flaggerInit creates, for each namespace, the Deployment at image tag 0 and its Canary, and
// waits until every Canary is Initialized.
func (b *bench) flaggerInit(ctx context.Context, phases *phaseWatcher, spec releaseSpec, namespaces ...string) error {
	if err := b.cl.createNamespaces(ctx, namespaces...); err != nil {
		return err
	}
	start := time.Now()
	err := forEach(namespaces, func(ns string) error {
		if _, err := b.cl.kube.AppsV1().Deployments(ns).Create(ctx, podinfoDeployment(ns, spec.Replicas, imageTag(0)), metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := b.cl.dyn.Resource(canaryResource).Namespace(ns).Create(ctx, flaggerCanary(ns, spec), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	_, err = phases.waitAll(ctx, namespaces, "Initialized", start, 5*time.Minute+time.Duration(len(namespaces))*time.Second)
	return err
}

// setImages changes the image of every namespace's podinfo Deployment: the release. A
// strategic merge patch, so Flagger's own writes to the Deployment (its scale) cannot conflict.
func (b *bench) setImages(ctx context.Context, tag string, namespaces ...string) error {
	patch := fmt.Appendf(nil, `{"spec":{"template":{"spec":{"containers":[{"name":"podinfo","image":%q}]}}}}`, podinfoImage+tag)
	return forEach(namespaces, func(ns string) error {
		_, err := b.cl.kube.AppsV1().Deployments(ns).Patch(ctx, "podinfo", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// forEach runs fn on every item, 20 at a time, and returns the first error.
func forEach(items []string, fn func(string) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 20)
	for _, item := range items {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(item); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("%s: %w", item, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
