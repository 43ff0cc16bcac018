package conformance

import (
	"context"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

var gatewaySpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	Hosts: []string{"app.example.com"},
	Options: gatewayapi.Options{GatewayRefs: []router.ParentRef{
		{Group: router.GatewayGroup, Kind: router.GatewayKind, Name: "public", Namespace: "gateways", SectionName: "http"},
		{Group: router.GatewayGroup, Kind: router.GatewayKind, Name: "internal"},
	}}}

var linkerdSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 9898,
	Hosts: []string{"ignored.example.com"}}

const userGateway = `
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: public, namespace: gateways}
spec:
  gatewayClassName: eg
  listeners: [{name: http, protocol: HTTP, port: 80}]
`

func TestGatewayAPIReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, err := New("gatewayapi", c, gatewaySpec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	route := routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo")
	want := `{
	  "hostnames": ["app.example.com"],
	  "parentRefs": [
	    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "namespace": "gateways", "sectionName": "http"},
	    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "internal"}
	  ],
	  "rules": [{
	    "backendRefs": [
	      {"group": "", "kind": "Service", "name": "podinfo-primary", "port": 80, "weight": 100},
	      {"group": "", "kind": "Service", "name": "podinfo-canary", "port": 80, "weight": 0}
	    ],
	    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}]
	  }]
	}`
	if got := routertest.SpecJSON(t, route); got != routertest.CompactJSON(t, want) {
		t.Fatalf("spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	if l := route.GetLabels(); l[router.LabelManagedBy] != router.ManagedByValue || l[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", l)
	}
	if route.GetAPIVersion() != "gateway.networking.k8s.io/v1" || route.GetKind() != "HTTPRoute" {
		t.Fatalf("apiVersion %s kind %s", route.GetAPIVersion(), route.GetKind())
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)
}

func TestLinkerdReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("linkerd", c, linkerdSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	want := `{
	  "parentRefs": [{"group": "", "kind": "Service", "name": "podinfo", "port": 9898}],
	  "rules": [{
	    "backendRefs": [
	      {"group": "", "kind": "Service", "name": "podinfo-primary", "port": 9898, "weight": 100},
	      {"group": "", "kind": "Service", "name": "podinfo-canary", "port": 9898, "weight": 0}
	    ],
	    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}]
	  }]
	}`
	if got := routertest.SpecJSON(t, routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo")); got != routertest.CompactJSON(t, want) {
		t.Fatalf("spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}
}

// Both routers share the HTTPRoute code; each lifecycle test runs on both.
func httpRouteRouters(t *testing.T) map[string]router.Spec {
	t.Helper()
	return map[string]router.Spec{"gatewayapi": gatewaySpec, "linkerd": linkerdSpec}
}

func TestHTTPRouteSetRoutesAndReconcileKeepsWeights(t *testing.T) {
	for provider, routerSpec := range httpRouteRouters(t) {
		t.Run(provider, func(t *testing.T) {
			ctx := context.Background()
			c := routertest.FakeClients(t, nil)
			r, _ := New(provider, c, routerSpec)
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			for _, w := range []router.Weights{{Primary: 90, Canary: 10}, {Primary: 40, Canary: 60}, {Primary: 0, Canary: 100}} {
				if err := r.SetRoutes(ctx, w); err != nil {
					t.Fatal(err)
				}
				routertest.MustWeights(t, r, w)
			}
			// Someone drops the match and renames a parent: drift, repaired without touching weights.
			route := routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo")
			spec := route.Object["spec"].(map[string]any)
			delete(spec["rules"].([]any)[0].(map[string]any), "matches")
			spec["parentRefs"].([]any)[0].(map[string]any)["name"] = "other"
			routertest.Update(t, c, router.HTTPRouteResource, route)
			routertest.MustDrift(t, r,
				"HTTPRoute test/podinfo: spec.parentRefs differs from the generated one",
				"HTTPRoute test/podinfo: spec.rules differs from the generated one")
			// The next apply builds its router afresh (a run's router holds what it read last).
			r, _ = New(provider, c, routerSpec)
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustDrift(t, r)
			routertest.MustWeights(t, r, router.Weights{Primary: 0, Canary: 100})
		})
	}
}

func TestHTTPRouteErrors(t *testing.T) {
	for provider, spec := range httpRouteRouters(t) {
		t.Run(provider, func(t *testing.T) {
			ctx := context.Background()
			c := routertest.FakeClients(t, nil)
			r, _ := New(provider, c, spec)
			_, err := r.GetRoutes(ctx)
			routertest.WantErr(t, err, "HTTPRoute test/podinfo not found")
			routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100}), "HTTPRoute test/podinfo not found")
			routertest.MustDrift(t, r, "HTTPRoute test/podinfo is missing")
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")
			routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 50, Canary: 40}), "sum to 100")

			// A backendRef without weight (Gateway API would weigh it 1) is not a split of ours.
			route := routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo")
			refs := route.Object["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)["backendRefs"].([]any)
			delete(refs[1].(map[string]any), "weight")
			routertest.Update(t, c, router.HTTPRouteResource, route)
			_, err = r.GetRoutes(ctx)
			routertest.WantErr(t, err, "HTTPRoute test/podinfo: no rule matching on the path alone has backendRefs podinfo-primary and podinfo-canary with integer weights")
			// Reconcile falls back to the safe split.
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustWeights(t, r, router.Weights{Primary: 100})
		})
	}
}

