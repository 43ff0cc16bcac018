package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// statefulSetRelease releases StatefulSet name by partition under analysis, rolled back when a
// step makes no progress for deadline seconds.
func statefulSetRelease(ns, name, image, analysis string, deadline int) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = %[3]q
  namespace     = %[1]q
  mesh_provider = "kubernetes"
  target_ref    = { kind = "StatefulSet", name = %[3]q }
  triggers      = { image = %[2]q }
  service       = { port = 9898 }
  analysis = {%[4]s
  }
  progress_deadline_seconds = %[5]d
}
`, ns, image, name, analysis, deadline)
}

// statefulSetConfig releases StatefulSet web by partition: 3 pods, steps of 1 and 2 pods, a
// rollout webhook as the judge.
func statefulSetConfig(ns, image, judge string) string {
	return statefulSetRelease(ns, "web", image, fmt.Sprintf(`
    interval    = "2s"
    threshold   = 1
    step_weight = 34
    max_weight  = 67
    webhooks    = [{ name = "judge", type = "rollout", url = %q, timeout = "5s" }]`, judge), 120)
}

// revisionJudge fails the rollout webhook of every revision whose template runs image bad,
// reading the StatefulSet controller's ControllerRevision the payload's checksum names.
func (c *testCluster) revisionJudge(t *testing.T, ns, bad string) (url string, judged func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ Checksum string }
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		image, err := c.revisionImage(r.Context(), ns, p.Checksum)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		mu.Lock()
		seen = append(seen, image)
		mu.Unlock()
		if image == bad {
			http.Error(w, "revision runs "+bad, http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// revisionImage is the image of a StatefulSet's ControllerRevision rev.
func (c *testCluster) revisionImage(ctx context.Context, ns, rev string) (string, error) {
	cr, err := c.kube.AppsV1().ControllerRevisions(ns).Get(ctx, rev, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	var data struct {
		Spec struct{ Template corev1.PodTemplateSpec } `json:"spec"`
	}
	if err := json.Unmarshal(cr.Data.Raw, &data); err != nil || len(data.Spec.Template.Spec.Containers) == 0 {
		return "", fmt.Errorf("ControllerRevision %s holds no pod template (%v)", rev, err)
	}
	return data.Spec.Template.Spec.Containers[0].Image, nil
}

// createStatefulSet creates StatefulSet name of 3 pods running image, with the given pod
// annotations, and its Service once they are Ready.
func (c *testCluster) createStatefulSet(t *testing.T, ns, name, image string, annotations map[string]string) {
	t.Helper()
	ctx := context.Background()
	replicas := int32(3)
	labels := map[string]string{"app": name}
	set := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.StatefulSetSpec{
		Replicas: &replicas, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: image, Ports: []corev1.ContainerPort{{ContainerPort: 9898}}}}}},
	}}
	if _, err := c.kube.AppsV1().StatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Service comes once every pod is Ready: its clients never meet a Service without.
	deadline := time.Now().Add(time.Minute)
	for ready := false; !ready; {
		if time.Now().After(deadline) {
			t.Fatalf("StatefulSet %s's pods are not Ready after a minute", name)
		}
		time.Sleep(200 * time.Millisecond)
		live, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready = live.Status.ReadyReplicas == replicas
	}
	// The simulator's un-meshed clients call the Service, spread over its Ready pods.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{meshsim.AnnotationClients: meshsim.ClientsDirect}}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Port: 9898, TargetPort: intstr.FromInt32(9898)}}}}
	if _, err := c.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *testCluster) setStatefulSetImage(t *testing.T, ns, image string) {
	t.Helper()
	c.setStatefulSet(t, ns, "web", image, "0")
}

// setStatefulSet changes set name's template: its image, and the share of requests its pods
// fail in the simulator.
func (c *testCluster) setStatefulSet(t *testing.T, ns, name, image, errorRate string) {
	t.Helper()
	ctx := context.Background()
	api := c.kube.AppsV1().StatefulSets(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		set.Spec.Template.Spec.Containers[0].Image = image
		set.Spec.Template.Annotations = map[string]string{meshsim.AnnotationErrorRate: errorRate}
		_, err = api.Update(ctx, set, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkStatefulSet asserts the image each pod of StatefulSet web runs, the template and the
// held partition.
func (c *testCluster) checkStatefulSet(ns, image string) resource.TestCheckFunc {
	return c.checkStatefulSetNamed(ns, "web", image)
}

// checkStatefulSetNamed is checkStatefulSet for the set name.
func (c *testCluster) checkStatefulSetNamed(ns, name, image string) resource.TestCheckFunc {
	return checkCluster(func() error {
		ctx := context.Background()
		set, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := set.Spec.Template.Spec.Containers[0].Image; got != image {
			return fmt.Errorf("StatefulSet %s's template runs %s, want %s", name, got, image)
		}
		if ru := set.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.Partition == nil || *ru.Partition != statefulset.HoldPartitionMax {
			return fmt.Errorf("StatefulSet %s's partition is not held at %d: %+v", name, statefulset.HoldPartitionMax, ru)
		}
		var images []string
		for i := range 3 {
			pod, err := c.kube.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("%s-%d", name, i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			images = append(images, pod.Spec.Containers[0].Image)
			if !podReady(pod) {
				return fmt.Errorf("pod %s is not Ready", pod.Name)
			}
		}
		if want := strings.Repeat(image+",", 3); strings.Join(images, ",")+"," != want {
			return fmt.Errorf("pods run %v, want %s on all three", images, image)
		}
		return nil
	})
}

// TestAccStatefulSet_promoteAndRollback: a StatefulSet is released in place by its partition on
// the stack's kube-controller-manager: a good revision reaches every pod, a bad one is rolled
// back to the promoted template on every pod, and the partition is held between releases.
func TestAccStatefulSet_promoteAndRollback(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	c.createStatefulSet(t, ns, "web", "podinfo:6.0.0", nil)
	judge, judged := c.revisionJudge(t, ns, "podinfo:6.0.2")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: statefulSetConfig(ns, "podinfo:6.0.0", judge),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Initialized"),
					c.checkStatefulSet(ns, "podinfo:6.0.0"),
				),
			},
			{
				PreConfig: func() { c.setStatefulSetImage(t, ns, "podinfo:6.0.1") },
				Config:    statefulSetConfig(ns, "podinfo:6.0.1", judge),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkStatefulSet(ns, "podinfo:6.0.1"),
					func(*terraform.State) error {
						if got := judged(); len(got) < 2 {
							return fmt.Errorf("the judge analysed %v, want both steps of podinfo:6.0.1", got)
						}
						return nil
					},
				),
			},
			{
				PreConfig:   func() { c.setStatefulSetImage(t, ns, "podinfo:6.0.2") },
				Config:      statefulSetConfig(ns, "podinfo:6.0.2", judge),
				ExpectError: wrappedPattern(`rolled back, every pod of StatefulSet \S+ runs revision \S+ again and is Ready`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkStatefulSet(ns, "podinfo:6.0.1"),
				),
			},
		},
	})
}

// TestAccStatefulSet_abort: an operator's abort at the first step, with 1 of the 3 pods on the
// new revision, rolls the StatefulSet back on the stack's kube-controller-manager: the apply
// fails naming the abort and who set it, every pod runs the promoted revision again behind the
// held partition, and the record rejects the aborted revision.
func TestAccStatefulSet_abort(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	c.createStatefulSet(t, ns, "web", "podinfo:6.0.0", nil)
	judge, _ := c.revisionJudge(t, ns, "none")
	var aborted resource.TestCheckFunc
	firstStep := func(ctx context.Context) bool {
		set, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && set.Spec.UpdateStrategy.RollingUpdate != nil && set.Spec.UpdateStrategy.RollingUpdate.Partition != nil &&
			*set.Spec.UpdateStrategy.RollingUpdate.Partition == 2
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: statefulSetConfig(ns, "podinfo:6.0.0", judge),
				Check:  c.checkStatefulSet(ns, "podinfo:6.0.0"),
			},
			{
				PreConfig: func() {
					c.setStatefulSetImage(t, ns, "podinfo:6.0.1")
					aborted = c.annotateWhen(t, ns, "web", firstStep, controls.Abort+"=true")
				},
				Config: statefulSetConfig(ns, "podinfo:6.0.1", judge),
				ExpectError: wrappedPattern(`(?s)aborted by the operator at canary weight 33%: canary-release\.dev/abort=true \(set by kubectl-annotate at ` +
					`.*rolled back, every pod of StatefulSet \S+ runs revision \S+ again and is Ready`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error { return aborted(s) },
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkStatefulSet(ns, "podinfo:6.0.0"),
					checkCluster(func() error {
						cs, _, err := rollout.LoadState(context.Background(), c.kube, ns, "web")
						if err != nil {
							return err
						}
						if j := cs.Status.Rejected; j == nil || j.Check != "abort" || !strings.Contains(j.Reason, "kubectl-annotate") {
							return fmt.Errorf("the record's rejection is %+v, want the abort by kubectl-annotate", j)
						}
						return nil
					}),
				),
			},
		},
	})
}

// statefulSetMetricsConfig judges each revision by the built-in metric of its pods, selected
// by controller-revision-hash, on the simulator's traffic.
func statefulSetMetricsConfig(ns, image string) string {
	return statefulSetRelease(ns, "web", image, `
    interval    = "2s"
    threshold   = 3
    step_weight = 34
    max_weight  = 67
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]`, 120)
}

// TestAccStatefulSet_builtInMetrics: the simulator's clients call the set's Service; the
// built-in success rate of the updated pods (by controller-revision-hash) promotes a good
// revision and rolls back one whose pods fail every request, each pod's image asserted, and
// the simulator's invariant log (which checks the pods on an unanalysed revision against the
// recorded step) stays empty.
func TestAccStatefulSet_builtInMetrics(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	c.createStatefulSet(t, ns, "web", "podinfo:6.0.0", nil)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: statefulSetMetricsConfig(ns, "podinfo:6.0.0"),
				Check:  c.checkStatefulSet(ns, "podinfo:6.0.0"),
			},
			{
				PreConfig: func() { c.setStatefulSet(t, ns, "web", "podinfo:6.0.1", "0") },
				Config:    statefulSetMetricsConfig(ns, "podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkStatefulSet(ns, "podinfo:6.0.1"),
				),
			},
			{
				PreConfig:   func() { c.setStatefulSet(t, ns, "web", "podinfo:6.0.2", "1") },
				Config:      statefulSetMetricsConfig(ns, "podinfo:6.0.2"),
				ExpectError: wrappedPattern(`metric request-success-rate returned 0\.00, outside threshold_range \[min 99\]`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkStatefulSet(ns, "podinfo:6.0.1"),
				),
			},
		},
	})
}

// TestAccStatefulSet_lostStateConfigMap: the release's state ConfigMap is deleted behind it.
// The set it holds is what remains of the release (its pinned revision), so the refresh keeps
// the release and says what happened, and the next release of a new image goes through the
// analysis as before. Before, the refresh found no primary Deployment, dropped the release
// from the state without the identity the framework requires, and every later plan, apply
// and destroy failed with "Missing Resource Identity After Read" (make chaos's statefulset
// schedules).
func TestAccStatefulSet_lostStateConfigMap(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	c.createStatefulSet(t, ns, "web", "podinfo:6.0.0", nil)
	judge, _ := c.revisionJudge(t, ns, "podinfo:6.0.2")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: statefulSetConfig(ns, "podinfo:6.0.0", judge),
				Check:  resource.TestCheckResourceAttr(addr, "status.phase", "Initialized"),
			},
			{
				PreConfig: func() {
					if err := c.kube.CoreV1().ConfigMaps(ns).Delete(context.Background(), rollout.StateConfigMapName("web"), metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				// The next plan shows the release to rebuild: its record is gone.
				RefreshState: true, ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "id", ns+"/web"),
					resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile(`state ConfigMap is missing; the next apply rebuilds it from the primary StatefulSet`)),
				),
			},
			{
				PreConfig: func() { c.setStatefulSetImage(t, ns, "podinfo:6.0.1") },
				Config:    statefulSetConfig(ns, "podinfo:6.0.1", judge),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkStatefulSet(ns, "podinfo:6.0.1"),
				),
			},
			{
				// With the set given back too (its partition at 0, no release's mark), nothing
				// of the release is left: the refresh drops it from the state, and the next plan
				// creates it.
				PreConfig: func() {
					ctx := context.Background()
					if err := c.kube.CoreV1().ConfigMaps(ns).Delete(ctx, rollout.StateConfigMapName("web"), metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
					err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
						set, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, "web", metav1.GetOptions{})
						if err != nil {
							return err
						}
						delete(set.Annotations, statefulset.AnnotationPinned)
						set.Spec.UpdateStrategy.RollingUpdate.Partition = ptr(int32(0))
						_, err = c.kube.AppsV1().StatefulSets(ns).Update(ctx, set, metav1.UpdateOptions{})
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
				},
				RefreshState: true, ExpectNonEmptyPlan: true,
				Check: func(s *terraform.State) error {
					if _, ok := s.RootModule().Resources[addr]; ok {
						return fmt.Errorf("%s is still in the state, though nothing of it is left", addr)
					}
					return nil
				},
			},
		},
	})
}
