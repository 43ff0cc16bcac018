package conformance

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

const routeNote = "destroyed canary_release podinfo-release; this route now sends every request to Service podinfo and is yours: keep, edit or delete it"

// everyExtra is a split with every route and filter a release adds besides the weights.
var everyExtra = router.Weights{Primary: 60, Canary: 40, Matched: true, Mirrored: true, Session: "v2"}

// mustFinalizeOnce finalizes r, then checks that a second Finalize leaves the object alone.
func mustFinalizeOnce(t *testing.T, c router.Clients, r router.Router, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx := context.Background()
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	before := routertest.Get(t, c, gvr, "test", "podinfo").GetResourceVersion()
	if err := r.Finalize(ctx); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
	if routertest.Get(t, c, gvr, "test", "podinfo").GetResourceVersion() != before {
		t.Fatalf("the second Finalize rewrote the left-behind %s", gvr.Resource)
	}
}

// istioGatewaySpec is exposed through a gateway besides the mesh, narrowed by service.match,
// and can add every extra route.
func istioGatewaySpec() router.Spec {
	s := routertest.FullIstioSpec()
	full := s.Options.(istio.Options)
	full.Match = []istio.Match{{URI: &istio.StringMatch{Prefix: "/api"}}}
	s.Options = full
	s.Match = []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	s.SessionAffinity = &router.SessionAffinity{CookieName: "canary", PrimaryCookieName: "primary", MaxAge: 60}
	return s
}

// The gateway's hostname keeps answering: the VirtualService stays, with its hosts, gateways,
// service.match and settings, and sends everything to the apex Service.
func TestIstioFinalizeHandsAGatewayRouteOver(t *testing.T) {
	ctx := context.Background()
	c, r := newIstioRouter(t, istioGatewaySpec())
	if err := r.SetRoutes(ctx, everyExtra); err != nil {
		t.Fatal(err)
	}
	mustFinalizeOnce(t, c, r, router.IstioVirtualServiceResource)
	routertest.MustBeLeftBehind(t, c, router.IstioVirtualServiceResource, `{
	  "gateways":["public-gateway.istio-system.svc.cluster.local","mesh"],"hosts":["app.example.com","podinfo"],
	  "http":[{
	    "corsPolicy":{"allowCredentials":true,"allowHeaders":["x-api-key"],"allowMethods":["GET","POST"],
	      "allowOrigins":[{"exact":"https://example.com"},{"prefix":"https://dev."}],"maxAge":"24h"},
	    "headers":{"request":{"add":{"x-some-header":"value"}},
	      "response":{"remove":["x-envoy-upstream-service-time"],"set":{"x-frame-options":"DENY"}}},
	    "match":[{"uri":{"prefix":"/api"}}],
	    "retries":{"attempts":3,"perTryTimeout":"1s","retryOn":"gateway-error,connect-failure,refused-stream"},
	    "route":[{"destination":{"host":"podinfo","port":{"number":9898}},"weight":100}],
	    "timeout":"30s"}]}`, routeNote)
	for _, name := range []string{"podinfo-primary", "podinfo-canary"} {
		if routertest.Exists(t, c, router.IstioDestinationRuleResource, "test", name) {
			t.Errorf("DestinationRule %s still exists", name)
		}
	}

	// A new release of the same apex takes it over (a Terraform replacement).
	s := istioGatewaySpec()
	s.Name = "podinfo-release-2"
	next, _ := New("istio", c, s)
	routertest.MustDrift(t, next,
		"DestinationRule test/podinfo-primary is missing",
		"DestinationRule test/podinfo-canary is missing",
		"VirtualService test/podinfo was left behind by a destroyed canary_release (annotation canary-release.dev/left-behind); apply takes it over")
	if err := next.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, next)
	routertest.MustWeights(t, next, router.Weights{Primary: 100})
}

