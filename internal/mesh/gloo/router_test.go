package gloo

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

const delegatingVS = `
apiVersion: gateway.solo.io/v1
kind: VirtualService
metadata: {name: podinfo, namespace: gloo-system}
spec:
  virtualHost:
    domains: [app.example.com]
    routes:
    - matchers: [{prefix: /}]
      delegateAction:
        ref: {name: podinfo, namespace: test}
`

func TestGlooRouteTableShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil, routertest.GlooServices()...)
	r, _ := New("gloo", c, routertest.GlooSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"test-podinfo-primaryupstream-80": `{"kube":{"serviceName":"podinfo-primary","serviceNamespace":"test","servicePort":80,"selector":{"app":"podinfo-primary"}}}`,
		"test-podinfo-canaryupstream-80":  `{"kube":{"serviceName":"podinfo-canary","serviceNamespace":"test","servicePort":80,"selector":{"app":"podinfo"}}}`,
	} {
		up := routertest.Get(t, c, router.UpstreamResource, "test", name)
		if got := routertest.SpecJSON(t, up); got != routertest.CompactJSON(t, want) {
			t.Errorf("Upstream %s spec %s\nwant %s", name, got, routertest.CompactJSON(t, want))
		}
		if up.GetLabels()[router.LabelRelease] != "podinfo-release" {
			t.Errorf("Upstream %s labels %v", name, up.GetLabels())
		}
	}
	rt := routertest.Get(t, c, router.RouteTableResource, "test", "podinfo")
	want := `{"routes":[{"inheritablePathMatchers":true,"routeAction":{"multi":{"destinations":[
		{"destination":{"upstream":{"name":"test-podinfo-primaryupstream-80","namespace":"test"}},"weight":100},
		{"destination":{"upstream":{"name":"test-podinfo-canaryupstream-80","namespace":"test"}},"weight":0}]}}}]}`
	if got := routertest.SpecJSON(t, rt); got != routertest.CompactJSON(t, want) {
		t.Fatalf("RouteTable spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	if routertest.Exists(t, c, router.UpstreamGroupResource, "test", "podinfo") {
		t.Fatal("route_table mode created an UpstreamGroup")
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)

	if err := r.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")

	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	mustBeHandedOver(t, c, router.RouteTableResource, `{"routes":[{"inheritablePathMatchers":true,
		"routeAction":{"single":{"upstream":{"name":"test-podinfo-80","namespace":"test"}}}}]}`)
	routertest.MustDrift(t, r,
		"Upstream test/test-podinfo-primaryupstream-80 is missing",
		"Upstream test/test-podinfo-canaryupstream-80 is missing",
		"RouteTable test/podinfo was left behind by a destroyed canary_release (annotation canary-release.dev/left-behind); apply takes it over")
}

