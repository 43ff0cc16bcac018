package osm

import (
	"context"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

func TestOSMReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, err := New("osm", c, routertest.OSMSpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ts := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")
	want := `{"service":"podinfo","backends":[{"service":"podinfo-canary","weight":0},{"service":"podinfo-primary","weight":100}]}`
	if got := routertest.SpecJSON(t, ts); got != routertest.CompactJSON(t, want) {
		t.Fatalf("spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	if l := ts.GetLabels(); l[router.LabelManagedBy] != router.ManagedByValue || l[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", l)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Canary: 0})
	routertest.MustDrift(t, r)
}

func TestOSMHostsSetRootService(t *testing.T) {
	s := routertest.OSMSpec
	s.Hosts = []string{"podinfo-root"}
	c := routertest.FakeClients(t, nil)
	r, _ := New("osm", c, s)
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo").Object["spec"].(map[string]any)["service"]; got != "podinfo-root" {
		t.Fatalf("spec.service %v", got)
	}
}

func TestOSMSetRoutesAndReconcileKeepsWeights(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("osm", c, routertest.OSMSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 60, Canary: 40}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 60, Canary: 40})
	if err := r.SetRoutes(ctx, router.Weights{Primary: 0, Canary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 0, Canary: 100})
	ts := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")
	if got, want := routertest.SpecJSON(t, ts), `{"backends":[{"service":"podinfo-canary","weight":100},{"service":"podinfo-primary","weight":0}],"service":"podinfo"}`; got != want {
		t.Fatalf("spec %s", got)
	}

	// Someone edits the root service: drift, and Reconcile repairs it without touching weights.
	ts.Object["spec"].(map[string]any)["service"] = "other"
	routertest.Update(t, c, router.TrafficSplitResource, ts)
	routertest.MustDrift(t, r, "TrafficSplit test/podinfo: spec.service differs from the generated one")
	// The next apply builds its router afresh (a run's router holds what it read last).
	r, _ = New("osm", c, routertest.OSMSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	routertest.MustWeights(t, r, router.Weights{Primary: 0, Canary: 100})
}

func TestOSMErrors(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("osm", c, routertest.OSMSpec)
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "TrafficSplit test/podinfo not found")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100}), "TrafficSplit test/podinfo not found")
	routertest.MustDrift(t, r, "TrafficSplit test/podinfo is missing")

	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 50, Canary: 40}), "sum to 100")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 110, Canary: -10}), "0..100")

	ts := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")
	for _, b := range ts.Object["spec"].(map[string]any)["backends"].([]any) {
		b.(map[string]any)["weight"] = int64(0)
	}
	routertest.Update(t, c, router.TrafficSplitResource, ts)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, "both 0")
}

func TestOSMFinalize(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("osm", c, routertest.OSMSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, router.TrafficSplitResource, "test", "podinfo") {
		t.Fatal("TrafficSplit still exists")
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
}

func TestOSMRefusesForeignObject(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{`
apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata: {name: podinfo, namespace: test}
spec:
  service: podinfo
  backends: [{service: podinfo, weight: 100}]
`})
	r, _ := New("osm", c, routertest.OSMSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !routertest.Exists(t, c, router.TrafficSplitResource, "test", "podinfo") {
		t.Fatal("Finalize deleted an object it does not own")
	}
}
