package provider

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// steerAnalysis is a healthy analysis of three steps, two seconds apart, with extra
// (webhooks) inside.
func steerAnalysis(extra string) string {
	return `
    interval     = "2s"
    threshold    = 2
    step_weights = [20, 40, 60]
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]` + extra
}

// canaryMetricWindow is the window of the success-rate metric of steerAnalysis and of the
// progress test (interval = "10s").
const canaryMetricWindow = 10 * time.Second

// waitOutCanaryMetricWindow lets a failed canary's requests leave the metric's window before the
// next revision's analysis: the canary's pods are measured alike whatever revision they run, as
// with Flagger's queries, so a good revision released at once after a bad one would be judged
// on the bad one's failures.
func waitOutCanaryMetricWindow() { time.Sleep(canaryMetricWindow + time.Second) }

// operator annotates the release's state ConfigMap with kubectl, as a user would, once the
// release's record and live weight match; the returned check fails when it never did.
func (c *testCluster) operator(t *testing.T, ns string, when func(st rollout.Status, canary int64) bool, annotations ...string) resource.TestCheckFunc {
	t.Helper()
	return c.annotateWhen(t, ns, "podinfo", func(ctx context.Context) bool {
		cs, ok, err := rollout.LoadState(ctx, c.kube, ns, "podinfo")
		if err != nil || !ok {
			return false
		}
		_, canary, err := c.liveWeights(ns, trafficSplitObject)
		return err == nil && when(cs.Status, canary)
	}, annotations...)
}

// annotateWhen annotates the state ConfigMap of release with kubectl once ready holds; the
// returned check fails when it never did.
func (c *testCluster) annotateWhen(t *testing.T, ns, release string, ready func(context.Context) bool, annotations ...string) resource.TestCheckFunc {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				done <- fmt.Errorf("the moment to annotate %v never came", annotations)
				return
			case <-time.After(200 * time.Millisecond):
			}
			if !ready(ctx) {
				continue
			}
			args := append([]string{"annotate", "--overwrite", "-n", ns, "configmap", rollout.StateConfigMapName(release)}, annotations...)
			cmd := exec.CommandContext(ctx, "kubectl", args...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+c.env.Kubeconfig)
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
			}
			done <- err
			return
		}
	}()
	return func(*terraform.State) error {
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return fmt.Errorf("the operator's annotation %v was not made", annotations)
		}
	}
}

func atWeight(w int64) func(rollout.Status, int64) bool {
	return func(st rollout.Status, canary int64) bool { return st.Phase == rollout.PhaseProgressing && canary == w }
}

