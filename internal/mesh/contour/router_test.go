package contour

import (
	"context"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

func service(name, weight string) string {
	return `{"name":"` + name + `","port":9898,"requestHeadersPolicy":{"set":[{"name":"l5d-dst-override","value":"` + name +
		`.test.svc.cluster.local:9898"}]},"weight":` + weight + `}`
}

func TestContourReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, err := New("contour", c, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	hp := routertest.Get(t, c, HTTPProxyResource, "test", "podinfo")
	want := `{"routes":[{"conditions":[{"prefix":"/"}],"services":[` + service("podinfo-primary", "100") + `,` + service("podinfo-canary", "0") + `]}]}`
	if got := routertest.SpecJSON(t, hp); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	if l := hp.GetLabels(); l[router.LabelRelease] != "podinfo-release" || hp.GetAPIVersion() != "projectcontour.io/v1" {
		t.Fatalf("labels %v, apiVersion %s", l, hp.GetAPIVersion())
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)

	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	r, _ = New("contour", c, spec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	routertest.MustDrift(t, r)
}

// A/B testing: one route per match entry ahead of the split, all to the canary; the split
// route stays as it was, and the next unmatched split removes the A/B routes.
func TestContourMatched(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	s := spec
	s.Match = []router.Match{
		{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}},
		{Headers: map[string]router.StringMatch{"user-agent": {Prefix: "Mozilla/5"}}, QueryParams: map[string]router.StringMatch{"beta": {Suffix: "on"}}},
	}
	r, _ := New("contour", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100, Matched: true}); err != nil {
		t.Fatal(err)
	}
	ab := `"services":[` + service("podinfo-primary", "0") + `,` + service("podinfo-canary", "100") + `]`
	want := `{"routes":[` +
		`{"conditions":[{"prefix":"/"},{"header":{"exact":"insider","name":"x-canary"}}],` + ab + `},` +
		`{"conditions":[{"prefix":"/"},{"header":{"name":"user-agent","regex":"Mozilla/5.*"}},{"queryParameter":{"name":"beta","suffix":"on"}}],` + ab + `},` +
		`{"conditions":[{"prefix":"/"}],"services":[` + service("podinfo-primary", "100") + `,` + service("podinfo-canary", "0") + `]}]}`
	if got := routertest.SpecJSON(t, routertest.Get(t, c, HTTPProxyResource, "test", "podinfo")); got != want {
		t.Fatalf("spec %s\nwant %s", got, want)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Matched: true})
	routertest.MustDrift(t, r)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100, Mirrored: true}), "mirroring (analysis.mirror) is not available with mesh_provider contour")
}

func TestContourErrorsAndFinalize(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("contour", c, spec)
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "HTTPProxy test/podinfo not found")
	routertest.MustDrift(t, r, "HTTPProxy test/podinfo is missing")
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	hp := routertest.Get(t, c, HTTPProxyResource, "test", "podinfo")
	hp.Object["spec"] = map[string]any{"routes": []any{map[string]any{"services": []any{map[string]any{"name": "podinfo", "port": int64(9898)}}}}}
	routertest.Update(t, c, HTTPProxyResource, hp)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, "must hold services podinfo-primary and podinfo-canary with integer weights")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, HTTPProxyResource, "test", "podinfo") {
		t.Fatal("HTTPProxy still exists")
	}
}

func TestContourRefusesForeignObject(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{`
apiVersion: projectcontour.io/v1
kind: HTTPProxy
metadata: {name: podinfo, namespace: test}
spec:
  routes: [{services: [{name: podinfo, port: 9898}]}]
`})
	r, _ := New("contour", c, spec)
	routertest.WantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !routertest.Exists(t, c, HTTPProxyResource, "test", "podinfo") {
		t.Fatal("Finalize deleted an object it does not own")
	}
}
