package traefik

import (
	"context"
	"fmt"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

const weighted100 = `{"weighted":{"services":[
  {"name":"podinfo-primary","namespace":"test","port":9898,"weight":100},
  {"name":"podinfo-canary","namespace":"test","port":9898,"weight":0}]}}`

func TestTraefikReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, err := New("traefik", c, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ts := routertest.Get(t, c, TraefikServiceResource, "test", "podinfo")
	if got, want := routertest.SpecJSON(t, ts), routertest.CompactJSON(t, weighted100); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	if ts.GetAPIVersion() != "traefik.io/v1alpha1" || ts.GetKind() != "TraefikService" {
		t.Fatalf("apiVersion %s kind %s", ts.GetAPIVersion(), ts.GetKind())
	}
	if l := ts.GetLabels(); l[router.LabelManagedBy] != router.ManagedByValue || l[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", l)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Canary: 0})
	routertest.MustDrift(t, r)
}

func TestTraefikSetRoutesAndReconcileKeepsWeights(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("traefik", c, spec)
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
	ts := routertest.Get(t, c, TraefikServiceResource, "test", "podinfo")
	want := `{"weighted":{"services":[{"name":"podinfo-primary","namespace":"test","port":9898,"weight":0},{"name":"podinfo-canary","namespace":"test","port":9898,"weight":100}]}}`
	if got := routertest.SpecJSON(t, ts); got != want {
		t.Fatalf("spec %s", got)
	}

	// Someone edits the port: drift, and a fresh router's Reconcile repairs it, keeping weights.
	services := ts.Object["spec"].(map[string]any)["weighted"].(map[string]any)["services"].([]any)
	services[0].(map[string]any)["port"] = int64(80)
	routertest.Update(t, c, TraefikServiceResource, ts)
	routertest.MustDrift(t, r, "TraefikService test/podinfo: spec.weighted differs from the generated one")
	r, _ = New("traefik", c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	routertest.MustWeights(t, r, router.Weights{Primary: 0, Canary: 100})
}

// Mirroring turns the object into a mirroring TraefikService (the user's IngressRoute still
// names it), and the next split turns it back.
func TestTraefikMirroring(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	s := spec
	s.MirrorWeight = 30
	r, _ := New("traefik", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100, Mirrored: true}); err != nil {
		t.Fatal(err)
	}
	want := `{"mirroring":{"mirrors":[{"name":"podinfo-canary","namespace":"test","percent":30,"port":9898}],"name":"podinfo-primary","namespace":"test","port":9898}}`
	if got := routertest.SpecJSON(t, routertest.Get(t, c, TraefikServiceResource, "test", "podinfo")); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Mirrored: true})
	routertest.MustDrift(t, r)
	// Reconcile keeps the mirror, as it keeps weights.
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Mirrored: true})
	if err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 90, Canary: 10})
	if got := routertest.SpecJSON(t, routertest.Get(t, c, TraefikServiceResource, "test", "podinfo")); got[:12] != `{"weighted":` {
		t.Fatalf("spec %s", got)
	}
}

func TestTraefikRefusesWhatItCannotDo(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	s := spec
	s.Match = []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	r, _ := New("traefik", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100, Matched: true}), "A/B testing (analysis.match) is not available with mesh_provider traefik")
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

func TestTraefikErrors(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("traefik", c, spec)
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "TraefikService test/podinfo not found")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100}), "TraefikService test/podinfo not found")
	routertest.MustDrift(t, r, "TraefikService test/podinfo is missing")

	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 50, Canary: 40}), "sum to 100")

	ts := routertest.Get(t, c, TraefikServiceResource, "test", "podinfo")
	ts.Object["spec"] = map[string]any{"weighted": map[string]any{"services": []any{map[string]any{"name": "podinfo", "port": int64(9898)}}}}
	routertest.Update(t, c, TraefikServiceResource, ts)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, "spec.weighted.services must hold podinfo-primary and podinfo-canary with integer weights")
}

func TestTraefikFinalize(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("traefik", c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, TraefikServiceResource, "test", "podinfo") {
		t.Fatal("TraefikService still exists")
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
}

func TestTraefikRefusesForeignObject(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{`
apiVersion: traefik.io/v1alpha1
kind: TraefikService
metadata: {name: podinfo, namespace: test}
spec:
  weighted:
    services: [{name: podinfo, port: 9898}]
`})
	r, _ := New("traefik", c, spec)
	routertest.WantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !routertest.Exists(t, c, TraefikServiceResource, "test", "podinfo") {
		t.Fatal("Finalize deleted an object it does not own")
	}
}

// The plan warns while no IngressRoute of the namespace sends traffic to the TraefikService.
func TestTraefikWarnsWithoutIngressRoute(t *testing.T) {
	ctx := context.Background()
	user := `
apiVersion: traefik.io/v1alpha1
kind: IngressRoute
metadata: {name: podinfo, namespace: test}
spec:
  routes:
  - match: Host(` + "`app.example.com`" + `)
    services: [{name: %s, kind: %s, port: 9898}]
`
	r, _ := New("traefik", routertest.FakeClients(t, nil), spec)
	if w := r.Warnings(ctx); len(w) != 1 || w[0] != "no IngressRoute in namespace test names TraefikService podinfo (a route service with kind: TraefikService, name: podinfo): until one does, the canary's weight moves no user traffic" {
		t.Fatalf("warnings %q", w)
	}
	r, _ = New("traefik", routertest.FakeClients(t, []string{fmt.Sprintf(user, "podinfo", "Service")}), spec)
	if w := r.Warnings(ctx); len(w) != 1 {
		t.Fatalf("an IngressRoute to the apex Service itself: warnings %q", w)
	}
	r, _ = New("traefik", routertest.FakeClients(t, []string{fmt.Sprintf(user, "podinfo", "TraefikService")}), spec)
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
}