// The built-in controls on the local stack: each is a kubectl annotate on the state ConfigMap.
func TestAccRelease_operatorControls(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	workload := func(image string) string { return manifestWorkload(image, "0") }

	t.Run("approve a built-in confirm-promotion gate", func(t *testing.T) {
		ns := c.namespace(t)
		gated := steerAnalysis(`
    webhooks = [{ name = "release-manager", type = "confirm-promotion" }]`)
		var approved resource.TestCheckFunc
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{Config: releaseConfig(ns, workload("podinfo:1"), gated, "")},
				{
					PreConfig: func() {
						approved = c.operator(t, ns, func(st rollout.Status, _ int64) bool {
							return st.Phase == rollout.PhaseWaitingPromotion
						}, controls.ApprovalKey(rollout.HookConfirmPromotion)+"=approved")
					},
					Config: releaseConfig(ns, workload("podinfo:2"), gated, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						func(s *terraform.State) error { return approved(s) },
						c.checkImage(ns, "podinfo-primary", "podinfo:2"),
						c.checkSplit(ns, 100, 0),
						checkCluster(func() error { return c.checkEvents(ns, "WaitingPromotion", "Approved", "Promoting", "Succeeded") }),
					),
				},
			},
		})
	})

	t.Run("pause and resume", func(t *testing.T) {
		ns := c.namespace(t)
		var paused, resumed resource.TestCheckFunc
		var heldFor time.Duration
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{Config: releaseConfig(ns, workload("podinfo:1"), steerAnalysis(""), "")},
				{
					PreConfig: func() {
						paused = c.operator(t, ns, atWeight(20), controls.Pause+"=true")
						start, held := time.Time{}, int64(-1)
						resumed = c.operator(t, ns, func(st rollout.Status, canary int64) bool {
							if !strings.HasPrefix(st.Message, "Paused: ") || canary == 0 {
								return false
							}
							if start.IsZero() || canary != held {
								// The pause acts at the next check: the weight it holds is the
								// one that must not change for four intervals.
								start, held = time.Now(), canary
							}
							heldFor = time.Since(start)
							return heldFor > 8*time.Second
						}, controls.Pause+"-")
					},
					Config: releaseConfig(ns, workload("podinfo:2"), steerAnalysis(""), ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						func(s *terraform.State) error { return paused(s) },
						func(s *terraform.State) error { return resumed(s) },
						c.checkImage(ns, "podinfo-primary", "podinfo:2"),
						c.checkSplit(ns, 100, 0),
					),
				},
			},
		})
	})

	t.Run("abort, then the rejected revision stays rejected until retried", func(t *testing.T) {
		ns := c.namespace(t)
		var aborted resource.TestCheckFunc
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{Config: releaseConfig(ns, workload("podinfo:1"), steerAnalysis(""), "")},
				{
					PreConfig:   func() { aborted = c.operator(t, ns, atWeight(20), controls.Abort+"=true") },
					Config:      releaseConfig(ns, workload("podinfo:2"), steerAnalysis(""), ""),
					ExpectError: wrappedPattern(`aborted by the operator at canary weight [246]0%: canary-release\.dev/abort=true \(set by kubectl-annotate at`),
				},
				{
					// The same revision again: refused before any write.
					PreConfig: func() {
						if err := aborted(nil); err != nil {
							t.Error(err)
						}
					},
					Config:      releaseConfig(ns, workload("podinfo:2"), steerAnalysis(""), ""),
					ExpectError: regexp.MustCompile(`(?s)refuses\s+the\s+target's\s+template:\s+revision\s+\w+\s+was\s+rejected\s+at\s.*abort.*changed\s+nothing.*retry_rejected`),
					Check:       c.checkImage(ns, "podinfo", "podinfo:1"),
				},
				{
					// A deliberate retry: one attribute.
					Config: releaseConfig(ns, workload("podinfo:2"), steerAnalysis(""), `retry_rejected = "1"`),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:2"),
						c.checkSplit(ns, 100, 0),
					),
				},
			},
		})
	})

	t.Run("a rejected revision stays rejected; a changed one rolls out", func(t *testing.T) {
		ns := c.namespace(t)
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{Config: releaseConfig(ns, manifestWorkload("podinfo:1", "0"), steerAnalysis(""), "")},
				{
					PreConfig:   func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200") },
					Config:      releaseConfig(ns, manifestWorkload("podinfo:2", "0.5"), steerAnalysis(""), ""),
					ExpectError: wrapped("outside threshold_range [min 99]"),
				},
				{
					Config:      releaseConfig(ns, manifestWorkload("podinfo:2", "0.5"), steerAnalysis(""), ""),
					ExpectError: regexp.MustCompile(`(?s)was\s+rejected\s+at\s.*request-success-rate.*changed\s+nothing,\s+and\s+no\s+user\s+was\s+sent\s+to\s+it`),
					Check:       c.checkImage(ns, "podinfo-primary", "podinfo:1"),
				},
				{
					PreConfig: waitOutCanaryMetricWindow,
					Config:    releaseConfig(ns, manifestWorkload("podinfo:3", "0"), steerAnalysis(""), ""),
					Check:     c.checkImage(ns, "podinfo-primary", "podinfo:3"),
				},
			},
		})
	})

	t.Run("promote now", func(t *testing.T) {
		ns := c.namespace(t)
		// Six steps: the promote-now, made at 20 %, acts steps before the last.
		long := strings.Replace(steerAnalysis(""), "[20, 40, 60]", "[10, 20, 30, 40, 50, 60]", 1)
		var promoted resource.TestCheckFunc
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{Config: releaseConfig(ns, workload("podinfo:1"), long, "")},
				{
					PreConfig: func() { promoted = c.operator(t, ns, atWeight(20), controls.PromoteNow+"=true") },
					Config:    releaseConfig(ns, workload("podinfo:2"), long, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						func(s *terraform.State) error { return promoted(s) },
						c.checkImage(ns, "podinfo-primary", "podinfo:2"),
						c.checkSplit(ns, 100, 0),
						resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile(`promoted before its analysis completed, by the operator's promote-now: kubectl-annotate`)),
					),
				},
			},
		})
	})

	t.Run("promote now is refused after a failed check", func(t *testing.T) {
		ns := c.namespace(t)
		srv := newHookRecorder(t, func(path string, n int) int {
			if n == 1 {
				return http.StatusInternalServerError // the first check fails
			}
			return http.StatusOK
		})
		hooked := steerAnalysis(fmt.Sprintf(`
    webhooks = [{ name = "smoke", url = "%s/smoke" }]`, srv.URL))
		var asked resource.TestCheckFunc
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{Config: releaseConfig(ns, workload("podinfo:1"), hooked, "")},
				{
					PreConfig: func() {
						asked = c.operator(t, ns, func(st rollout.Status, _ int64) bool {
							return st.Phase == rollout.PhaseProgressing && st.FailedChecks == 1
						}, controls.PromoteNow+"=true")
					},
					Config: releaseConfig(ns, workload("podinfo:2"), hooked, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						func(s *terraform.State) error { return asked(s) },
						c.checkImage(ns, "podinfo-primary", "podinfo:2"),
						// Promoted through its analysis, every step: not by the refused promote-now.
						resource.TestCheckResourceAttr(addr, "status.message", "Promotion completed! podinfo-primary runs the new revision"),
						checkCluster(func() error { return c.checkEvents(ns, "PromoteNowRefused") }),
					),
				},
			},
		})
	})
}
