package conformance

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// abMatch is two conditions: an insider header (exact) or a beta query parameter (prefix)
// together with a user agent (regex).
var abMatch = []router.Match{
	{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}},
	{QueryParams: map[string]router.StringMatch{"beta": {Prefix: "on."}}, Headers: map[string]router.StringMatch{"user-agent": {Regex: "(?i)firefox"}}},
}

// nginxMatch is what ingress-nginx can hold of abMatch: one header per entry, one entry per
// header, no query parameters.
var nginxMatch = []router.Match{
	{Headers: map[string]router.StringMatch{"x-canary": {Exact: "insider"}}},
	{Headers: map[string]router.StringMatch{"cookie": {Exact: "canary"}}},
}

// albMatch is abMatch without the regex, which ALB conditions cannot hold.
var albMatch = []router.Match{abMatch[0], {QueryParams: abMatch[1].QueryParams, Headers: map[string]router.StringMatch{"user-agent": {Suffix: "Firefox/140.0"}}}}

var matched = router.Weights{Primary: 100, Matched: true}

// matchingRouters are the routers that route by match, reconciled at 100/0, with abMatch.
func matchingRouters(t *testing.T) map[string]routerCase {
	t.Helper()
	out := map[string]routerCase{}
	for name, setup := range map[string]struct {
		c    router.Clients
		spec router.Spec
		res  string
		obj  string
		// match replaces abMatch for a router that cannot hold all of it.
		match []router.Match
	}{
		"apisix":     {routertest.FakeClients(t, []string{routertest.APISIXUserRoute}), routertest.APISIXSpec, "apisixroutes", "ApisixRoute test/podinfo-podinfo-canary", nil},
		"gloo":       {routertest.FakeClients(t, nil, routertest.GlooServices()...), routertest.GlooSpec, "routetables", "RouteTable test/podinfo", nil},
		"istio":      {routertest.FakeClients(t, nil), routertest.IstioSpec, "virtualservices", "VirtualService test/podinfo", nil},
		"gatewayapi": {routertest.FakeClients(t, nil), gatewaySpec, "httproutes", "HTTPRoute test/podinfo", nil},
		"linkerd":    {routertest.FakeClients(t, nil), linkerdSpec, "httproutes", "HTTPRoute test/podinfo", nil},
		"contour":    {routertest.FakeClients(t, nil), routertest.OSMSpec, "httpproxies", "HTTPProxy test/podinfo", nil},
		"nginx": {routertest.FakeClients(t, []string{routertest.NginxUserIngress}), routertest.NginxSpec, "ingresses",
			"Ingress test/podinfo-web-canary", nginxMatch},
		"alb": {routertest.FakeClients(t, []string{routertest.ALBUserIngress}), routertest.ALBSpec, "ingresses", "Ingress test/podinfo-podinfo-canary", albMatch},
	} {
		s := setup.spec
		s.Match = abMatch
		if setup.match != nil {
			s.Match = setup.match
		}
		r, err := New(name, setup.c, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		out[name] = routerCase{name: name, resource: setup.res, object: setup.obj, r: r, c: setup.c}
	}
	return out
}

func TestAPISIXMatchedShape(t *testing.T) {
	ctx := context.Background()
	tc := matchingRouters(t)["apisix"]
	if err := tc.r.SetRoutes(ctx, matched); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, tc.r, matched)
	rules, _, _ := unstructured.NestedSlice(routertest.Get(t, tc.c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary").Object, "spec", "http")
	if len(rules) != 3 {
		t.Fatalf("%d http rules, want the weighted one and 2 A/B rules", len(rules))
	}
	// The A/B rules keep the user's match (hosts, paths, methods) and narrow it.
	common := `"timeout":{"read":"10s"},"websocket":false,
	  "plugins":[{"name":"prometheus","enable":true,"config":{"disable":false,"prefer_name":true}}],
	  "backends":[{"serviceName":"podinfo-canary","servicePort":80,"resolveGranularity":"service","weight":100}],
	  "priority":10001`
	for i, want := range []string{
		`{"name":"method-ab-0",` + common + `,"match":{"hosts":["app.example.com"],"methods":["GET"],"paths":["/*"],
		  "exprs":[{"subject":{"scope":"Header","name":"x-canary"},"op":"Equal","value":"insider"}]}}`,
		`{"name":"method-ab-1",` + common + `,"match":{"hosts":["app.example.com"],"methods":["GET"],"paths":["/*"],
		  "exprs":[{"subject":{"scope":"Header","name":"user-agent"},"op":"RegexMatch","value":"(?i)firefox"},
		           {"subject":{"scope":"Query","name":"beta"},"op":"RegexMatch","value":"^on\\."}]}}`,
	} {
		if got := routertest.MustJSON(t, rules[i+1]); got != routertest.CompactJSON(t, want) {
			t.Errorf("A/B rule %d\n%s\nwant\n%s", i, got, routertest.CompactJSON(t, want))
		}
	}
	weighted := routertest.MustJSON(t, rules[0])
	routertest.MustDrift(t, tc.r)

	// Reconcile keeps the A/B rules; SetRoutes without Matched removes them.
	if err := tc.r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, tc.r, matched)
	if err := tc.r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, tc.r, router.Weights{Primary: 100})
	rules, _, _ = unstructured.NestedSlice(routertest.Get(t, tc.c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary").Object, "spec", "http")
	if len(rules) != 1 || routertest.MustJSON(t, rules[0]) != weighted {
		t.Fatalf("rules after A/B %s, want the weighted rule alone", routertest.MustJSON(t, rules))
	}
}

func TestAPISIXDriftOnABRules(t *testing.T) {
	ctx := context.Background()
	tc := matchingRouters(t)["apisix"]
	if err := tc.r.SetRoutes(ctx, matched); err != nil {
		t.Fatal(err)
	}
	route := routertest.Get(t, tc.c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary")
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "http")
	exprs, _, _ := unstructured.NestedSlice(rules[1].(map[string]any), "match", "exprs")
	exprs[0].(map[string]any)["value"] = "outsider"
	_ = unstructured.SetNestedSlice(rules[1].(map[string]any), exprs, "match", "exprs")
	_ = unstructured.SetNestedSlice(route.Object, rules, "spec", "http")
	routertest.Update(t, tc.c, router.ApisixRouteResource, route)
	routertest.MustDrift(t, tc.r, "ApisixRoute test/podinfo-podinfo-canary: its A/B testing rules differ from analysis.match")
}

func TestGlooMatchedShape(t *testing.T) {
	ctx := context.Background()
	tc := matchingRouters(t)["gloo"]
	if err := tc.r.SetRoutes(ctx, matched); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, tc.r, matched)
	want := `{"routes":[
	  {"inheritablePathMatchers":true,
	   "matchers":[
	     {"headers":[{"name":"x-canary","value":"insider"}]},
	     {"headers":[{"name":"user-agent","regex":true,"value":"(?i)firefox"}],
	      "queryParameters":[{"name":"beta","regex":true,"value":"on\\..*"}]}],
	   "routeAction":{"single":{"upstream":{"name":"test-podinfo-canaryupstream-80","namespace":"test"}}}},
	  {"inheritablePathMatchers":true,"routeAction":{"multi":{"destinations":[
	    {"destination":{"upstream":{"name":"test-podinfo-primaryupstream-80","namespace":"test"}},"weight":100},
	    {"destination":{"upstream":{"name":"test-podinfo-canaryupstream-80","namespace":"test"}},"weight":0}]}}}]}`
	if got := routertest.SpecJSON(t, routertest.Get(t, tc.c, router.RouteTableResource, "test", "podinfo")); got != routertest.CompactJSON(t, want) {
		t.Fatalf("RouteTable spec\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
	routertest.MustDrift(t, tc.r)
	if err := tc.r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, tc.r, matched)
	if err := tc.r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, tc.r, router.Weights{Primary: 100})
}

// The suffix form of a condition, which abMatch does not cover.
func TestStringMatchRegex(t *testing.T) {
	for _, tc := range []struct {
		m            router.StringMatch
		whole, least string
	}{
		{router.StringMatch{Suffix: ".io"}, `.*\.io`, `\.io$`},
		{router.StringMatch{Prefix: "a+"}, `a\+.*`, `^a\+`},
		{router.StringMatch{Regex: "^x|y$"}, "^x|y$", "^x|y$"},
	} {
		if got := tc.m.Pattern(true); got != tc.whole {
			t.Errorf("%+v whole: %q, want %q", tc.m, got, tc.whole)
		}
		if got := tc.m.Pattern(false); got != tc.least {
			t.Errorf("%+v search: %q, want %q", tc.m, got, tc.least)
		}
	}
}

// Routers that cannot match refuse Matched instead of splitting by weight alone, and read it
// back as false.
func TestSetRoutesRefusesMatchedWhereUnsupported(t *testing.T) {
	for _, tc := range everyRouter(t) {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.SetRoutes(context.Background(), matched)
			switch tc.name {
			case "apisix", "gloo", "istio", "gatewayapi", "linkerd", "contour", "nginx", "alb":
				routertest.WantErr(t, err, "A/B testing needs at least one analysis.match condition")
			case "gloo-ug":
				routertest.WantErr(t, err, "A/B testing (analysis.match) is not available with mesh_provider gloo in upstream_group mode; it is with apisix, gloo, istio, gatewayapi, linkerd, contour, nginx, alb (gloo in route_table mode)")
			default:
				routertest.WantErr(t, err, "A/B testing (analysis.match) is not available with mesh_provider "+tc.name+"; ")
			}
			routertest.MustWeights(t, tc.r, router.Weights{Primary: 100})
		})
	}
}