func TestGlooUpstreamGroupMode(t *testing.T) {
	ctx := context.Background()
	c, r := glooAt(t, ModeUpstreamGroup, router.Weights{Primary: 90, Canary: 10}, nil)
	ug := routertest.Get(t, c, router.UpstreamGroupResource, "test", "podinfo")
	want := `{"destinations":[
		{"destination":{"upstream":{"name":"test-podinfo-primaryupstream-80","namespace":"test"}},"weight":90},
		{"destination":{"upstream":{"name":"test-podinfo-canaryupstream-80","namespace":"test"}},"weight":10}]}`
	if got := routertest.SpecJSON(t, ug); got != routertest.CompactJSON(t, want) {
		t.Fatalf("UpstreamGroup spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 90, Canary: 10})
	if routertest.Exists(t, c, router.RouteTableResource, "test", "podinfo") {
		t.Fatal("upstream_group mode created a RouteTable")
	}

	// Switching back to route_table removes the UpstreamGroup.
	rt, _ := New("gloo", c, routertest.GlooSpec)
	if err := rt.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, router.UpstreamGroupResource, "test", "podinfo") {
		t.Fatal("the UpstreamGroup of the previous mode is left behind")
	}
	if err := rt.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if routertest.Exists(t, c, router.UpstreamGroupResource, "test", "podinfo") {
		t.Fatal("Finalize created an UpstreamGroup")
	}
}

func TestGlooUpstreamGroupFinalize(t *testing.T) {
	c, r := glooAt(t, ModeUpstreamGroup, router.Weights{Primary: 30, Canary: 70}, nil)
	if err := r.Finalize(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustBeHandedOver(t, c, router.UpstreamGroupResource,
		`{"destinations":[{"destination":{"upstream":{"name":"test-podinfo-80","namespace":"test"}},"weight":100}]}`)
	if routertest.Exists(t, c, router.RouteTableResource, "test", "podinfo") {
		t.Fatal("Finalize created a RouteTable")
	}
}

func TestGlooUnknownMode(t *testing.T) {
	s := routertest.GlooSpec
	s.Options = Options{Mode: "virtual_service"}
	r, _ := New("gloo", routertest.FakeClients(t, nil, routertest.GlooServices()...), s)
	routertest.WantErr(t, r.Reconcile(context.Background()), `unknown gloo.mode "virtual_service"`)
	routertest.WantErr(t, r.SetRoutes(context.Background(), router.Weights{Primary: 100}), `unknown gloo.mode`)
}

func TestGlooUpstreamRef(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.GlooConfigUpstream}, routertest.GlooServices()...)
	s := routertest.GlooSpec
	s.Options = Options{UpstreamRef: &router.Ref{Name: "config", Namespace: "gloo-system"}}
	r, _ := New("gloo", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	canary := routertest.Get(t, c, router.UpstreamResource, "test", "test-podinfo-canaryupstream-80")
	if v, _, _ := unstructured.NestedInt64(canary.Object, "spec", "connectionConfig", "maxRequestsPerConnection"); v != 51 {
		t.Fatalf("connectionConfig.maxRequestsPerConnection %d, want 51", v)
	}
	if v, _, _ := unstructured.NestedBool(canary.Object, "spec", "useHttp2"); !v {
		t.Fatal("useHttp2 not copied")
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(canary.Object, "spec", "static"); found {
		t.Fatal("spec.static copied: only the listed settings may be")
	}
	if canary.GetLabels()["tier"] != "edge" || canary.GetLabels()[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", canary.GetLabels())
	}
	routertest.MustDrift(t, r)

	// The config Upstream changes: loadBalancerConfig is re-synced, the rest is not.
	ref := routertest.Get(t, c, router.UpstreamResource, "gloo-system", "config")
	_ = unstructured.SetNestedField(ref.Object, int64(20), "spec", "loadBalancerConfig", "roundRobin", "slowStartConfig", "minWeightPercent")
	_ = unstructured.SetNestedField(ref.Object, int64(99), "spec", "connectionConfig", "maxRequestsPerConnection")
	routertest.Update(t, c, router.UpstreamResource, ref)
	routertest.MustDrift(t, r,
		"Upstream test/test-podinfo-primaryupstream-80: loadBalancerConfig differs from upstream_ref: Upstream gloo-system/config",
		"Upstream test/test-podinfo-canaryupstream-80: loadBalancerConfig differs from upstream_ref: Upstream gloo-system/config")
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	for _, name := range []string{"test-podinfo-primaryupstream-80", "test-podinfo-canaryupstream-80"} {
		up := routertest.Get(t, c, router.UpstreamResource, "test", name)
		if v, _, _ := unstructured.NestedInt64(up.Object, "spec", "loadBalancerConfig", "roundRobin", "slowStartConfig", "minWeightPercent"); v != 20 {
			t.Errorf("%s minWeightPercent %d, want 20", name, v)
		}
		if v, _, _ := unstructured.NestedInt64(up.Object, "spec", "connectionConfig", "maxRequestsPerConnection"); v != 51 {
			t.Errorf("%s maxRequestsPerConnection %d, want 51 (copied at creation only)", name, v)
		}
	}
}

func TestGlooUpstreamRefMissing(t *testing.T) {
	s := routertest.GlooSpec
	s.Options = Options{UpstreamRef: &router.Ref{Name: "missing", Namespace: "gloo-system"}}
	r, _ := New("gloo", routertest.FakeClients(t, nil, routertest.GlooServices()...), s)
	routertest.WantErr(t, r.Reconcile(context.Background()), "upstream_ref: Upstream gloo-system/missing not found")
}

func TestGlooNeedsServices(t *testing.T) {
	r, _ := New("gloo", routertest.FakeClients(t, nil), routertest.GlooSpec)
	routertest.WantErr(t, r.Reconcile(context.Background()), "the Service test/podinfo-primary was not found")
}

func TestGlooWarnings(t *testing.T) {
	ctx := context.Background()
	r, _ := New("gloo", routertest.FakeClients(t, nil, routertest.GlooServices()...), routertest.GlooSpec)
	w := r.Warnings(ctx)
	if len(w) != 1 || !strings.Contains(w[0], "no Gloo VirtualService delegates to RouteTable test/podinfo") {
		t.Fatalf("warnings %v", w)
	}

	r, _ = New("gloo", routertest.FakeClients(t, []string{delegatingVS}, routertest.GlooServices()...), routertest.GlooSpec)
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %v with a delegating VirtualService", w)
	}

	// The delegating VirtualService does not route to an UpstreamGroup.
	s := routertest.GlooSpec
	s.Options = Options{Mode: ModeUpstreamGroup}
	r, _ = New("gloo", routertest.FakeClients(t, []string{delegatingVS}, routertest.GlooServices()...), s)
	if w := r.Warnings(ctx); len(w) != 1 || !strings.Contains(w[0], "UpstreamGroup test/podinfo") {
		t.Fatalf("warnings %v", w)
	}
	ugVS := strings.Replace(delegatingVS, "delegateAction:\n        ref: {name: podinfo, namespace: test}",
		"routeAction:\n        upstreamGroup: {name: podinfo, namespace: test}", 1)
	r, _ = New("gloo", routertest.FakeClients(t, []string{ugVS}, routertest.GlooServices()...), s)
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %v with a VirtualService routing to the UpstreamGroup", w)
	}

	// A selector that picks the generated RouteTable by its labels counts too.
	selVS := strings.Replace(delegatingVS, "ref: {name: podinfo, namespace: test}",
		"selector: {namespaces: [test], labels: {canary-release.dev/release: podinfo-release}}", 1)
	r, _ = New("gloo", routertest.FakeClients(t, []string{selVS}, routertest.GlooServices()...), routertest.GlooSpec)
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %v with a selecting VirtualService", w)
	}

	// No VirtualService CRD (the list answers 404): no warning.
	noVS := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), routertest.ListKinds)
	noVS.PrependReactor("list", "virtualservices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "gateway.solo.io", Resource: "virtualservices"}, "")
	})
	r, _ = New("gloo", router.Clients{Dynamic: noVS}, routertest.GlooSpec)
	if w := r.Warnings(ctx); w != nil {
		t.Fatalf("warnings %v without the VirtualService CRD", w)
	}
}
