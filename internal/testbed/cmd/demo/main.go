// Command demo is `make demo`: it releases podinfo three times on the local stack with the
// real Terraform CLI. v1 initialises, v2 is promoted while the live TrafficSplit weights are
// printed, and v3, which answers half of its requests with errors, is rolled back. It exits 0
// when all three behaved as expected, and draws the runs (canary weight, the canary's success
// rate, checks, promotion and rollback) as .local/demo/rollout.svg, with the record beside it
// as rollout.json.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	corev1 "k8s.io/api/core/v1"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/timeline"
)

var trafficSplits = schema.GroupVersionResource{Group: "split.smi-spec.io", Version: "v1alpha2", Resource: "trafficsplits"}

type step struct {
	title     string
	imageTag  string
	errorRate string
	wantFail  bool
}

var steps = []step{
	{"v1: first release initialises (no analysis)", "6.0.0", "0", false},
	{"v2: healthy release is promoted", "6.0.1", "0", false},
	{"v3: release with 50% errors is rolled back", "6.0.2", "0.5", true},
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := localstack.Ensure(ctx)
	if err != nil {
		return err
	}
	kube, dyn, err := env.Clients()
	if err != nil {
		return err
	}
	work := filepath.Join(localstack.StackDir(env.Root), "demo")
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	tf, err := os.ReadFile(filepath.Join(env.Root, "examples", "demo", "main.tf"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "main.tf"), tf, 0o644); err != nil {
		return err
	}
	if err := cleanLeftovers(ctx, kube, dyn); err != nil {
		return err
	}

	rec := timeline.NewRecorder("canary success rate (%)")
	prom, err := successRate(env)
	if err != nil {
		return err
	}
	var summary []string
	for _, s := range steps {
		fmt.Printf("\n=== %s\n", s.title)
		rec.StartRun(s.title)
		stop := observe(ctx, dyn, kube, prom, rec)
		start := time.Now()
		err := terraform(env, work, os.Stdout, "apply", "-auto-approve", "-no-color",
			"-var", "image_tag="+s.imageTag, "-var", "error_rate="+s.errorRate)
		stop()
		rec.EndRun()
		took := time.Since(start).Round(time.Second)
		primary, _ := kube.AppsV1().Deployments("default").Get(ctx, "podinfo-primary", metav1.GetOptions{})
		image := ""
		if primary != nil {
			image = primary.Spec.Template.Spec.Containers[0].Image
		}
		switch {
		case s.wantFail && err == nil:
			return fmt.Errorf("%s: the apply succeeded, but this version should have been rolled back", s.title)
		case !s.wantFail && err != nil:
			return fmt.Errorf("%s: %v", s.title, err)
		case s.wantFail && !strings.HasSuffix(image, ":6.0.1"):
			return fmt.Errorf("%s: after the rollback the primary runs %s, want podinfo:6.0.1", s.title, image)
		case !s.wantFail && !strings.HasSuffix(image, ":"+s.imageTag):
			return fmt.Errorf("%s: the primary runs %s, want podinfo:%s", s.title, image, s.imageTag)
		}
		verdict := "ok"
		if s.wantFail {
			verdict = "failed as expected, rolled back"
		}
		summary = append(summary, fmt.Sprintf("  %-48s %-32s %6s   primary runs %s", s.title, verdict, took, image))
	}
	if err := terraform(env, work, io.Discard, "destroy", "-auto-approve", "-no-color", "-var", "image_tag=6.0.1"); err != nil {
		return fmt.Errorf("destroy: %v", err)
	}
	fmt.Println("\n=== summary")
	for _, l := range summary {
		fmt.Println(l)
	}
	if err := writeChart(work, rec.Recording()); err != nil {
		return err
	}
	fmt.Println("\nThe demo behaved as expected: v1 initialised, v2 promoted, v3 rolled back.")
	return nil
}

// terraform runs the real CLI against the local stack; dev_overrides need no `terraform init`.
func terraform(env *localstack.Env, dir string, out io.Writer, args ...string) error {
	cmd := exec.Command(env.TerraformPath, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env.TerraformEnv()...)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd.Run()
}