// Verified write: an API server that keeps the weights but drops the A/B route is an error.
func TestSetRoutesReportsMatchNotHeld(t *testing.T) {
	for _, name := range []string{"apisix", "gloo", "istio", "gatewayapi", "linkerd", "contour", "nginx", "alb"} {
		t.Run(name, func(t *testing.T) {
			tc := matchingRouters(t)[name]
			routertest.FakeDynamic(tc.c).PrependReactor("update", tc.resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
				if name == "nginx" {
					// ingress-nginx's matcher is the canary-by annotations.
					kept := map[string]string{}
					for k, v := range obj.GetAnnotations() {
						if !strings.Contains(k, "/canary-by-") {
							kept[k] = v
						}
					}
					obj.SetAnnotations(kept)
					return true, obj, nil
				}
				if name == "alb" {
					// The A/B paths go ahead of the weighted path, in the Ingress's one rule.
					rules, _, _ := unstructured.NestedSlice(obj.Object, "spec", "rules")
					rule, _ := rules[0].(map[string]any)
					paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
					_ = unstructured.SetNestedSlice(rule, slices.Clone(paths[len(paths)-1:]), "http", "paths")
					_ = unstructured.SetNestedSlice(obj.Object, rules, "spec", "rules")
					return true, obj, nil
				}
				field := map[string]string{"apisix": "http", "gloo": "routes", "istio": "http", "gatewayapi": "rules", "linkerd": "rules", "contour": "routes"}[name]
				list, _, _ := unstructured.NestedSlice(obj.Object, "spec", field)
				// The weighted rule is first for APISIX and last for the others.
				keep := list[:1]
				if name != "apisix" {
					keep = list[len(list)-1:]
				}
				_ = unstructured.SetNestedSlice(obj.Object, slices.Clone(keep), "spec", field)
				return true, obj, nil
			})
			err := tc.r.SetRoutes(context.Background(), matched)
			routertest.WantErr(t, err, tc.object+": wrote primary=100 canary=0 matched but the API server holds primary=100 canary=0")
		})
	}
}
