package meshsim

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// knativeService is the user's Knative Service podinfo running image with pod annotations.
func knativeService(image string, annotations map[string]any, traffic ...any) *unstructured.Unstructured {
	spec := map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": annotations},
		"spec": map[string]any{"containers": []any{map[string]any{
			"image": image, "ports": []any{map[string]any{"containerPort": int64(9898)}},
		}}},
	}}
	if len(traffic) > 0 {
		spec["traffic"] = traffic
	}
	u := obj("serving.knative.dev/v1", "Service", ns, "podinfo", spec)
	u.SetUID("ksvc-uid")
	return u
}

func revisionTarget(name string, pct int64) map[string]any {
	return map[string]any{"revisionName": name, "latestRevision": false, "percent": pct}
}

// serve plays kube-controller-manager and kwok for a revision's Deployment: one Ready pod with
// the Deployment's pod template, and a Ready replica in its status.
func (f *fixture) serve(revision string) {
	f.t.Helper()
	d, err := f.kube.AppsV1().Deployments(ns).Get(f.ctx, revision+"-deployment", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: revision + "-deployment-0",
			Labels: d.Spec.Template.Labels, Annotations: d.Spec.Template.Annotations},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.1.0.%d", len(revision)),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if _, err := f.kube.CoreV1().Pods(ns).Create(f.ctx, pod, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	d.Status.ReadyReplicas = 1
	if _, err := f.kube.AppsV1().Deployments(ns).UpdateStatus(f.ctx, d, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.waitFor("pod of "+revision, func() bool {
		_, err := f.sim.view().pods.Pods(ns).Get(pod.Name)
		return err == nil
	})
}

// knativeStatus reconciles and returns the Service's status once the simulator's cache has it.
func (f *fixture) knativeStatus() map[string]any {
	f.t.Helper()
	f.sim.ReconcileKnative(f.ctx)
	live, err := f.dyn.Resource(KnativeServiceGVR).Namespace(ns).Get(f.ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.waitFor("cache sees the Knative Service's status", func() bool {
		got := f.sim.view().get(KnativeServiceGVR, ns, "podinfo")
		return got != nil && jsonEqual(got.Object["status"], live.Object["status"])
	})
	status, _, _ := unstructured.NestedMap(live.Object, "status")
	return status
}

func (f *fixture) setKnativeSpec(u *unstructured.Unstructured) {
	f.t.Helper()
	c := f.dyn.Resource(KnativeServiceGVR).Namespace(ns)
	cur, err := c.Get(f.ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cur.Object["spec"] = u.Object["spec"]
	if _, err := c.Update(f.ctx, cur, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func servedText(status map[string]any) string {
	var parts []string
	for _, t := range maps(status, "traffic") {
		pct, _ := num(t, "percent")
		parts = append(parts, fmt.Sprintf("%s=%d", str(t, "revisionName"), int(pct)))
	}
	return strings.Join(parts, " ")
}

// The simulator plays Knative's controller: a template becomes a Revision with a Deployment
// and a private Service; the Service's route serves its traffic only once every revision it
// names is Ready; an unchanged template makes no new revision, a changed one does.
func TestKnativeRevisionsAndRoute(t *testing.T) {
	f := newFixture(t, RouterGVRs, knativeService("podinfo:1", nil))
	st := f.knativeStatus()
	if st["latestCreatedRevisionName"] != "podinfo-00001" || st["latestReadyRevisionName"] != "" || servedText(st) != "" {
		t.Fatalf("before its pods are Ready: %v", st)
	}
	if _, err := f.kube.CoreV1().Services(ns).Get(f.ctx, "podinfo-00001-private", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	d, err := f.kube.AppsV1().Deployments(ns).Get(f.ctx, "podinfo-00001-deployment", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" || d.Spec.Template.Labels["serving.knative.dev/revision"] != "podinfo-00001" {
		t.Fatalf("Deployment template: image %s labels %v", img, d.Spec.Template.Labels)
	}
	f.serve("podinfo-00001")
	if st = f.knativeStatus(); st["latestReadyRevisionName"] != "podinfo-00001" || servedText(st) != "podinfo-00001=100" {
		t.Fatalf("once Ready: %v", st)
	}
	f.knativeStatus()
	if revs, _ := f.dyn.Resource(KnativeRevisionGVR).Namespace(ns).List(f.ctx, metav1.ListOptions{}); len(revs.Items) != 1 {
		t.Fatalf("an unchanged template made %d revisions", len(revs.Items))
	}

	// A new template pinned at 20% is served only once its revision is Ready.
	f.setKnativeSpec(knativeService("podinfo:2", map[string]any{AnnotationErrorRate: "0.5"},
		revisionTarget("podinfo-00002", 20), revisionTarget("podinfo-00001", 80)))
	if st = f.knativeStatus(); st["latestCreatedRevisionName"] != "podinfo-00002" || servedText(st) != "podinfo-00001=100" {
		t.Fatalf("while podinfo-00002 starts: %v", st)
	}
	f.serve("podinfo-00002")
	if st = f.knativeStatus(); servedText(st) != "podinfo-00002=20 podinfo-00001=80" {
		t.Fatalf("once podinfo-00002 is Ready: %v", st)
	}
	if got := describe(resolveRoutes(f.sim.view())); got != "knative test/podinfo -> test/Service/podinfo [podinfo-00002-private=20 podinfo-00001-private=80]" {
		t.Fatalf("routes: %s", got)
	}
}

// Kourier's Envoy cluster stats carry <namespace>/<revision>, which the built-in queries
// select with {{ route }} the canary revision.
func TestKnativeMetrics(t *testing.T) {
	// The Knative Service's own Service carries the load annotation: 100 000 requests to the
	// canary, for its p99 at a bucket bound (see TestLatencyFromPodAnnotations).
	f := newFixture(t, RouterGVRs, knativeService("podinfo:1", nil), service("podinfo", nil, map[string]string{AnnotationRPS: "10000"}))
	f.knativeStatus()
	f.serve("podinfo-00001")
	f.knativeStatus()
	f.setKnativeSpec(knativeService("podinfo:2", map[string]any{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "250"},
		revisionTarget("podinfo-00002", 20), revisionTarget("podinfo-00001", 80)))
	f.knativeStatus()
	f.serve("podinfo-00002")
	f.knativeStatus()
	f.run(50)
	p := f.sum(MetricEnvoyRequests, match("envoy_cluster_name=test/podinfo-00001"))
	c := f.sum(MetricEnvoyRequests, match("envoy_cluster_name=test/podinfo-00002"))
	if c == 0 || p/c < 3.5 || p/c > 4.5 {
		t.Fatalf("primary/canary requests %v/%v, want an 80/20 split", p, c)
	}
	if got := f.successRate(MetricEnvoyRequests, "envoy_response_code", "envoy_cluster_name=test/podinfo-00002"); got < 40 || got > 60 {
		t.Fatalf("canary success rate %v, want about 50", got)
	}
	f.wantP99("canary", f.p99(MetricEnvoyRequestTime, "envoy_cluster_name=test/podinfo-00002"), 250, EnvoyBuckets, 0.2)
	if strings.TrimSpace(f.invOut.String()) != "" {
		t.Fatalf("invariant entries: %s", f.invOut.String())
	}
}
