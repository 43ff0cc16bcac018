package istio_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// With no Istio settings the objects are Flagger's defaults: the mesh gateway, the apex host
// and DestinationRules that only name their host.
func TestIstioReconcileShape(t *testing.T) {
	c, r := newIstioRouter(t, routertest.IstioSpec)
	vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	want := `{"gateways":["mesh"],"hosts":["podinfo"],"http":[{"route":[
	  {"destination":{"host":"podinfo-primary","port":{"number":9898}},"weight":100},
	  {"destination":{"host":"podinfo-canary","port":{"number":9898}},"weight":0}]}]}`
	if got := routertest.SpecJSON(t, vs); got != routertest.CompactJSON(t, want) {
		t.Fatalf("VirtualService spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	if vs.GetAPIVersion() != "networking.istio.io/v1beta1" {
		t.Fatalf("apiVersion %s", vs.GetAPIVersion())
	}
	for _, name := range []string{"podinfo-primary", "podinfo-canary"} {
		dr := routertest.Get(t, c, router.IstioDestinationRuleResource, "test", name)
		if got := routertest.SpecJSON(t, dr); got != `{"host":"`+name+`"}` {
			t.Fatalf("DestinationRule %s spec %s", name, got)
		}
		if l := dr.GetLabels(); l[router.LabelManagedBy] != router.ManagedByValue || l[router.LabelRelease] != "podinfo-release" {
			t.Fatalf("DestinationRule %s labels %v", name, l)
		}
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)
	if w := r.Warnings(context.Background()); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}
}

// Every setting lands where Flagger puts it: the route of the VirtualService, the traffic
// policy of both DestinationRules.
func TestIstioSettings(t *testing.T) {
	c, r := newIstioRouter(t, routertest.FullIstioSpec())
	vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	want := `{"gateways":["public-gateway.istio-system.svc.cluster.local","mesh"],"hosts":["app.example.com","podinfo"],
	  "http":[{
	    "corsPolicy":{"allowCredentials":true,"allowHeaders":["x-api-key"],"allowMethods":["GET","POST"],
	      "allowOrigins":[{"exact":"https://example.com"},{"prefix":"https://dev."}],"maxAge":"24h"},
	    "headers":{"request":{"add":{"x-some-header":"value"}},
	      "response":{"remove":["x-envoy-upstream-service-time"],"set":{"x-frame-options":"DENY"}}},
	    "retries":{"attempts":3,"perTryTimeout":"1s","retryOn":"gateway-error,connect-failure,refused-stream"},
	    "route":[
	      {"destination":{"host":"podinfo-primary","port":{"number":9898}},"weight":100},
	      {"destination":{"host":"podinfo-canary","port":{"number":9898}},"weight":0}],
	    "timeout":"30s"}]}`
	if got := routertest.SpecJSON(t, vs); got != routertest.CompactJSON(t, want) {
		t.Fatalf("VirtualService spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	for _, name := range []string{"podinfo-primary", "podinfo-canary"} {
		want := `{"host":"` + name + `","trafficPolicy":{"loadBalancer":{"simple":"LEAST_REQUEST"},"tls":{"mode":"ISTIO_MUTUAL"}}}`
		if got := routertest.SpecJSON(t, routertest.Get(t, c, router.IstioDestinationRuleResource, "test", name)); got != want {
			t.Fatalf("DestinationRule %s spec %s\nwant %s", name, got, want)
		}
	}
	routertest.MustDrift(t, r)
}

// The apex is not added twice, nor next to "*", which covers it.
func TestIstioHosts(t *testing.T) {
	for _, tc := range []struct {
		hosts []string
		want  string
	}{
		{nil, `["podinfo"]`},
		{[]string{"podinfo", "app.example.com"}, `["podinfo","app.example.com"]`},
		{[]string{"*"}, `["*"]`},
	} {
		s := routertest.IstioSpec
		s.Hosts = tc.hosts
		c, _ := newIstioRouter(t, s)
		vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
		if got := routertest.MustJSON(t, vs.Object["spec"].(map[string]any)["hosts"]); got != tc.want {
			t.Errorf("hosts %v: VirtualService hosts %s, want %s", tc.hosts, got, tc.want)
		}
	}
}

func TestIstioSetRoutesAndReconcileKeepsWeights(t *testing.T) {
	ctx := context.Background()
	c, r := newIstioRouter(t, routertest.FullIstioSpec())
	for _, w := range []router.Weights{{Primary: 90, Canary: 10}, {Primary: 0, Canary: 100}, {Primary: 45, Canary: 55}} {
		if err := r.SetRoutes(ctx, w); err != nil {
			t.Fatal(err)
		}
		routertest.MustWeights(t, r, w)
	}
	// The settings survive every weight change.
	if got := routertest.SpecJSON(t, routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")); !strings.Contains(got, `"timeout":"30s"`) ||
		!strings.Contains(got, `"attempts":3`) || !strings.Contains(got, `"public-gateway.istio-system.svc.cluster.local"`) {
		t.Fatalf("settings lost: %s", got)
	}

	// Someone edits the route and a DestinationRule: drift, and Reconcile repairs both
	// without touching the weights.
	vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	vs.Object["spec"].(map[string]any)["gateways"] = []any{"other"}
	routertest.Update(t, c, router.IstioVirtualServiceResource, vs)
	dr := routertest.Get(t, c, router.IstioDestinationRuleResource, "test", "podinfo-canary")
	delete(dr.Object["spec"].(map[string]any), "trafficPolicy")
	routertest.Update(t, c, router.IstioDestinationRuleResource, dr)
	routertest.MustDrift(t, r,
		"DestinationRule test/podinfo-canary: spec.trafficPolicy differs from the generated one",
		"VirtualService test/podinfo: spec.gateways differs from the generated one")
	// The next apply builds its router afresh (a run's router holds what it read last).
	r, _ = New("istio", c, routertest.FullIstioSpec())
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	routertest.MustWeights(t, r, router.Weights{Primary: 45, Canary: 55})
}

// Istio omits a weight of 0 on the wire; reading it back must not fail.
func TestIstioMissingWeightIsZero(t *testing.T) {
	c, r := newIstioRouter(t, routertest.IstioSpec)
	vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	route := vs.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)
	delete(route["route"].([]any)[1].(map[string]any), "weight")
	routertest.Update(t, c, router.IstioVirtualServiceResource, vs)
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

func TestIstioErrors(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, nil)
	r, _ := New("istio", c, routertest.IstioSpec)
	_, err := r.GetRoutes(ctx)
	routertest.WantErr(t, err, "VirtualService test/podinfo not found")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 100}), "VirtualService test/podinfo not found")
	routertest.MustDrift(t, r,
		"DestinationRule test/podinfo-primary is missing",
		"DestinationRule test/podinfo-canary is missing",
		"VirtualService test/podinfo is missing")

	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 50, Canary: 40}), "sum to 100")

	vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	vs.Object["spec"].(map[string]any)["http"] = []any{map[string]any{"route": []any{
		map[string]any{"destination": map[string]any{"host": "podinfo-primary"}, "weight": int64(100)},
	}}}
	routertest.Update(t, c, router.IstioVirtualServiceResource, vs)
	_, err = r.GetRoutes(ctx)
	routertest.WantErr(t, err, "VirtualService test/podinfo: the last http route has no destinations podinfo-primary and podinfo-canary")
	routertest.MustDrift(t, r, "VirtualService test/podinfo: the last http route has no destinations podinfo-primary and podinfo-canary")
	// Reconcile puts back the safe split.
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

