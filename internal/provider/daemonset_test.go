package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

// podinfoDaemonSetOn is the target DaemonSet of the DaemonSet tests: a pod on each of the
// stack's kwok nodes.
func podinfoDaemonSetOn(ns, image string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "podinfo"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "podinfo", Image: image, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9898}},
				}}},
			},
		},
	}
}

func daemonSetTargetRef(image string) string {
	return fmt.Sprintf(`target_ref = { kind = "DaemonSet", name = "podinfo" }
  triggers   = { image = %q }`, image)
}

func daemonSetManifest(image, errorRate string) string {
	return strings.Replace(strings.Replace(manifestWorkload(image, errorRate), `kind       = "Deployment"`, `kind       = "DaemonSet"`, 1),
		"      replicas = 2\n", "", 1)
}

func (c *testCluster) createDaemonSet(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	if _, err := c.kube.AppsV1().DaemonSets(ds.Namespace).Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// setDaemonSetTemplate changes the target's image and pod annotations, as `kubectl set image`
// would: the rest of the live template (the release's node selector) stays.
func (c *testCluster) setDaemonSetTemplate(t *testing.T, ns, image string, annotations map[string]string) {
	t.Helper()
	api := c.kube.AppsV1().DaemonSets(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := api.Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.Containers[0].Image = image
		ds.Spec.Template.Annotations = annotations
		_, err = api.Update(context.Background(), ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// daemonSetPods lists the Running pods of the app label's value.
func (c *testCluster) daemonSetPods(ns, app string) ([]corev1.Pod, error) {
	list, err := c.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// checkPrimaryDaemonSet asserts that the primary DaemonSet runs image, on a Ready pod on every
// node it is scheduled on.
func (c *testCluster) checkPrimaryDaemonSet(ns, image string) resource.TestCheckFunc {
	return checkCluster(func() error {
		ds, err := c.kube.AppsV1().DaemonSets(ns).Get(context.Background(), "podinfo-primary", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != image {
			return fmt.Errorf("DaemonSet podinfo-primary runs %s, want %s", got, image)
		}
		s := ds.Status
		if s.DesiredNumberScheduled == 0 || s.NumberReady != s.DesiredNumberScheduled || s.UpdatedNumberScheduled != s.DesiredNumberScheduled {
			return fmt.Errorf("DaemonSet podinfo-primary is not Ready on every node: %+v", s)
		}
		pods, err := c.daemonSetPods(ns, "podinfo-primary")
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Spec.Containers[0].Image != image || !podReady(&p) {
				return fmt.Errorf("primary pod %s runs %s (Ready %v), want %s Ready", p.Name, p.Spec.Containers[0].Image, podReady(&p), image)
			}
		}
		return nil
	})
}

// checkCanaryDaemonSetEmpty asserts that the canary DaemonSet runs no pod, through the node
// selector that no node matches.
func (c *testCluster) checkCanaryDaemonSetEmpty(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		ds, err := c.kube.AppsV1().DaemonSets(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Spec.Template.Spec.NodeSelector[daemonset.NodeSelectorEmptied] != "true" {
			return fmt.Errorf("DaemonSet podinfo's node selector is %v, want %s=true", ds.Spec.Template.Spec.NodeSelector, daemonset.NodeSelectorEmptied)
		}
		// Its last pods may still be going away (kwok deletes them within a moment).
		deadline := time.Now().Add(15 * time.Second)
		for {
			pods, err := c.daemonSetPods(ns, "podinfo")
			if err != nil {
				return err
			}
			if len(pods) == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the canary DaemonSet still runs %d pods, first %s", len(pods), pods[0].Name)
			}
			time.Sleep(300 * time.Millisecond)
		}
	})
}

// TestAccDaemonSet releases a DaemonSet on the stack's kwok nodes, as Flagger does: a
// -primary DaemonSet serves, and the target (the canary) runs pods only for the analysis.
// A good revision is promoted step by step, a bad one is rolled back naming the failed
// metric, a DaemonSet manifest is released the same way, and blue/green runs without a mesh.
// The simulator's invariant log of each namespace is checked empty at its cleanup.
func TestAccDaemonSet(t *testing.T) {
	c := testAccStack(t)
	t.Run("promotion", func(t *testing.T) {
		ns := c.namespace(t)
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() { c.createDaemonSet(t, podinfoDaemonSetOn(ns, "podinfo:6.0.0")) },
					Config:    releaseConfig(ns, daemonSetTargetRef("podinfo:6.0.0"), healthyAnalysis, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.0"),
						c.checkCanaryDaemonSetEmpty(ns),
						c.checkSplit(ns, 100, 0),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						rec = c.recordWeights(t, ns, "podinfo")
						c.setDaemonSetTemplate(t, ns, "podinfo:6.0.1", nil)
					},
					Config: releaseConfig(ns, daemonSetTargetRef("podinfo:6.0.1"), healthyAnalysis, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestMatchResourceAttr(addr, "rollout_plan", wrapped("the canary DaemonSet runs a pod on every node its template selects")),
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.1"),
						func(s *terraform.State) error { return c.checkWeights(rec, 10, 20, 30, 40, 50, 0)(s) },
						c.checkSplit(ns, 100, 0),
						c.checkCanaryDaemonSetEmpty(ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
				{
					ResourceName:            addr,
					ImportState:             true,
					ImportStateId:           ns + "/podinfo",
					ImportStateVerify:       true,
					ImportStateVerifyIgnore: []string{"triggers", "rollout_plan", "last_run"},
				},
			},
		})
	})
	t.Run("rollback", func(t *testing.T) {
		ns := c.namespace(t)
		failing := map[string]string{meshsim.AnnotationErrorRate: "1"}
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() { c.createDaemonSet(t, podinfoDaemonSetOn(ns, "podinfo:6.0.0")) },
					Config:    releaseConfig(ns, daemonSetTargetRef("podinfo:6.0.0"), healthyAnalysis, ""),
				},
				{
					PreConfig: func() {
						c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200")
						c.setDaemonSetTemplate(t, ns, "podinfo:6.0.1", failing)
					},
					Config: releaseConfig(ns, daemonSetTargetRef("podinfo:6.0.1"), healthyAnalysis, ""),
					ExpectError: wrappedPattern(`canary weight 10%: metric request-success-rate returned 0\.00, outside threshold_range \[min 99\] ` +
						`\(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%: 100% of traffic is back on the primary podinfo-primary`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.0"),
						c.checkSplit(ns, 100, 0),
						c.checkCanaryDaemonSetEmpty(ns),
					),
				},
				{
					// The promoted template again: nothing to release.
					PreConfig: func() { c.setDaemonSetTemplate(t, ns, "podinfo:6.0.0", nil) },
					Config:    releaseConfig(ns, daemonSetTargetRef("podinfo:6.0.0"), healthyAnalysis, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.0"),
						c.checkCanaryDaemonSetEmpty(ns),
					),
				},
			},
		})
	})
	t.Run("manifest", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := strings.Replace(strings.Replace(healthyAnalysis, "max_weight  = 50\n", "", 1), "step_weight = 10", "step_weights = [20, 60]", 1)
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					Config: releaseConfig(ns, daemonSetManifest("podinfo:6.0.0", "0"), analysis, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.0"),
						c.checkCanaryDaemonSetEmpty(ns),
						c.checkSplit(ns, 100, 0),
					),
				},
				{
					PreConfig: func() { rec = c.recordWeights(t, ns, "podinfo") },
					Config:    releaseConfig(ns, daemonSetManifest("podinfo:6.0.1", "0"), analysis, ""),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.1"),
						func(s *terraform.State) error { return c.checkWeights(rec, 20, 60, 0)(s) },
						c.checkSplit(ns, 100, 0),
						c.checkCanaryDaemonSetEmpty(ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
				{
					// A Deployment of the same name is another workload: refused at plan time.
					Config:      releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0"), analysis, ""),
					ExpectError: wrappedPattern(`(?s)The target's kind cannot change in place.*primary podinfo-primary is a DaemonSet; releasing a Deployment named "podinfo" instead would leave it serving`),
				},
				{
					// The data source reads a DaemonSet release: both sides' images and the weights.
					Config: releaseConfig(ns, daemonSetManifest("podinfo:6.0.1", "0"), analysis, "") + fmt.Sprintf(`
data "canary_release" "live" {
  name       = "podinfo"
  namespace  = %q
  depends_on = [canary_release.test]
}
`, ns),
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr("data.canary_release.live", "phase", "Succeeded"),
						resource.TestCheckResourceAttr("data.canary_release.live", "primary_image", "podinfo:6.0.1"),
						resource.TestCheckResourceAttr("data.canary_release.live", "canary_image", "podinfo:6.0.1"),
						resource.TestCheckResourceAttr("data.canary_release.live", "canary_weight", "0"),
						resource.TestCheckResourceAttr("data.canary_release.live", "canary_replicas", "0"),
					),
				},
			},
		})
	})
	t.Run("bluegreen", func(t *testing.T) {
		ns := c.namespace(t)
		config := func(image string) string {
			return strings.Replace(strings.Replace(releaseConfig(ns, daemonSetManifest(image, "0"), c.blueGreenAnalysis(ns), ""),
				`mesh_provider = "osm"`, `mesh_provider = "kubernetes"`, 1),
				`target_port = "9898"`, fmt.Sprintf(`target_port = "9898"
    apex        = { annotations = { %q = %q } }`, meshsim.AnnotationClients, meshsim.ClientsDirect), 1)
		}
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					Config: config("podinfo:6.0.0"),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkApexSelects(ns, 100, 0),
						c.checkCanaryDaemonSetEmpty(ns),
					),
				},
				{
					PreConfig: func() { rec = c.recordObjectWeights(t, services, ns, "podinfo", apexSelects) },
					Config:    config("podinfo:6.0.1"),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkPrimaryDaemonSet(ns, "podinfo:6.0.1"),
						func(s *terraform.State) error { return checkRecorded(&rec, 100, 0)(s) },
						c.checkApexSelects(ns, 100, 0),
						c.checkCanaryDaemonSetEmpty(ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
			},
		})
	})
}
