package skipper_test

import (
	"context"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/skipper"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// spec is a skipper release of podinfo whose ingress_ref is the user's Ingress podinfo.
var spec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	Options: skipper.Options{IngressRef: &router.Ref{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "podinfo"}}}

func newRouter(c router.Clients, s router.Spec) router.Router {
	return skipper.Driver{}.NewRouter(c, s)
}

// The generated Ingress is the user's with the apex path sent to the primary and a copy of it
// to the canary appended, its labels and annotations but kubectl's, and the split in
// backend-weights with Weight(100) first in the predicate (False() at canary weight 0).
func TestSkipperReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.SkipperUserIngress})
	userBefore := routertest.MustJSON(t, routertest.Get(t, c, skipper.IngressResource, "test", "podinfo").Object)
	r := newRouter(c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ing := routertest.Get(t, c, skipper.IngressResource, "test", "podinfo-canary")
	backend := func(name string) string {
		return `{"backend":{"service":{"name":"` + name + `","port":{"number":80}}},"path":"/","pathType":"Prefix"}`
	}
	want := `{"rules":[{"host":"app.example.com","http":{"paths":[` + backend("podinfo-primary") + `,` +
		`{"backend":{"service":{"name":"other","port":{"number":80}}},"path":"/other","pathType":"Prefix"},` + backend("podinfo-canary") + `]}}]}`
	if got := routertest.SpecJSON(t, ing); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	a := ing.GetAnnotations()
	if a[skipper.AnnotationBackendWeights] != `{"podinfo-canary":0,"podinfo-primary":100}` ||
		a[skipper.AnnotationPredicate] != `False() && Method("GET")` || a["kubernetes.io/ingress.class"] != "skipper" {
		t.Fatalf("annotations %v", a)
	}
	if _, ok := a["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Fatal("kubectl's annotation was copied")
	}
	if l := ing.GetLabels(); l["team"] != "web" || l[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", l)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)

	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	a = routertest.Get(t, c, skipper.IngressResource, "test", "podinfo-canary").GetAnnotations()
	if a[skipper.AnnotationBackendWeights] != `{"podinfo-canary":30,"podinfo-primary":70}` || a[skipper.AnnotationPredicate] != `Weight(100) && Method("GET")` {
		t.Fatalf("annotations after 70/30: %v", a)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	// A new router (the next apply) reconciles without touching the split.
	r = newRouter(c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	if p := routertest.Get(t, c, skipper.IngressResource, "test", "podinfo-canary").GetAnnotations()[skipper.AnnotationPredicate]; p != `Weight(100) && Method("GET")` {
		t.Fatalf("predicate after Reconcile at 70/30: %s", p)
	}
	routertest.MustDrift(t, r)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	if p := routertest.Get(t, c, skipper.IngressResource, "test", "podinfo-canary").GetAnnotations()[skipper.AnnotationPredicate]; p != `False() && Method("GET")` {
		t.Fatalf("predicate at 100/0: %s", p)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100, Matched: true}), "A/B testing (analysis.match) is not available with mesh_provider skipper")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100, Mirrored: true}), "mirroring (analysis.mirror) is not available with mesh_provider skipper")

	// The user's Ingress is never written.
	if now := routertest.MustJSON(t, routertest.Get(t, c, skipper.IngressResource, "test", "podinfo").Object); now != userBefore {
		t.Fatalf("the user's Ingress changed:\n%s\nwas\n%s", now, userBefore)
	}
}

// Drift names a generated Ingress whose rules or copied annotations no longer match the user's.
func TestSkipperDrift(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.SkipperUserIngress})
	r := newRouter(c, spec)
	routertest.MustDrift(t, r, "Ingress test/podinfo-canary is missing")
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	user := routertest.Get(t, c, skipper.IngressResource, "test", "podinfo")
	user.SetAnnotations(map[string]string{"kubernetes.io/ingress.class": "skipper", skipper.AnnotationPredicate: `Method("POST")`})
	routertest.Update(t, c, skipper.IngressResource, user)
	routertest.MustDrift(t, r, "Ingress test/podinfo-canary: annotation zalando.org/skipper-predicate differs from the one generated from ingress_ref test/podinfo")
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	user = routertest.Get(t, c, skipper.IngressResource, "test", "podinfo")
	user.Object["spec"] = map[string]any{"rules": []any{map[string]any{"http": map[string]any{"paths": []any{map[string]any{
		"path": "/v2", "pathType": "Prefix", "backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(80)}}},
	}}}}}}
	routertest.Update(t, c, skipper.IngressResource, user)
	routertest.MustDrift(t, r, "Ingress test/podinfo-canary: spec.rules differs from the copy of ingress_ref test/podinfo")
}