// Without a gateway other than mesh, or with a workload that goes too, destroy deletes all
// three objects (a gateway's VirtualService is handed over: handover_test.go).
func TestIstioFinalize(t *testing.T) {
	meshOnly, owning := routertest.IstioSpec, routertest.FullIstioSpec()
	meshOnly.Options = istio.Options{Gateways: []string{istio.MeshGateway}}
	owning.OwnsWorkload = true
	for name, s := range map[string]router.Spec{"default": routertest.IstioSpec, "mesh only": meshOnly, "owns the workload": owning} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c, r := newIstioRouter(t, s)
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			for _, o := range []struct {
				resource string
				name     string
			}{{"vs", "podinfo"}, {"dr", "podinfo-primary"}, {"dr", "podinfo-canary"}} {
				gvr := router.IstioDestinationRuleResource
				if o.resource == "vs" {
					gvr = router.IstioVirtualServiceResource
				}
				if routertest.Exists(t, c, gvr, "test", o.name) {
					t.Fatalf("%s %s still exists", gvr.Resource, o.name)
				}
			}
			if err := r.Finalize(ctx); err != nil {
				t.Fatalf("second Finalize: %v", err)
			}
		})
	}
}

func TestIstioRefusesForeignObjects(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{`
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: podinfo, namespace: test}
spec:
  hosts: [podinfo]
  http: [{route: [{destination: {host: podinfo}}]}]
`, `
apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: podinfo-canary, namespace: test}
spec: {host: podinfo-canary}
`})
	r, _ := New("istio", c, routertest.IstioSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "DestinationRule test/podinfo-canary already exists and is not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if !routertest.Exists(t, c, router.IstioVirtualServiceResource, "test", "podinfo") || !routertest.Exists(t, c, router.IstioDestinationRuleResource, "test", "podinfo-canary") {
		t.Fatal("Finalize deleted an object it does not own")
	}
	// The primary's rule was created before the refusal; Finalize removed it again.
	if routertest.Exists(t, c, router.IstioDestinationRuleResource, "test", "podinfo-primary") {
		t.Fatal("Finalize left the generated DestinationRule")
	}
}

