package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// killAnalysis is short, and paced back to the primary after promotion, so that every phase
// lasts long enough to be killed in.
const killAnalysis = `
    interval              = "2s"
    threshold             = 2
    max_weight            = 30
    step_weight           = 10
    step_weight_promotion = 10
    metrics = [
      ` + killMetric + `
    ]`

// killMetric is killAnalysis's one check.
const killMetric = `{ name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },`

// workdir is one Terraform working directory driving the real CLI with the stack's provider.
type workdir struct {
	t   *testing.T
	c   *testCluster
	dir string
	// provider is an optional provider block; workload, when set, replaces manifestWorkload.
	provider string
	workload func(image, errorRate string) string
	// extra is added to the resource block (a lifecycle block, say).
	extra string
	// resource, when set, is the whole resource block of a template, replacing releaseConfig
	// (another router's configuration, say); workload and extra are then unused.
	resource func(ns, image, errorRate string) string
	// routes is the router object whose live split applyUntil watches; nil: the TrafficSplit.
	routes *routerObject
	// cliConfig, when set, is the Terraform CLI configuration to use instead of the stack's
	// (one whose dev_overrides name a provider built from this checkout, say).
	cliConfig string
}

// routerObject is the object that holds a release's live split, and how to read it.
type routerObject struct {
	gvr     schema.GroupVersionResource
	name    string
	weights func(*unstructured.Unstructured) (primary, canary int64, err error)
}

// trafficSplitObject is OSM's TrafficSplit podinfo.
var trafficSplitObject = routerObject{gvr: trafficSplits, name: "podinfo", weights: func(u *unstructured.Unstructured) (int64, int64, error) {
	return backendWeights(u, "podinfo")
}}

func (w *workdir) routerObject() routerObject {
	if w.routes != nil {
		return *w.routes
	}
	return trafficSplitObject
}

