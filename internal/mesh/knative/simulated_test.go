package knative

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// The driver against the simulated Knative controller: a first pin, a new template's revision
// pinned as canary at 0, a step to 20% that Knative serves once the revision is Ready, the
// promotion by pin, and the traffic back to 100/0 on the promoted revision, with no
// invariant entry on the way.
func TestKnativeReleaseOnTheSimulator(t *testing.T) {
	ctx := t.Context()
	c := routertest.FakeClients(t, []string{`
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: podinfo, namespace: test, uid: ksvc}
spec:
  template:
    spec: {containers: [{image: "podinfo:1"}]}
`})
	routertest.EnforceResourceVersions(t, c, ServiceResource) // the router's held copy is safe only because of them
	disc := c.Kube.Discovery().(*fakediscovery.FakeDiscovery)
	disc.Resources = append(disc.Resources, &metav1.APIResourceList{GroupVersion: "serving.knative.dev/v1",
		APIResources: []metav1.APIResource{{Name: "services"}, {Name: "revisions"}}})
	sim := meshsim.New(meshsim.Config{Kube: c.Kube, Dynamic: c.Dynamic, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := sim.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r, tgt := Driver{}.NewRouter(c, spec), Driver{}.NewTarget(c, spec)
	// serve plays kube-controller-manager and kwok: a Ready pod for the revision's Deployment.
	serve := func(rev string) {
		d, err := c.Kube.AppsV1().Deployments("test").Get(ctx, rev+"-deployment", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := routertest.ReadyPod(rev + "-0")
		p.Labels = d.Spec.Template.Labels
		if _, err := c.Kube.CoreV1().Pods("test").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d.Status.ReadyReplicas = 1
		if _, err := c.Kube.AppsV1().Deployments("test").UpdateStatus(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	served := func(want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			sim.ReconcileKnative(ctx)
			svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
			return describe(traffic(svc, "status")) == want, nil
		})
		if err != nil {
			t.Fatalf("Knative serves %s, want %s", describe(traffic(routertest.Get(t, c, ServiceResource, "test", "podinfo"), "status")), want)
		}
	}
	sim.ReconcileKnative(ctx)
	serve("podinfo-00001")
	served("100% to latestRevision") // Knative's default before the release pins anything
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00001", admit: true}); err != nil {
		t.Fatal(err)
	}
	served("100% to podinfo-00001")

	// The user applies a new template: Knative makes podinfo-00002, which gets nothing.
	svc := routertest.Get(t, c, ServiceResource, "test", "podinfo")
	_ = unstructured.SetNestedSlice(svc.Object, []any{map[string]any{"image": "podinfo:2"}}, "spec", "template", "spec", "containers")
	routertest.Update(t, c, ServiceResource, svc)
	sim.ReconcileKnative(ctx)
	if revs, err := tgt.Revisions(ctx); err != nil || revs.LatestCreated != "podinfo-00002" {
		t.Fatalf("revisions %+v, %v", revs, err)
	}
	if err := tgt.PinCanary(ctx, "podinfo-00002"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}); err != nil {
		t.Fatal(err)
	}
	served("100% to podinfo-00001") // podinfo-00002 has no Ready pod yet
	serve("podinfo-00002")
	served("20% to podinfo-00002, 80% to podinfo-00001")
	if ok, err := tgt.Serving(ctx, "podinfo-00002"); err != nil || !ok {
		t.Fatalf("podinfo-00002 serving %v, %v", ok, err)
	}

	// Promotion, then the traffic back on the promoted revision.
	if err := tgt.PinPrimary(ctx, proof{rev: "podinfo-00002", admit: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	served("0% to podinfo-00002, 100% to podinfo-00002")
	start := time.Now()
	sim.Tick(start)
	sim.Tick(start.Add(time.Second))
	if inv := sim.Invariants(""); len(inv) > 0 {
		t.Fatalf("invariants broken: %+v", inv)
	}
	if got := pinsOf(routertest.Get(t, c, ServiceResource, "test", "podinfo")); got.primary != "podinfo-00002" {
		t.Fatalf("primary pin %q", got.primary)
	}
}

func traffic(svc *unstructured.Unstructured, field string) []any {
	list, _, _ := unstructured.NestedSlice(svc.Object, field, "traffic")
	return list
}