func TestIstioWarnsWithoutTheMeshGateway(t *testing.T) {
	s := routertest.IstioSpec
	s.Options = istio.Options{Gateways: []string{"istio-system/public-gateway"}}
	r, _ := New("istio", router.Clients{}, s)
	w := r.Warnings(context.Background())
	if len(w) != 1 || !strings.Contains(w[0], `does not include "mesh"`) {
		t.Fatalf("warnings %v", w)
	}
}

// service.delegation: the VirtualService is a delegate, with neither hosts nor gateways; a plan
// warns until a root VirtualService delegates to it; destroy hands it over to the apex Service
// instead of deleting it, so that the root's route keeps answering.
func TestIstioDelegate(t *testing.T) {
	ctx := context.Background()
	s := routertest.IstioSpec
	s.Options = istio.Options{Delegation: true}
	c, r := newIstioRouter(t, s)
	vs := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	want := `{"http":[{"route":[
	  {"destination":{"host":"podinfo-primary","port":{"number":9898}},"weight":100},
	  {"destination":{"host":"podinfo-canary","port":{"number":9898}},"weight":0}]}]}`
	if got := routertest.SpecJSON(t, vs); got != routertest.CompactJSON(t, want) {
		t.Fatalf("VirtualService spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	setAndDrift := func(w router.Weights) {
		t.Helper()
		if err := r.SetRoutes(ctx, w); err != nil {
			t.Fatal(err)
		}
		routertest.MustWeights(t, r, w)
		routertest.MustDrift(t, r)
	}
	setAndDrift(router.Weights{Primary: 70, Canary: 30})
	if w := r.Warnings(ctx); len(w) != 1 || !strings.Contains(w[0], "no VirtualService delegates to test/podinfo yet") {
		t.Fatalf("warnings %v, want the missing root", w)
	}
	root := routertest.ParseYAML(t, `
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata: {name: root, namespace: platform}
spec:
  hosts: [app.example.com]
  gateways: [istio-system/public-gateway]
  http:
  - delegate: {name: podinfo, namespace: test}`)
	if _, err := c.Dynamic.Resource(router.IstioVirtualServiceResource).Namespace("platform").Create(ctx, root, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %v with the root in place", w)
	}
	setAndDrift(router.Weights{Primary: 100})
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	left := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
	want = `{"http":[{"route":[{"destination":{"host":"podinfo","port":{"number":9898}},"weight":100}]}]}`
	if got := routertest.SpecJSON(t, left); got != routertest.CompactJSON(t, want) {
		t.Fatalf("delegate left behind %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
}

// A hand-written VirtualService <apex> is taken over when the release's serves its hosts and
// gateways and it leads nowhere else; otherwise the refusal says what would be lost.
func TestIstioTakeOver(t *testing.T) {
	ctx := context.Background()
	vs := func(spec string) string {
		return "apiVersion: networking.istio.io/v1beta1\nkind: VirtualService\nmetadata: {name: podinfo, namespace: test}\nspec: " + spec + "\n"
	}
	for _, tc := range []struct{ name, obj, refusal string }{
		{"to the apex", vs(`{hosts: [podinfo.test.svc.cluster.local], http: [{route: [{destination: {host: podinfo}}]}]}`), ""},
		{"another host and gateway", vs(`{hosts: [podinfo, app.example.com], gateways: [istio-system/public], http: [{route: [{destination: {host: podinfo}}]}]}`),
			"hosts app.example.com; gateways istio-system/public"},
		{"another destination", vs(`{hosts: [podinfo], http: [{match: [{uri: {prefix: /v1}}], route: [{destination: {host: legacy.test.svc.cluster.local}}]}, {route: [{destination: {host: podinfo}}]}]}`),
			"destinations legacy"},
		{"tcp routes", vs(`{hosts: [podinfo], tcp: [{route: [{destination: {host: podinfo}}]}]}`), "routes tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := routertest.FakeClients(t, []string{tc.obj})
			r, err := New("istio", c, routertest.IstioSpec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.refusal != "" {
				routertest.WantErr(t, r.Reconcile(ctx), tc.refusal)
				return
			}
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustWeights(t, r, router.Weights{Primary: 100})
			routertest.MustDrift(t, r)
		})
	}
}