// The DestinationRules go only once the API server holds a VirtualService that no longer names
// their hosts.
func TestIstioFinalizeKeepsTheRulesUntilTheHandOver(t *testing.T) {
	for name, tc := range map[string]struct {
		fail func(router.Clients)
		want string
	}{
		"refused": {
			fail: func(c router.Clients) { routertest.FailFirst(c, "update", "virtualservices", errForbidden) },
			want: "handing VirtualService test/podinfo over to Service test/podinfo: updating VirtualService test/podinfo: ",
		},
		"not held": {
			fail: func(c router.Clients) {
				stale := routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")
				routertest.FakeDynamic(c).PrependReactor("update", "virtualservices", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, stale, nil
				})
			},
			want: "VirtualService test/podinfo: wrote a single destination podinfo but the API server holds destinations [podinfo-primary podinfo-canary]",
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, r := newIstioRouter(t, istioGatewaySpec())
			if err := r.SetRoutes(context.Background(), router.Weights{Primary: 80, Canary: 20}); err != nil {
				t.Fatal(err)
			}
			tc.fail(c)
			routertest.WantErr(t, r.Finalize(context.Background()), tc.want)
			for _, name := range []string{"podinfo-primary", "podinfo-canary"} {
				if !routertest.Exists(t, c, router.IstioDestinationRuleResource, "test", name) {
					t.Errorf("DestinationRule %s deleted while the VirtualService may still name it", name)
				}
			}
		})
	}
}

// The Gateways' hostnames keep answering: the HTTPRoute stays, with its parentRefs and
// hostnames, and sends everything to the apex Service.
func TestGatewayAPIFinalizeHandsTheRouteOver(t *testing.T) {
	ctx := context.Background()
	s := gatewaySpec
	s.Match = []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	s.SessionAffinity = &router.SessionAffinity{CookieName: "canary", PrimaryCookieName: "primary", MaxAge: 60}
	c := routertest.FakeClients(t, nil)
	r, _ := New("gatewayapi", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, everyExtra); err != nil {
		t.Fatal(err)
	}
	mustFinalizeOnce(t, c, r, router.HTTPRouteResource)
	routertest.MustBeLeftBehind(t, c, router.HTTPRouteResource, `{
	  "hostnames": ["app.example.com"],
	  "parentRefs": [
	    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "namespace": "gateways", "sectionName": "http"},
	    {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "internal"}
	  ],
	  "rules": [{
	    "backendRefs": [{"group": "", "kind": "Service", "name": "podinfo", "port": 80, "weight": 100}],
	    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}]
	  }]
	}`, routeNote)
}

// After Finalize the gateway's requests still reach the apex Service's Ready pods, as the mesh
// simulator follows the left-behind route.
func TestLeftBehindRouteServesTheApexPods(t *testing.T) {
	for _, tc := range []struct {
		provider string
		spec     router.Spec
		// metric and labels count the requests the apex pods answered.
		metric string
		labels []string
		want   map[string]float64
	}{
		{"istio", routertest.FullIstioSpec(), meshsim.MetricIstioRequests, []string{"reporter", "destination_service_name", "response_code"},
			map[string]float64{"destination/podinfo/200": meshsim.DefaultRPS, "source/podinfo/200": meshsim.DefaultRPS}},
		{"gatewayapi", gatewaySpec, meshsim.MetricHTTPRequestDuration, []string{"kubernetes_pod_name", "status"},
			map[string]float64{"podinfo-0/200": meshsim.DefaultRPS / 2, "podinfo-1/200": meshsim.DefaultRPS / 2}},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			ctx := context.Background()
			// The engine has pointed the apex at the target's pods before Finalize.
			apex := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "podinfo"}}}
			c := routertest.FakeClients(t, nil, apex, routertest.ReadyPod("podinfo-0"), routertest.ReadyPod("podinfo-1"))
			// Added by resource: the fake client would guess "gatewaies" from the kind.
			if err := routertest.FakeDynamic(c).Tracker().Create(router.GatewayResource, routertest.ParseYAML(t, userGateway), "gateways"); err != nil {
				t.Fatal(err)
			}
			r, _ := New(tc.provider, c, tc.spec)
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}); err != nil {
				t.Fatal(err)
			}
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			got := routertest.SimulateOneSecond(t, c, tc.metric, tc.labels...)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("requests answered %v, want %v", got, tc.want)
			}
		})
	}
}
