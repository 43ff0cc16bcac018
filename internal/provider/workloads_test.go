package provider

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
)

// setConfigMap writes the LEVEL of the ConfigMap podinfo-config, as kubectl would.
func (c *testCluster) setConfigMap(t *testing.T, ns, level string) {
	t.Helper()
	ctx := context.Background()
	cms := c.kube.CoreV1().ConfigMaps(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, "podinfo-config", metav1.GetOptions{})
		if err != nil {
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-config"}, Data: map[string]string{"LEVEL": level}}, metav1.CreateOptions{})
			return err
		}
		cm.Data = map[string]string{"LEVEL": level}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *testCluster) checkPrimaryConfig(ns, level string) resource.TestCheckFunc {
	return checkCluster(func() error {
		cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "podinfo-config-primary", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cm.Data["LEVEL"] != level {
			return fmt.Errorf("the primary's ConfigMap copy holds LEVEL=%s, want %s", cm.Data["LEVEL"], level)
		}
		primary, err := c.deployment(ns, "podinfo-primary")
		if err != nil {
			return err
		}
		if ref := primary.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; ref != "podinfo-config-primary" {
			return fmt.Errorf("the primary reads ConfigMap %s, want its copy", ref)
		}
		// Pods read envFrom once, at start: the promoted config must roll the primary's pods,
		// so its pod template names the promoted revision.
		st, _, err := rollout.LoadState(context.Background(), c.kube, ns, "podinfo")
		if err != nil {
			return err
		}
		if got := primary.Spec.Template.Annotations[rollout.AnnotationConfigRevision]; got != st.Status.LastPromotedSpec {
			return fmt.Errorf("the primary's pod template has config revision %q, want the promoted %q: its pods keep the old LEVEL", got, st.Status.LastPromotedSpec)
		}
		return nil
	})
}

// A ConfigMap changed with kubectl is a new revision: the plan proposes it, the apply analyses
// it, and the primary's copy takes the new data only on promotion.
func TestAccRelease_configTracking(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	c.setConfigMap(t, ns, "info")
	d := podinfoDeployment(ns, "podinfo:6.0.0", nil)
	d.Spec.Template.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "podinfo-config"}}}}
	c.createDeployment(t, d)
	hooks := newHookRecorder(t, func(string, int) int { return http.StatusOK })
	failing := false
	hooks.answer = func(string, int) int {
		if failing {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	analysis := healthyAnalysis + fmt.Sprintf(`
    webhooks = [{ name = "smoke", url = "%s/smoke" }]`, hooks.URL)
	config := releaseConfig(ns, `target_ref = { name = "podinfo" }`, analysis, "")
	var rec *weightRecorder
	const addr = "canary_release.test"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config, Check: c.checkPrimaryConfig(ns, "info")},
			{
				PreConfig: func() {
					rec = c.recordWeights(t, ns, "podinfo")
					c.setConfigMap(t, ns, "debug")
				},
				Config:           config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)}},
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkPrimaryConfig(ns, "debug"),
					func(s *terraform.State) error { return c.checkWeights(rec, 10, 20, 30, 40, 50, 0)(s) },
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
				),
			},
			{
				PreConfig: func() {
					failing = true
					c.setConfigMap(t, ns, "trace")
				},
				Config:      config,
				ExpectError: wrapped(`rollout webhook smoke failed: status 500`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check:              resource.ComposeAggregateTestCheckFunc(c.checkPrimaryConfig(ns, "debug"), c.checkSplit(ns, 100, 0)),
			},
			{
				// Back to the promoted config: nothing to release, and destroy may hand the
				// workload back to the target (it refuses while the target runs unanalysed config).
				PreConfig: func() { c.setConfigMap(t, ns, "debug") },
				Config:    config,
				Check:     resource.ComposeAggregateTestCheckFunc(c.checkPrimaryConfig(ns, "debug"), c.checkSplit(ns, 100, 0)),
			},
		},
	})
}

// The primary gets a copy of the target's HorizontalPodAutoscaler that follows it.
func TestAccRelease_autoscaler(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
	hpas := c.kube.AutoscalingV2().HorizontalPodAutoscalers(ns)
	two := int32(2)
	if _, err := hpas.Create(context.Background(), &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "podinfo"},
			MinReplicas:    &two, MaxReplicas: 4,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkHPA := func(minReplicas, maxReplicas int32) resource.TestCheckFunc {
		return checkCluster(func() error {
			h, err := hpas.Get(context.Background(), "podinfo-primary", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if h.Spec.ScaleTargetRef.Name != "podinfo-primary" || *h.Spec.MinReplicas != minReplicas || h.Spec.MaxReplicas != maxReplicas {
				return fmt.Errorf("primary HPA scales %s from %d to %d, want podinfo-primary from %d to %d",
					h.Spec.ScaleTargetRef.Name, *h.Spec.MinReplicas, h.Spec.MaxReplicas, minReplicas, maxReplicas)
			}
			return nil
		})
	}
	config := releaseConfig(ns, `target_ref = { name = "podinfo" }`, healthyAnalysis, `autoscaler_ref = { name = "podinfo" }`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config, Check: checkHPA(2, 4)},
			{
				PreConfig: func() {
					err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
						h, err := hpas.Get(context.Background(), "podinfo", metav1.GetOptions{})
						if err != nil {
							return err
						}
						h.Spec.MaxReplicas = 6
						_, err = hpas.Update(context.Background(), h, metav1.UpdateOptions{})
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				},
				Config:           config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("canary_release.test", plancheck.ResourceActionUpdate)}},
				Check:            checkHPA(2, 6),
			},
		},
	})
}

// readyPods plays the kubelet's readiness probes: the template keeps every pod unready (kwok
// runs it with Ready=False), and this marks all of the primary's pods and exactly one of the
// canary's Ready in their status, as a probe that passes would.
func (c *testCluster) readyPods(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	go func() {
		canaryReady := ""
		for ctx.Err() == nil {
			pods, _ := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || podReady(p) {
					continue
				}
				switch p.Labels["app"] {
				case "podinfo":
					if canaryReady != "" && canaryReady != p.Name {
						continue
					}
					canaryReady = p.Name
				case "podinfo-primary":
				default:
					continue
				}
				for j := range p.Status.Conditions {
					if p.Status.Conditions[j].Type == corev1.PodReady || p.Status.Conditions[j].Type == corev1.ContainersReady {
						p.Status.Conditions[j].Status = corev1.ConditionTrue
					}
				}
				for j := range p.Status.ContainerStatuses {
					p.Status.ContainerStatuses[j].Ready = true
				}
				_, _ = c.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// canary_ready_threshold = 50: a canary with one of its two pods Ready gets its analysis and is
// promoted; with the default 100 % the same canary would wait out the progress deadline.
func TestAccRelease_canaryReadyThreshold(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	analysis := healthyAnalysis + "\n    canary_ready_threshold = 50"
	unready := func(image string) string {
		return strings.Replace(manifestWorkload(image, "0"), `"sim.canary-release.dev/error-rate" = "0"`,
			fmt.Sprintf(`"sim.canary-release.dev/error-rate" = "0", %q = "false"`, localstack.ReadyAnnotation), 1)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), analysis, "")},
			{
				PreConfig: func() { c.readyPods(t, ns) },
				Config:    releaseConfig(ns, unready("podinfo:6.0.1"), analysis, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkSplit(ns, 100, 0),
					resource.TestCheckResourceAttr("canary_release.test", "status.phase", "Succeeded"),
				),
			},
		},
	})
}