// liveWeights reads a router object's primary and canary weights.
func (c *testCluster) liveWeights(ns string, obj routerObject) (primary, canary int64, err error) {
	u, err := c.dyn.Resource(obj.gvr).Namespace(ns).Get(context.Background(), obj.name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	return obj.weights(u)
}

func (c *testCluster) workdir(t *testing.T) *workdir {
	return &workdir{t: t, c: c, dir: t.TempDir()}
}

func (w *workdir) write(ns, image, errorRate string) {
	w.t.Helper()
	workload := manifestWorkload
	if w.workload != nil {
		workload = w.workload
	}
	resource := releaseConfig(ns, workload(image, errorRate), killAnalysis, w.extra)
	if w.resource != nil {
		resource = w.resource(ns, image, errorRate)
	}
	config := `terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}
` + w.provider + resource
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// writeRelease writes main.tf with the provider on the stack, reading the Prometheus at
// prometheusURL, and one release in ns of a manifest workload running image under analysis.
func (w *workdir) writeRelease(prometheusURL, ns, image, analysis string) {
	w.t.Helper()
	w.provider = fmt.Sprintf(`provider "canary" {
  kubernetes = { config_path = %q }
  prometheus = { address = %q }
}
`, w.c.env.Kubeconfig, prometheusURL)
	w.resource = func(ns, image, errorRate string) string {
		return releaseConfig(ns, manifestWorkload(image, errorRate), analysis, "")
	}
	w.write(ns, image, "0")
}

// command runs terraform in its own process group, so that a kill takes the provider too.
func (w *workdir) command(args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(w.c.env.TerraformPath, args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), w.c.env.TerraformEnv()...)
	if w.cliConfig != "" {
		cmd.Env = append(cmd.Env, "TF_CLI_CONFIG_FILE="+w.cliConfig)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// run runs terraform to the end and returns its output and error.
func (w *workdir) run(args ...string) (string, error) {
	cmd, out := w.command(append(args, "-no-color")...)
	err := cmd.Run()
	return out.String(), err
}

// killWhen starts an apply and SIGKILLs terraform and the provider as soon as the release's
// phase and live weight match (see applyUntil). It fails the test when the apply ends before that.
func (w *workdir) killWhen(ns string, match func(rollout.Status) bool) {
	w.t.Helper()
	running := w.applyUntil(ns, match)
	killTree(running.pid)
	w.t.Logf("killed the apply in phase %s at canary weight %d%% (it ended with: %v)", running.at.Phase, running.at.CanaryWeight, <-running.done)
}

// runningApply is an apply that applyUntil left running.
type runningApply struct {
	pid  int
	done <-chan error
	out  *bytes.Buffer
	// at is the recorded state that matched.
	at rollout.Status
}

// applyUntil starts an apply and returns, with the apply still running, as soon as the
// release matches: its recorded state (the phase, written before each phase) with the canary
// weight the router object holds live (runs write the router, not the state, at each step). It
// fails the test when the apply ends before that.
func (w *workdir) applyUntil(ns string, match func(rollout.Status) bool) runningApply {
	w.t.Helper()
	running, reached := w.applyUntilOrEnd(ns, match)
	if !reached {
		w.t.Fatalf("the apply ended (%v) before the awaited phase\n%s", <-running.done, running.out)
	}
	return running
}

// applyUntilOrEnd is applyUntil for a moment that may never come: reached is false when the
// apply ended first, and running.done then holds how it ended.
func (w *workdir) applyUntilOrEnd(ns string, match func(rollout.Status) bool) (running runningApply, reached bool) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	}
	states, err := w.c.kube.CoreV1().ConfigMaps(ns).Watch(ctx, byName(rollout.StateConfigMapName("podinfo")))
	if err != nil {
		w.t.Fatal(err)
	}
	defer states.Stop()
	routes := w.routerObject()
	splits, err := w.c.dyn.Resource(routes.gvr).Namespace(ns).Watch(ctx, byName(routes.name))
	if err != nil {
		w.t.Fatal(err)
	}
	defer splits.Stop()
	cmd, out := w.command("apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var recorded *rollout.Status
	liveCanary := int64(-1)
	for {
		select {
		case err := <-done:
			ended := make(chan error, 1)
			ended <- err
			return runningApply{pid: cmd.Process.Pid, done: ended, out: out}, false
		case <-ctx.Done():
			killTree(cmd.Process.Pid)
			w.t.Fatalf("the awaited phase never came\n%s", out)
		case ev, ok := <-states.ResultChan():
			if !ok {
				w.t.Fatal("the ConfigMap watch ended")
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM || ev.Type == watch.Deleted {
				continue
			}
			var st rollout.Status
			if json.Unmarshal([]byte(cm.Data["status.json"]), &st) == nil {
				recorded = &st
			}
		case ev, ok := <-splits.ResultChan():
			if !ok {
				w.t.Fatalf("the %s watch ended", routes.gvr.Resource)
			}
			u, isObject := ev.Object.(*unstructured.Unstructured)
			if !isObject || ev.Type == watch.Deleted {
				continue
			}
			if _, canary, err := routes.weights(u); err == nil {
				liveCanary = canary
			}
		}
		if recorded == nil || liveCanary < 0 {
			continue
		}
		at := *recorded
		at.CanaryWeight = int(liveCanary)
		if match(at) {
			return runningApply{pid: cmd.Process.Pid, done: done, out: out, at: at}, true
		}
	}
}

// checkRefreshedWeight refreshes the Terraform state of a release whose run was killed
// half-way and checks that status holds the phase the run stopped in and the live weight.
func (w *workdir) checkRefreshedWeight(ns string) {
	w.t.Helper()
	if out, err := w.run("apply", "-refresh-only", "-auto-approve"); err != nil {
		w.t.Fatalf("refresh after the kill: %v\n%s", err, out)
	}
	cmd, out := w.command("show", "-json")
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("terraform show: %v\n%s", err, out)
	}
	var shown struct {
		Values struct {
			RootModule struct {
				Resources []struct {
					Values struct {
						Status struct {
							Phase        string `json:"phase"`
							CanaryWeight int64  `json:"canary_weight"`
						} `json:"status"`
					} `json:"values"`
				} `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal(out.Bytes(), &shown); err != nil || len(shown.Values.RootModule.Resources) != 1 {
		w.t.Fatalf("terraform show -json: %v\n%s", err, out)
	}
	status := shown.Values.RootModule.Resources[0].Values.Status
	_, canary, err := w.c.splitWeights(ns, "podinfo")
	if err != nil {
		w.t.Fatal(err)
	}
	if status.Phase != string(rollout.PhaseProgressing) || status.CanaryWeight != canary {
		w.t.Errorf("refreshed status: phase %s at canary weight %d; the run stopped in Progressing and the TrafficSplit holds %d", status.Phase, status.CanaryWeight, canary)
	}
}

// judge checks what a user would see after a case: the primary's image, and the recorded
// status equal to the router's live weights. The invariant log is checked by the namespace's
// cleanup.
func (c *testCluster) judge(t *testing.T, ns, primaryImage string) {
	t.Helper()
	c.judgeRoutes(t, ns, primaryImage, trafficSplitObject)
}

// judgeRoutes is judge for a release whose live split is held by routes.
func (c *testCluster) judgeRoutes(t *testing.T, ns, primaryImage string, routes routerObject) {
	t.Helper()
	if err := c.checkImage(ns, "podinfo-primary", primaryImage)(nil); err != nil {
		t.Error(err)
	}
	if err := c.checkReady(ns, "podinfo-primary")(nil); err != nil {
		t.Error(err)
	}
	c.judgeSplit(t, ns, routes)
}

// judgeSplit checks that the release's record holds the live split of routes, all on the
// primary.
func (c *testCluster) judgeSplit(t *testing.T, ns string, routes routerObject) {
	t.Helper()
	st, ok, err := rollout.LoadState(context.Background(), c.kube, ns, "podinfo")
	if err != nil || !ok {
		t.Fatalf("state ConfigMap: found %v, %v", ok, err)
	}
	primary, canary, err := c.liveWeights(ns, routes)
	if err != nil {
		t.Fatal(err)
	}
	if int64(st.Status.CanaryWeight) != canary || primary+canary != 100 {
		t.Errorf("recorded canary weight %d, live split %d/%d", st.Status.CanaryWeight, primary, canary)
	}
	if canary != 0 {
		t.Errorf("live split %d/%d after the release ended; want all traffic on the primary", primary, canary)
	}
}

// killTree SIGKILLs a process, its process group and every descendant's group: Terraform
// starts each provider in a process group of its own, so that Ctrl-C reaches it only through
// Terraform, and a kill of Terraform's group alone would leave the provider running.
func killTree(pid int) {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so read after the last ')'.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		var self, parent int
		if len(fields) < 2 {
			continue
		}
		if _, err := fmt.Sscan(filepath.Base(filepath.Dir(f)), &self); err != nil {
			continue
		}
		if _, err := fmt.Sscan(fields[1], &parent); err != nil {
			continue
		}
		children[parent] = append(children[parent], self)
	}
	var walk func(int)
	walk = func(p int) {
		_ = syscall.Kill(-p, syscall.SIGKILL)
		_ = syscall.Kill(p, syscall.SIGKILL)
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
}

func phaseAt(phase rollout.Phase, weight int) func(rollout.Status) bool {
	return func(st rollout.Status) bool { return st.Phase == phase && st.CanaryWeight == weight }
}

// TestAccRelease_killMatrix SIGKILLs `terraform apply` (terraform and the provider) in every
// phase of a good and of a failing release, with and without the resource still in the
// Terraform state, and checks that the next apply ends correctly.
func TestAccRelease_killMatrix(t *testing.T) {
	c := testAccStack(t)
	const v1, v2 = "podinfo:6.0.0", "podinfo:6.0.1"
	type kase struct {
		name      string
		failing   bool
		at        func(rollout.Status) bool
		stateLost bool
		// refreshed: a refresh after the kill must give status the live weight, which the
		// state ConfigMap does not record per step.
		refreshed bool
	}
	cases := []kase{
		{name: "good/scalingCanary", at: phaseAt(rollout.PhaseProgressing, 0)},
		{name: "good/step10", at: phaseAt(rollout.PhaseProgressing, 10)},
		{name: "good/step20", at: phaseAt(rollout.PhaseProgressing, 20), refreshed: true},
		{name: "good/step30", at: phaseAt(rollout.PhaseProgressing, 30)},
		{name: "good/promoting", at: func(st rollout.Status) bool { return st.Phase == rollout.PhasePromoting }},
		{name: "good/finalising", at: phaseAt(rollout.PhaseFinalising, 20)},
		{name: "good/step20/stateLost", at: phaseAt(rollout.PhaseProgressing, 20), stateLost: true},
		{name: "failing/step10", failing: true, at: phaseAt(rollout.PhaseProgressing, 10), refreshed: true},
		{name: "failing/rollingBack", failing: true, at: func(st rollout.Status) bool { return st.Phase == rollout.PhaseRollingBack }},
		{name: "failing/step10/stateLost", failing: true, at: phaseAt(rollout.PhaseProgressing, 10), stateLost: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := c.namespace(t)
			w := c.workdir(t)
			w.write(ns, v1, "0")
			if out, err := w.run("apply", "-auto-approve"); err != nil {
				t.Fatalf("first apply: %v\n%s", err, out)
			}
			t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
			errorRate := "0"
			if tc.failing {
				errorRate = "0.5"
			}
			w.write(ns, v2, errorRate)
			w.killWhen(ns, tc.at)
			if tc.refreshed {
				w.checkRefreshedWeight(ns)
			}
			if tc.stateLost {
				if out, err := w.run("state", "rm", "canary_release.test"); err != nil {
					t.Fatalf("state rm: %v\n%s", err, out)
				}
			}
			out, err := w.run("apply", "-auto-approve")
			if tc.failing {
				if err == nil || !strings.Contains(out, "request-success-rate") || !strings.Contains(out, "Rolled back") {
					t.Fatalf("apply after the kill: %v; want the failed check and the rollback\n%s", err, out)
				}
				c.judge(t, ns, v1)
				// Destroy must not hand traffic to the rejected template; set it back first.
				w.write(ns, v1, "0")
				if out, err := w.run("apply", "-auto-approve"); err != nil {
					t.Fatalf("apply back to %s: %v\n%s", v1, err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("apply after the kill: %v\n%s", err, out)
			}
			if tc.stateLost && !strings.Contains(out, "took over an existing release") {
				t.Errorf("the apply after the state was lost does not say it took the release over:\n%s", out)
			}
			c.judge(t, ns, v2)
			if st, _, _ := rollout.LoadState(context.Background(), c.kube, ns, "podinfo"); st.Status.Phase != rollout.PhaseSucceeded {
				t.Errorf("phase = %s, want Succeeded", st.Status.Phase)
			}
		})
	}
	t.Run("initializing", func(t *testing.T) {
		t.Parallel()
		ns := c.namespace(t)
		w := c.workdir(t)
		w.write(ns, v1, "0")
		w.killWhen(ns, func(st rollout.Status) bool { return st.Phase == rollout.PhaseInitializing })
		out, err := w.run("apply", "-auto-approve")
		if err != nil {
			t.Fatalf("apply after the kill: %v\n%s", err, out)
		}
		t.Cleanup(func() { _, _ = w.run("destroy", "-auto-approve") })
		c.judge(t, ns, v1)
	})
}

// TestAccRelease_concurrentApplies: a second apply of the same release, from another working
// directory, fails at once and names the lock holder; the first goes through.
func TestAccRelease_concurrentApplies(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	first, second := c.workdir(t), c.workdir(t)
	first.write(ns, "podinfo:6.0.0", "0")
	if out, err := first.run("apply", "-auto-approve"); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = first.run("destroy", "-auto-approve") })
	first.write(ns, "podinfo:6.0.1", "0")
	cmd, out := first.command("apply", "-auto-approve", "-no-color")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec := c.recordWeights(t, ns, "podinfo")
	deadline := time.Now().Add(2 * time.Minute)
	for !slicesContain(rec.seen(), 10) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatalf("the first apply never reached 10%%\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	second.write(ns, "podinfo:6.0.1", "0")
	start := time.Now()
	secondOut, err := second.run("apply", "-auto-approve")
	if err == nil {
		t.Fatalf("the second apply went through while the first held the release\n%s", secondOut)
	}
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("the second apply took %s to fail; it must fail at once", took)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"is locked by another run", "terraform-provider-canary pid", "on host " + host, "since"} {
		if !strings.Contains(strings.Join(strings.Fields(secondOut), " "), want) {
			t.Errorf("the second apply's error does not say %q:\n%s", want, secondOut)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the first apply failed: %v\n%s", err, out)
	}
	c.judge(t, ns, "podinfo:6.0.1")
}