// Linkerd's route (GAMMA) splits requests already sent to the apex, and a release that owns its
// workload removes it: both delete the HTTPRoute.
func TestHTTPRouteFinalizeAndForeignObject(t *testing.T) {
	owning := gatewaySpec
	owning.OwnsWorkload = true
	for provider, spec := range map[string]router.Spec{"gatewayapi": owning, "linkerd": linkerdSpec} {
		t.Run(provider, func(t *testing.T) {
			ctx := context.Background()
			c := routertest.FakeClients(t, nil)
			r, _ := New(provider, c, spec)
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			if routertest.Exists(t, c, router.HTTPRouteResource, "test", "podinfo") {
				t.Fatal("HTTPRoute still exists")
			}
			if err := r.Finalize(ctx); err != nil {
				t.Fatalf("second Finalize: %v", err)
			}

			c = routertest.FakeClients(t, []string{`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: podinfo, namespace: test, labels: {canary-release.dev/release: other}}
spec:
  rules: [{backendRefs: [{name: podinfo, port: 80}]}]
`})
			r, _ = New(provider, c, spec)
			routertest.WantErr(t, r.Reconcile(ctx), "HTTPRoute test/podinfo already exists and is not managed by canary_release")
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			if !routertest.Exists(t, c, router.HTTPRouteResource, "test", "podinfo") {
				t.Fatal("Finalize deleted an object it does not own")
			}
		})
	}
}

func TestGatewayAPIRequiresGatewayRefs(t *testing.T) {
	ctx := context.Background()
	s := gatewaySpec
	s.Options = nil
	c := routertest.FakeClients(t, nil)
	r, _ := New("gatewayapi", c, s)
	want := "service.gateway_refs is required for mesh_provider gatewayapi"
	routertest.WantErr(t, r.Reconcile(ctx), want)
	routertest.MustDrift(t, r, "service.gateway_refs is required for mesh_provider gatewayapi: it names the Gateways the HTTPRoute podinfo attaches to")
	if routertest.Exists(t, c, router.HTTPRouteResource, "test", "podinfo") {
		t.Fatal("an HTTPRoute without parents was written")
	}
}

func TestGatewayAPIWarnsOfMissingGateways(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	// Added by resource: the fake client would guess "gatewaies" from the kind.
	if err := routertest.FakeDynamic(c).Tracker().Create(router.GatewayResource, routertest.ParseYAML(t, userGateway), "gateways"); err != nil {
		t.Fatal(err)
	}
	r, _ := New("gatewayapi", c, gatewaySpec)
	got := r.Warnings(ctx)
	if len(got) != 1 || got[0] != "service.gateway_refs: Gateway test/internal does not exist; the HTTPRoute test/podinfo carries no traffic until it does" {
		t.Fatalf("warnings %q", got)
	}
	// A parent of another kind is not looked up.
	s := gatewaySpec
	s.Options = gatewayapi.Options{GatewayRefs: []router.ParentRef{{Group: "example.com", Kind: "Mesh", Name: "m"}}}
	r, _ = New("gatewayapi", routertest.FakeClients(t, nil), s)
	if got := r.Warnings(ctx); len(got) != 0 {
		t.Fatalf("warnings %q", got)
	}
}

// A hand-written route named after the apex is taken over (rewritten as the release's, as
// Flagger overwrites it) only when the release's route serves all it serves and it sends
// nothing elsewhere; another release's, another tool's, or one that would lose a hostname,
// a parent or a backend is refused, and the refusal says what would be lost.
func TestHTTPRouteTakeOver(t *testing.T) {
	ctx := context.Background()
	route := func(meta, spec string) string {
		return "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: podinfo, namespace: test" + meta + "}\nspec: " + spec + "\n"
	}
	const parents = `parentRefs: [{name: public, namespace: gateways, sectionName: http}]`
	for _, tc := range []struct {
		name, obj, refusal string
	}{
		{"hand-written to the apex", route("", `{`+parents+`, hostnames: [app.example.com], rules: [{backendRefs: [{name: podinfo, port: 80}]}]}`), ""},
		{"another hostname", route("", `{`+parents+`, hostnames: [app.example.com, other.example.com], rules: [{backendRefs: [{name: podinfo, port: 80}]}]}`),
			"would no longer serve what it serves now: hostnames other.example.com"},
		{"another gateway", route("", `{parentRefs: [{name: other}], rules: [{backendRefs: [{name: podinfo, port: 80}]}]}`),
			"parentRefs gateway.networking.k8s.io/Gateway test/other"},
		{"another backend", route("", `{`+parents+`, rules: [{backendRefs: [{name: podinfo, port: 80}, {name: legacy, port: 80}]}]}`),
			"backends legacy"},
		{"another tool's", route(", labels: {app.kubernetes.io/managed-by: Helm}", `{`+parents+`, rules: [{backendRefs: [{name: podinfo, port: 80}]}]}`),
			"already exists and is not managed by canary_release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := routertest.FakeClients(t, []string{tc.obj})
			r, err := New("gatewayapi", c, gatewaySpec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.refusal != "" {
				routertest.WantErr(t, r.Reconcile(ctx), tc.refusal)
				drift, err := r.Drift(ctx)
				if err != nil || len(drift) != 1 || !strings.Contains(drift[0], tc.refusal) {
					t.Fatalf("drift %v, %v; want the refusal", drift, err)
				}
				return
			}
			if drift, err := r.Drift(ctx); err != nil || len(drift) != 1 || !strings.Contains(drift[0], "apply takes it over") {
				t.Fatalf("drift %v, %v; want the takeover announced", drift, err)
			}
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if l := routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo").GetLabels(); l[router.LabelRelease] != gatewaySpec.Name {
				t.Fatalf("labels %v after the takeover", l)
			}
			routertest.MustWeights(t, r, router.Weights{Primary: 100})
			routertest.MustDrift(t, r)
		})
	}
}
