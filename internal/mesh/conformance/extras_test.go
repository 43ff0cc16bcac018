package conformance

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

var affinity = &router.SessionAffinity{CookieName: "canary", PrimaryCookieName: "stable", MaxAge: 60, Path: "/", Secure: true}

// extrasRouter is a reconciled router of provider with mirroring at 25% and session affinity.
func extrasRouter(t *testing.T, provider string, s router.Spec) (router.Clients, router.Router) {
	t.Helper()
	s.MirrorWeight, s.SessionAffinity = 25, affinity
	c := routertest.FakeClients(t, nil)
	r, err := New(provider, c, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, r
}

func setAndRead(t *testing.T, r router.Router, w router.Weights) {
	t.Helper()
	if err := r.SetRoutes(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, w)
	routertest.MustDrift(t, r)
}

// Istio: the sticky routes come before the weighted one, whose destinations set the cookies;
// mirroring rides on the weighted route with Flagger's mirrorPercentage.
func TestIstioMirrorAndSessionShape(t *testing.T) {
	c, r := extrasRouter(t, "istio", routertest.IstioSpec)
	w := router.Weights{Primary: 90, Canary: 10, Mirrored: true, Session: "abc123"}
	setAndRead(t, r, w)
	dest := func(host string, weight int, cookie string) string {
		out := `{"destination":{"host":"` + host + `","port":{"number":9898}},"weight":` + strconv.Itoa(weight)
		if cookie != "" {
			out += `,"headers":{"response":{"add":{"Set-Cookie":"` + cookie + `=abc123; Max-Age=60; Path=/; Secure"}}}`
		}
		return out + "}"
	}
	want := `{"gateways":["mesh"],"hosts":["podinfo"],"http":[
	  {"match":[{"headers":{"cookie":{"regex":".*canary=abc123.*"}}}],"route":[` + dest("podinfo-primary", 0, "") + `,` + dest("podinfo-canary", 100, "") + `]},
	  {"match":[{"headers":{"cookie":{"regex":".*stable=abc123.*"}}}],"route":[` + dest("podinfo-primary", 100, "") + `,` + dest("podinfo-canary", 0, "") + `]},
	  {"mirror":{"host":"podinfo-canary","port":{"number":9898}},"mirrorPercentage":{"value":25},
	   "route":[` + dest("podinfo-primary", 90, "stable") + `,` + dest("podinfo-canary", 10, "canary") + `]}]}`
	if got := routertest.SpecJSON(t, routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo")); got != routertest.CompactJSON(t, want) {
		t.Fatalf("VirtualService spec\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
	// Back to the primary: the sticky routes and the mirror go.
	setAndRead(t, r, router.Weights{Primary: 100})
	if routes, _, _ := unstructured.NestedSlice(routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo").Object, "spec", "http"); len(routes) != 1 {
		t.Fatalf("%d http routes at 100/0, want the weighted one alone", len(routes))
	}
}

func TestIstioMatchedShape(t *testing.T) {
	tc := matchingRouters(t)["istio"]
	setAndRead(t, tc.r, matched)
	want := `[{"match":[{"headers":{"x-canary":{"exact":"insider"}}},
	                   {"headers":{"user-agent":{"regex":"(?i)firefox"}},"queryParams":{"beta":{"prefix":"on."}}}],
	           "route":[{"destination":{"host":"podinfo-primary","port":{"number":9898}},"weight":0},
	                    {"destination":{"host":"podinfo-canary","port":{"number":9898}},"weight":100}]},
	          {"route":[{"destination":{"host":"podinfo-primary","port":{"number":9898}},"weight":100},
	                    {"destination":{"host":"podinfo-canary","port":{"number":9898}},"weight":0}]}]`
	routes, _, _ := unstructured.NestedSlice(routertest.Get(t, tc.c, router.IstioVirtualServiceResource, "test", "podinfo").Object, "spec", "http")
	if got := routertest.MustJSON(t, routes); got != routertest.CompactJSON(t, want) {
		t.Fatalf("http routes\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
}

// Gateway API: A/B and sticky rules before the split; the split's canary backendRef sets the
// cookie, and the RequestMirror filter carries the percent.
func TestHTTPRouteExtrasShape(t *testing.T) {
	c, r := extrasRouter(t, "gatewayapi", gatewaySpec)
	setAndRead(t, r, router.Weights{Primary: 75, Canary: 25, Mirrored: true, Session: "abc123"})
	ref := func(name string, weight, extra string) string {
		return `{"group":"","kind":"Service","name":"` + name + `","port":80,"weight":` + weight + extra + `}`
	}
	cookie := func(name string) string {
		return `,"filters":[{"type":"ResponseHeaderModifier","responseHeaderModifier":{"add":[{"name":"Set-Cookie","value":"` + name + `=abc123; Max-Age=60; Path=/; Secure"}]}}]`
	}
	path := `{"type":"PathPrefix","value":"/"}`
	want := `[
	  {"matches":[{"path":` + path + `,"headers":[{"type":"RegularExpression","name":"Cookie","value":".*canary=abc123.*"}]}],
	   "backendRefs":[` + ref("podinfo-primary", "0", "") + `,` + ref("podinfo-canary", "100", "") + `]},
	  {"matches":[{"path":` + path + `,"headers":[{"type":"RegularExpression","name":"Cookie","value":".*stable=abc123.*"}]}],
	   "backendRefs":[` + ref("podinfo-primary", "100", "") + `,` + ref("podinfo-canary", "0", "") + `]},
	  {"matches":[{"path":` + path + `}],
	   "backendRefs":[` + ref("podinfo-primary", "75", cookie("stable")) + `,` + ref("podinfo-canary", "25", cookie("canary")) + `],
	   "filters":[{"type":"RequestMirror","requestMirror":{"backendRef":{"group":"","kind":"Service","name":"podinfo-canary","port":80},"percent":25}}]}]`
	rules, _, _ := unstructured.NestedSlice(routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo").Object, "spec", "rules")
	if got := routertest.MustJSON(t, rules); got != routertest.CompactJSON(t, want) {
		t.Fatalf("rules\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
	setAndRead(t, r, router.Weights{Primary: 100})
}

func TestHTTPRouteMatchedShape(t *testing.T) {
	for _, name := range []string{"gatewayapi", "linkerd"} {
		tc := matchingRouters(t)[name]
		setAndRead(t, tc.r, matched)
		rules, _, _ := unstructured.NestedSlice(routertest.Get(t, tc.c, router.HTTPRouteResource, "test", "podinfo").Object, "spec", "rules")
		matches, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "matches")
		want := `[{"path":{"type":"PathPrefix","value":"/"},"headers":[{"type":"Exact","name":"x-canary","value":"insider"}]},
		          {"path":{"type":"PathPrefix","value":"/"},"headers":[{"type":"RegularExpression","name":"user-agent","value":"(?i)firefox"}],
		           "queryParams":[{"type":"RegularExpression","name":"beta","value":"on\\..*"}]}]`
		if len(rules) != 2 || routertest.MustJSON(t, matches) != routertest.CompactJSON(t, want) {
			t.Fatalf("%s: rules %s, want the A/B rule with matches %s then the split", name, routertest.MustJSON(t, rules), routertest.CompactJSON(t, want))
		}
	}
}

// Linkerd neither mirrors nor keeps sessions: it refuses both rather than split without them.
func TestLinkerdRefusesMirrorAndSession(t *testing.T) {
	_, r := extrasRouter(t, "linkerd", linkerdSpec)
	routertest.WantErr(t, r.SetRoutes(context.Background(), router.Weights{Primary: 100, Mirrored: true}), "mirroring (analysis.mirror) is not available with mesh_provider linkerd; it is with istio, gatewayapi or traefik")
	routertest.WantErr(t, r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10, Session: "x"}), "session affinity (analysis.session_affinity) is not available with mesh_provider linkerd")
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
}

func selectorService(name string, selector map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "test"}, Spec: corev1.ServiceSpec{Selector: selector}}
}

// The kubernetes router flips the apex Service's selector between the -primary and -canary
// Services' selectors; a partial split is a replica ratio, refused here where there is no
// primary to share the traffic with (the apex keeps its selector).
func TestKubernetesSwitchesTheApexSelector(t *testing.T) {
	ctx := context.Background()
	primary, canary := map[string]string{"app": "podinfo-primary"}, map[string]string{"app": "podinfo"}
	c := routertest.FakeClients(t, nil, selectorService("podinfo", primary), selectorService("podinfo-primary", primary), selectorService("podinfo-canary", canary))
	r, err := New("kubernetes", c, router.Spec{Namespace: "test", Name: "rel", Target: "podinfo", Apex: "podinfo", Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	apexSelector := func() map[string]string {
		svc, err := c.Kube.CoreV1().Services("test").Get(ctx, "podinfo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc.Spec.Selector
	}
	setAndRead(t, r, router.Weights{Canary: 100})
	if got := apexSelector(); got["app"] != "podinfo" {
		t.Fatalf("apex selector %v after the switch, want the canary's %v", got, canary)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}), `reading Deployment test/podinfo-primary`)
	routertest.WantErr(t, r.SetRoutes(ctx, matched), "A/B testing (analysis.match) is not available with mesh_provider kubernetes")
	routertest.MustWeights(t, r, router.Weights{Canary: 100})
	setAndRead(t, r, router.Weights{Primary: 100})
	if got := apexSelector(); got["app"] != "podinfo-primary" {
		t.Fatalf("apex selector %v after the switch back, want the primary's", got)
	}
}

// service.match narrows every route: the A/B route's conditions are added to each of its
// entries, and the split route carries it alone.
func TestIstioServiceMatchNarrowsEveryRoute(t *testing.T) {
	s := routertest.IstioSpec
	s.Match = []router.Match{{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}}}
	s.Options = istio.Options{Match: []istio.Match{{URI: &istio.StringMatch{Prefix: "/api"}}, {URI: &istio.StringMatch{Exact: "/"}, Method: &istio.StringMatch{Exact: "GET"}}}}
	c := routertest.FakeClients(t, nil)
	r, err := New("istio", c, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	setAndRead(t, r, matched)
	routes, _, _ := unstructured.NestedSlice(routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo").Object, "spec", "http")
	ab, _ := routes[0].(map[string]any)
	split, _ := routes[1].(map[string]any)
	wantAB := `[{"headers":{"x-canary":{"exact":"insider"}},"uri":{"prefix":"/api"}},
	            {"headers":{"x-canary":{"exact":"insider"}},"method":{"exact":"GET"},"uri":{"exact":"/"}}]`
	wantSplit := `[{"uri":{"prefix":"/api"}},{"method":{"exact":"GET"},"uri":{"exact":"/"}}]`
	if len(routes) != 2 || routertest.MustJSON(t, ab["match"]) != routertest.CompactJSON(t, wantAB) || routertest.MustJSON(t, split["match"]) != routertest.CompactJSON(t, wantSplit) {
		t.Fatalf("routes %s, want the A/B route matching %s and the split matching %s", routertest.MustJSON(t, routes), routertest.CompactJSON(t, wantAB), routertest.CompactJSON(t, wantSplit))
	}
	setAndRead(t, r, router.Weights{Primary: 100})
}

// Once a release ended (Weights.Expired), requests carrying its cookies go to the primary and
// its answer expires each cookie, with the attributes a browser needs to find it; the routes
// are read back as written, kept by Reconcile, and go when the next canary has weight.
func TestIstioExpiresSessionCookies(t *testing.T) {
	c, r := extrasRouter(t, "istio", routertest.IstioSpec)
	setAndRead(t, r, router.Weights{Primary: 90, Canary: 10, Session: "abc123"})
	setAndRead(t, r, router.Weights{Primary: 100, Expired: "abc123"})
	dest := func(host string, weight int) string {
		return `{"destination":{"host":"` + host + `","port":{"number":9898}},"weight":` + strconv.Itoa(weight) + `}`
	}
	expiring := func(cookie string) string {
		return `{"headers":{"response":{"add":{"Set-Cookie":"` + cookie + `=abc123; Max-Age=-1; Path=/; Secure"}}},
		  "match":[{"headers":{"cookie":{"regex":".*` + cookie + `=abc123.*"}}}],
		  "route":[` + dest("podinfo-primary", 100) + `,` + dest("podinfo-canary", 0) + `]}`
	}
	want := `[` + expiring("canary") + `,` + expiring("stable") + `,{"route":[` + dest("podinfo-primary", 100) + `,` + dest("podinfo-canary", 0) + `]}]`
	routes := func() string {
		list, _, _ := unstructured.NestedSlice(routertest.Get(t, c, router.IstioVirtualServiceResource, "test", "podinfo").Object, "spec", "http")
		return routertest.MustJSON(t, list)
	}
	if got := routes(); got != routertest.CompactJSON(t, want) {
		t.Fatalf("http routes\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Expired: "abc123"})
	setAndRead(t, r, router.Weights{Primary: 90, Canary: 10, Session: "def456"})
	if got := routes(); strings.Contains(got, "Max-Age=-1") {
		t.Fatalf("http routes %s still expire a cookie while the canary has weight", got)
	}
}

func TestHTTPRouteExpiresSessionCookies(t *testing.T) {
	c, r := extrasRouter(t, "gatewayapi", gatewaySpec)
	setAndRead(t, r, router.Weights{Primary: 100, Expired: "abc123"})
	ref := func(name, weight string) string {
		return `{"group":"","kind":"Service","name":"` + name + `","port":80,"weight":` + weight + `}`
	}
	path := `{"type":"PathPrefix","value":"/"}`
	expiring := func(cookie string) string {
		return `{"matches":[{"path":` + path + `,"headers":[{"type":"RegularExpression","name":"Cookie","value":".*` + cookie + `=abc123.*"}]}],
		  "backendRefs":[` + ref("podinfo-primary", "100") + `,` + ref("podinfo-canary", "0") + `],
		  "filters":[{"type":"ResponseHeaderModifier","responseHeaderModifier":{"add":[{"name":"Set-Cookie","value":"` + cookie + `=abc123; Max-Age=-1; Path=/; Secure"}]}}]}`
	}
	want := `[` + expiring("canary") + `,` + expiring("stable") + `,{"matches":[{"path":` + path + `}],"backendRefs":[` + ref("podinfo-primary", "100") + `,` + ref("podinfo-canary", "0") + `]}]`
	rules, _, _ := unstructured.NestedSlice(routertest.Get(t, c, router.HTTPRouteResource, "test", "podinfo").Object, "spec", "rules")
	if got := routertest.MustJSON(t, rules); got != routertest.CompactJSON(t, want) {
		t.Fatalf("rules\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
	if err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100, Expired: "abc123"})
	// A cookie is only expired once the canary has no weight.
	routertest.WantErr(t, r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10, Expired: "abc123"}), "only expired once the release ended")
}
