package apisix_test

import (
	"context"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

func TestAPISIXReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.APISIXUserRoute})
	before := routertest.SpecJSON(t, routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo"))
	r, _ := New("apisix", c, routertest.APISIXSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	route := routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary")
	want := `{
	  "ingressClassName": "apisix",
	  "http": [{
	    "name": "method",
	    "priority": 10000,
	    "timeout": {"read": "10s"},
	    "websocket": false,
	    "match": {"hosts": ["app.example.com"], "methods": ["GET"], "paths": ["/*"]},
	    "backends": [
	      {"serviceName": "podinfo-primary", "servicePort": 80, "resolveGranularity": "service", "weight": 100},
	      {"serviceName": "podinfo-canary", "servicePort": 80, "resolveGranularity": "service", "weight": 0}
	    ],
	    "plugins": [{"name": "prometheus", "enable": true, "config": {"disable": false, "prefer_name": true}}]
	  }],
	  "stream": [{"name": "tcp", "protocol": "TCP", "match": {"ingressPort": 9100}, "backend": {"serviceName": "tcp", "servicePort": 9100}}]
	}`
	if got := routertest.SpecJSON(t, route); got != routertest.CompactJSON(t, want) {
		t.Fatalf("canary route spec\n%s\nwant\n%s", got, routertest.CompactJSON(t, want))
	}
	labels := route.GetLabels()
	if labels["team"] != "web" || labels[router.LabelManagedBy] != router.ManagedByValue || labels[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", labels)
	}
	ann := route.GetAnnotations()
	if ann["owner"] != "alice" || ann["kubectl.kubernetes.io/last-applied-configuration"] != "" {
		t.Fatalf("annotations %v", ann)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r)
	if w := r.Warnings(ctx); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}

	if err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	if after := routertest.SpecJSON(t, routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo")); after != before {
		t.Fatalf("the user's route changed:\n%s\n%s", before, after)
	}
	if routertest.Exists(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary") {
		t.Fatal("Finalize left the canary route")
	}
}

func TestAPISIXRoutesAndDrift(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.APISIXUserRoute})
	r, _ := New("apisix", c, routertest.APISIXSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	backends := routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary").Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["backends"]
	if got, want := routertest.CompactJSON(t, routertest.MustJSON(t, backends)), routertest.CompactJSON(t, `[
		{"serviceName":"podinfo-primary","servicePort":80,"resolveGranularity":"service","weight":70},
		{"serviceName":"podinfo-canary","servicePort":80,"resolveGranularity":"service","weight":30}]`); got != want {
		t.Fatalf("backends %s", got)
	}
	routertest.WantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")

	// The user changes the plugins of their rule.
	user := routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo")
	rule := user.Object["spec"].(map[string]any)["http"].([]any)[1].(map[string]any)
	rule["plugins"] = append(rule["plugins"].([]any), map[string]any{"name": "cors", "enable": true})
	routertest.Update(t, c, router.ApisixRouteResource, user)
	routertest.MustDrift(t, r, "ApisixRoute test/podinfo-podinfo-canary: plugins differ from route_ref test/podinfo")

	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	plugins := routertest.Get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary").Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["plugins"].([]any)
	if len(plugins) != 2 {
		t.Fatalf("plugins not repaired: %v", plugins)
	}

	// The canary route itself is deleted.
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r, "ApisixRoute test/podinfo-podinfo-canary is missing")
}

func TestAPISIXSetRoutesWithoutUserRoute(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.APISIXUserRoute})
	r, _ := New("apisix", c, routertest.APISIXSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Dynamic.Resource(router.ApisixRouteResource).Namespace("test").Delete(ctx, "podinfo", routertest.DeleteOpts); err != nil {
		t.Fatal(err)
	}
	// A rollback must still be able to send everything back to the primary.
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 100})
	routertest.MustDrift(t, r, "route_ref: ApisixRoute test/podinfo not found")
}

func TestAPISIXErrors(t *testing.T) {
	ctx := context.Background()
	twoBackends := strings.Replace(routertest.APISIXUserRoute, `    - serviceName: podinfo
      servicePort: 80`, `    - serviceName: podinfo
      servicePort: 80
    - serviceName: podinfo-v2
      servicePort: 80`, 1)
	noApex := strings.Replace(routertest.APISIXUserRoute, "serviceName: podinfo\n", "serviceName: frontend\n", 1)
	cases := []struct {
		name string
		objs []string
		want string
	}{
		{"route not found", nil, "route_ref: ApisixRoute test/podinfo not found"},
		{"two backends", []string{twoBackends}, `route_ref: ApisixRoute test/podinfo: http rule "method" has 2 backends; only one http backend is supported`},
		{"no rule for the apex", []string{noApex}, "route_ref: ApisixRoute test/podinfo has no http rule with a backend serviceName podinfo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := routertest.FakeClients(t, tc.objs)
			r, _ := New("apisix", c, routertest.APISIXSpec)
			routertest.WantErr(t, r.Reconcile(ctx), tc.want)
			drift, err := r.Drift(ctx)
			if err != nil || len(drift) != 1 || !strings.Contains(drift[0], tc.want) {
				t.Fatalf("drift %v, %v", drift, err)
			}
			if routertest.Exists(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary") {
				t.Fatal("a canary route was created")
			}
		})
	}

	s := routertest.APISIXSpec
	s.Options = nil
	r, _ := New("apisix", routertest.FakeClients(t, nil), s)
	routertest.WantErr(t, r.Reconcile(ctx), "route_ref is required")
}

func TestAPISIXWarnsWithoutPrometheusPlugin(t *testing.T) {
	noPlugin := strings.Replace(routertest.APISIXUserRoute, "prefer_name: true", "prefer_name: false", 1)
	r, _ := New("apisix", routertest.FakeClients(t, []string{noPlugin}), routertest.APISIXSpec)
	w := r.Warnings(context.Background())
	if len(w) != 1 || !strings.Contains(w[0], "prefer_name") {
		t.Fatalf("warnings %v", w)
	}
}
