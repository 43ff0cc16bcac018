package conformance

import (
	"github.com/canary-release/terraform-provider-canary/internal/router"

	"context"
	"testing"
)

var osmSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 9898}

func TestOSMReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, nil)
	r, err := New("osm", c, osmSpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ts := get(t, c, router.TrafficSplitResource, "test", "podinfo")
	want := `{"service":"podinfo","backends":[{"service":"podinfo-canary","weight":0},{"service":"podinfo-primary","weight":100}]}`
	if got := specJSON(t, ts); got != compactJSON(t, want) {
		t.Fatalf("spec %s\nwant %s", got, compactJSON(t, want))
	}
	if l := ts.GetLabels(); l[router.LabelManagedBy] != router.ManagedByValue || l[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", l)
	}
	mustWeights(t, r, router.Weights{Primary: 100, Canary: 0})
	mustDrift(t, r)
}

func TestOSMHostsSetRootService(t *testing.T) {
	s := osmSpec
	s.Hosts = []string{"podinfo-root"}
	c := fakeClients(t, nil)
	r, _ := New("osm", c, s)
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, router.TrafficSplitResource, "test", "podinfo").Object["spec"].(map[string]any)["service"]; got != "podinfo-root" {
		t.Fatalf("spec.service %v", got)
	}
}

func TestOSMSetRoutesAndReconcileKeepsWeights(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, nil)
	r, _ := New("osm", c, osmSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 60, Canary: 40}); err != nil {
		t.Fatal(err)
	}
	mustWeights(t, r, router.Weights{Primary: 60, Canary: 40})
	if err := r.SetRoutes(ctx, router.Weights{Primary: 0, Canary: 100}); err != nil {
		t.Fatal(err)
	}
	mustWeights(t, r, router.Weights{Primary: 0, Canary: 100})
	ts := get(t, c, router.TrafficSplitResource, "test", "podinfo")
	if got, want := specJSON(t, ts), `{"backends":[{"service":"podinfo-canary","weight":100},{"service":"podinfo-primary","weight":0}],"service":"podinfo"}`; got != want {
		t.Fatalf("spec %s", got)
	}

	// Someone edits the root service: drift, and Reconcile repairs it without touching weights.
	ts.Object["spec"].(map[string]any)["service"] = "other"
	update(t, c, router.TrafficSplitResource, ts)
	mustDrift(t, r, "TrafficSplit test/podinfo: spec.service differs from the generated one")
	// The next apply builds its router afresh (a run's router holds what it read last).
	r, _ = New("osm", c, osmSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	mustDrift(t, r)
	mustWeights(t, r, router.Weights{Primary: 0, Canary: 100})
}

func TestOSMErrors(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, nil)
	r, _ := New("osm", c, osmSpec)
	_, err := r.GetRoutes(ctx)
	wantErr(t, err, "TrafficSplit test/podinfo not found")
	wantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100}), "TrafficSplit test/podinfo not found")
	mustDrift(t, r, "TrafficSplit test/podinfo is missing")

	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	wantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")
	wantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 50, Canary: 40}), "sum to 100")
	wantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 110, Canary: -10}), "0..100")

	ts := get(t, c, router.TrafficSplitResource, "test", "podinfo")
	for _, b := range ts.Object["spec"].(map[string]any)["backends"].([]any) {
		b.(map[string]any)["weight"] = int64(0)
	}
	update(t, c, router.TrafficSplitResource, ts)
	_, err = r.GetRoutes(ctx)
	wantErr(t, err, "both 0")
}

func TestOSMFinalize(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, nil)
	r, _ := New("osm", c, osmSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if exists(t, c, router.TrafficSplitResource, "test", "podinfo") {
		t.Fatal("TrafficSplit still exists")
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
}

func TestOSMRefusesForeignObject(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, []string{`
apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata: {name: podinfo, namespace: test}
spec:
  service: podinfo
  backends: [{service: podinfo, weight: 100}]
`})
	r, _ := New("osm", c, osmSpec)
	wantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(t, c, router.TrafficSplitResource, "test", "podinfo") {
		t.Fatal("Finalize deleted an object it does not own")
	}
}