func TestSkipperErrorsAndFinalize(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r := newRouter(c, spec)
	routertest.WantErr(t, r.Reconcile(ctx), "ingress_ref: Ingress test/podinfo not found")
	noRef := spec
	noRef.Options = nil
	routertest.WantErr(t, newRouter(c, noRef).Reconcile(ctx), "ingress_ref is required for mesh_provider skipper")

	c = routertest.FakeClients(t, []string{strings.ReplaceAll(routertest.SkipperUserIngress, "name: podinfo, port", "name: web, port")})
	routertest.WantErr(t, newRouter(c, spec).Reconcile(ctx), "ingress_ref: Ingress test/podinfo has no http path whose backend is Service podinfo")

	c = routertest.FakeClients(t, []string{routertest.SkipperUserIngress})
	r = newRouter(c, spec)
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "Ingress test/podinfo-canary not found")
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	ing := routertest.Get(t, c, skipper.IngressResource, "test", "podinfo-canary")
	a := ing.GetAnnotations()
	a[skipper.AnnotationBackendWeights] = `{"podinfo-primary":100}`
	ing.SetAnnotations(a)
	routertest.Update(t, c, skipper.IngressResource, ing)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, "has no whole weight 0..100 for podinfo-canary")
	// Reconcile repairs unreadable weights to the safe split.
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, skipper.IngressResource, "test", "podinfo-canary") {
		t.Fatal("the generated Ingress still exists")
	}
	if !routertest.Exists(t, c, skipper.IngressResource, "test", "podinfo") {
		t.Fatal("Finalize deleted the user's Ingress")
	}
}

func TestSkipperRefusesForeignObject(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.SkipperUserIngress, `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: podinfo-canary, namespace: test}
spec:
  rules: [{http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: podinfo, port: {number: 80}}}}]}}]
`})
	r := newRouter(c, spec)
	routertest.WantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !routertest.Exists(t, c, skipper.IngressResource, "test", "podinfo-canary") {
		t.Fatal("Finalize deleted an object it does not own")
	}
}

// The built-in queries render to Flagger's Skipper observer queries (its own test's
// expectations), the namespace, Ingress and Service encoded as Skipper's route ids are.
func TestSkipperQueriesAreFlaggers(t *testing.T) {
	vars := metrics.Vars{Name: "podinfo", Namespace: "skipper", Target: "backend", Service: "backend", Ingress: "target-is-not-it", Interval: "1m"}
	route := `kube(ew)?_skipper__skipper_ingress_canary__.*__backend_canary(_[0-9]+)?`
	want := map[string]string{
		"request-success-rate": `sum(rate(skipper_response_duration_seconds_bucket{route=~"` + route + `",code!~"5..",le="+Inf"}[1m])) / ` +
			`sum(rate(skipper_response_duration_seconds_bucket{route=~"` + route + `",le="+Inf"}[1m])) * 100`,
		"request-duration": `sum(rate(skipper_serve_route_duration_seconds_sum{route=~"` + route + `"}[1m])) / ` +
			`sum(rate(skipper_serve_route_duration_seconds_count{route=~"` + route + `"}[1m])) * 1000`,
	}
	options := skipper.Options{IngressRef: &router.Ref{Name: "skipper-ingress"}}
	for name, q := range options.Queries() {
		got, err := metrics.Render(q, vars)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[name] {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want[name])
		}
	}
	// Without options, {{ ingress }} names the Ingress; hyphens and dots become "_".
	vars.Ingress, vars.Namespace, vars.Service = "skipper-ingress", "my-team.dev", "back-end"
	got, err := metrics.Render(skipper.Driver{}.Describe().Queries["request-duration"], vars)
	if err != nil {
		t.Fatal(err)
	}
	if wantRoute := `route=~"kube(ew)?_my_team_dev__skipper_ingress_canary__.*__back_end_canary(_[0-9]+)?"`; !strings.Contains(got, wantRoute) {
		t.Fatalf("%s\nholds no %s", got, wantRoute)
	}
}