// cleanLeftovers removes what an interrupted earlier demo left in the default namespace.
func cleanLeftovers(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	del := metav1.DeleteOptions{}
	_ = kube.AppsV1().Deployments("default").Delete(ctx, "podinfo", del)
	_ = kube.AppsV1().Deployments("default").Delete(ctx, "podinfo-primary", del)
	for _, s := range []string{"podinfo", "podinfo-primary", "podinfo-canary"} {
		_ = kube.CoreV1().Services("default").Delete(ctx, s, del)
	}
	_ = kube.CoreV1().ConfigMaps("default").Delete(ctx, "podinfo-canary-release", del)
	_ = dyn.Resource(trafficSplits).Namespace("default").Delete(ctx, "podinfo", del)
	return nil
}

// observe records the run until stopped: every change of the live TrafficSplit (also
// printed), the canary's success rate each second, and the checks and phase changes that the
// release records in its state ConfigMap.
func observe(ctx context.Context, dyn dynamic.Interface, kube kubernetes.Interface, rate func(context.Context) (float64, bool), rec *timeline.Recorder) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	stopWeights := watchWeights(ctx, dyn, rec)
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if v, ok := rate(ctx); ok {
				rec.Metric(v)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		watchChecks(ctx, kube, rec)
	}()
	return func() { cancel(); stopWeights(); <-done; <-done }
}

// successRate queries Flagger's built-in OSM success rate of the canary.
func successRate(env *localstack.Env) (func(context.Context) (float64, bool), error) {
	cfg, err := env.RESTConfig()
	if err != nil {
		return nil, err
	}
	client, err := metrics.NewClient(metrics.Config{Address: env.PrometheusURL, Timeout: 5 * time.Second}, cfg)
	if err != nil {
		return nil, err
	}
	q, _ := registry.Builtin("osm", "request-success-rate")
	query, err := metrics.Render(q, metrics.Vars{Name: "podinfo", Namespace: "default", Target: "podinfo", Service: "podinfo", Interval: "10s"})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (float64, bool) {
		v, err := client.Query(ctx, query)
		return v, err == nil
	}, nil
}

// watchChecks marks every check (a new iteration of the analysis), failed check, promotion and
// rollback, as the release's write-ahead record shows them.
func watchChecks(ctx context.Context, kube kubernetes.Interface, rec *timeline.Recorder) {
	w, err := kube.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rollout.StateConfigMapName("podinfo")})
	if err != nil {
		return
	}
	defer w.Stop()
	var last *rollout.Status
	for ev := range w.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		var st rollout.Status
		if json.Unmarshal([]byte(cm.Data["status.json"]), &st) != nil {
			continue
		}
		if last != nil && st.Phase == rollout.PhaseProgressing && last.Phase == rollout.PhaseProgressing {
			switch {
			case st.FailedChecks > last.FailedChecks:
				rec.Mark(timeline.KindFailedCheck)
			case st.Iterations > last.Iterations:
				rec.Mark(timeline.KindCheck)
			}
		}
		if last == nil || st.Phase != last.Phase {
			switch st.Phase {
			case rollout.PhasePromoting:
				rec.Mark(timeline.KindPromotion)
			case rollout.PhaseRollingBack:
				rec.Mark(timeline.KindRollback)
			}
		}
		last = &st
	}
}

// writeChart writes the recorded runs as rollout.svg and rollout.json in dir.
func writeChart(dir string, rec timeline.Recording) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "rollout.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "rollout.svg"))
	if err != nil {
		return err
	}
	if err := timeline.WriteSVG(f, rec); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("\nThe timeline of these runs: %s\n", filepath.Join(dir, "rollout.svg"))
	return nil
}

// watchWeights prints and records every change of the live TrafficSplit until stopped.
func watchWeights(ctx context.Context, dyn dynamic.Interface, rec *timeline.Recorder) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := dyn.Resource(trafficSplits).Namespace("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=podinfo"})
	if err != nil {
		cancel()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			backends, _, _ := unstructured.NestedSlice(u.Object, "spec", "backends")
			var parts []string
			for _, b := range backends {
				m, _ := b.(map[string]any)
				parts = append(parts, fmt.Sprintf("%v %v%%", m["service"], m["weight"]))
				if weight, ok := m["weight"].(int64); ok && m["service"] == "podinfo-canary" {
					rec.Weight(float64(weight))
				}
			}
			line := strings.Join(parts, " / ")
			if line != last {
				fmt.Printf("    [%s] TrafficSplit podinfo: %s\n", time.Now().Format("15:04:05"), line)
				last = line
			}
		}
	}()
	return func() { cancel(); w.Stop(); <-done }
}
