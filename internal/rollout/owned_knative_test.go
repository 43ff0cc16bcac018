package rollout

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/knative"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// knativeRevision is a Ready Knative Revision of the Service podinfo.
func knativeRevision(name string) string {
	return `
apiVersion: serving.knative.dev/v1
kind: Revision
metadata: {name: ` + name + `, namespace: test, labels: {serving.knative.dev/service: podinfo}}
status:
  conditions: [{type: Ready, status: "True"}]
`
}

// knativeSetup initialises a release of the Knative Service podinfo through the real driver
// (its router and its target are two objects, as the provider makes them), on fake clients:
// revision podinfo-00001 is pinned as the primary, and Knative has made podinfo-00002 of the
// template applied since, with a Ready pod.
func knativeSetup(t *testing.T, rel Release) (*Engine, router.Clients, Status) {
	t.Helper()
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{`
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: podinfo, namespace: test}
spec:
  template:
    spec: {containers: [{image: "podinfo:1"}]}
status: {latestCreatedRevisionName: podinfo-00001, latestReadyRevisionName: podinfo-00001}
`, knativeRevision("podinfo-00001"), knativeRevision("podinfo-00002")})
	for _, rev := range []string{"podinfo-00001", "podinfo-00002"} {
		p := routertest.ReadyPod(rev + "-deployment-0")
		p.Labels = map[string]string{knative.LabelRevision: rev}
		if _, err := c.Kube.CoreV1().Pods("test").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	routertest.EnforceResourceVersions(t, c, knative.ServiceResource) // the router's held copy is safe only because of them
	spec := router.Spec{Namespace: rel.Namespace, Name: rel.Name, Target: rel.Target}
	e := &Engine{Kube: c.Kube, Router: knative.Driver{}.NewRouter(c, spec), Owned: knative.Driver{}.NewTarget(c, spec),
		Metrics: passing(), HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil || st.Phase != PhaseInitialized {
		t.Fatalf("Initialize = %s, %v", st.Phase, err)
	}
	svc := routertest.Get(t, c, knative.ServiceResource, "test", "podinfo")
	_ = unstructured.SetNestedField(svc.Object, "podinfo-00002", "status", "latestCreatedRevisionName")
	_ = unstructured.SetNestedField(svc.Object, "podinfo-00002", "status", "latestReadyRevisionName")
	routertest.Update(t, c, knative.ServiceResource, svc)
	return e, c, st
}

// knativePins are the Service's pin annotations.
func knativePins(t *testing.T, c router.Clients) (primary, canary string) {
	t.Helper()
	a := routertest.Get(t, c, knative.ServiceResource, "test", "podinfo").GetAnnotations()
	return a[knative.AnnotationPrimaryRevision], a[knative.AnnotationCanaryRevision]
}

// A run killed in Progressing before it pinned its canary revision: the recovery reads the
// live split before it pins the canary, and the driver's router then writes the first step
// from the copy of the Service that read returned, from before the pin. The recovery of a good
// template analyses it from the first step and promotes it. It failed with "no canary revision
// is pinned (annotation canary-release.dev/canary-revision), so the canary cannot take 10%"
// and rolled back (make chaos, Knative seed 1353164033270939996), and only the apply after it,
// whose pin was already there, succeeded.
func TestOwnedKnativeKilledBeforeTheCanaryPinRecoversThenPromotes(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, c, st := knativeSetup(t, rel)
	killed := e.newRun(rel, st, nil)
	killed.st.LastAppliedSpec, killed.st.CanarySpec = "podinfo-00002", "podinfo-00002"
	if err := killed.record(ctx, PhaseProgressing, normalEvent, "killed here"); err != nil {
		t.Fatal(err)
	}
	got, err := e.Apply(ctx, rel, nil, st)
	if err != nil || got.Phase != PhaseSucceeded || got.LastPromotedSpec != "podinfo-00002" {
		t.Fatalf("recovery Apply = %s (promoted %q), %v; want Succeeded, podinfo-00002 promoted", got.Phase, got.LastPromotedSpec, err)
	}
	if primary, _ := knativePins(t, c); primary != "podinfo-00002" {
		t.Fatalf("pinned primary %q, want podinfo-00002", primary)
	}
	routertest.MustWeights(t, e.Router, router.Weights{Primary: 100})
}

// The first release after the initialisation is the same case without a kill: the Service
// has never had a canary pinned, and the split read before the pin is the router's copy. It
// failed the same way at its first step.
func TestOwnedKnativeFirstReleaseAfterTheInitialisationPromotes(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, c, st := knativeSetup(t, rel)
	got, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil || got.Phase != PhaseSucceeded || got.LastPromotedSpec != "podinfo-00002" {
		t.Fatalf("Apply = %s (promoted %q), %v; want Succeeded, podinfo-00002 promoted", got.Phase, got.LastPromotedSpec, err)
	}
	if primary, _ := knativePins(t, c); primary != "podinfo-00002" {
		t.Fatalf("pinned primary %q, want podinfo-00002", primary)
	}
	routertest.MustWeights(t, e.Router, router.Weights{Primary: 100})
}
