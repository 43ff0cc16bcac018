package conformance

import (
	"github.com/canary-release/terraform-provider-canary/internal/router"

	"context"
	"strings"
	"testing"
)

const userRoute = `
apiVersion: apisix.apache.org/v2
kind: ApisixRoute
metadata:
  name: podinfo
  namespace: test
  labels: {team: web}
  annotations: {owner: alice, kubectl.kubernetes.io/last-applied-configuration: "{}"}
spec:
  ingressClassName: apisix
  http:
  - name: other
    match: {paths: ["/other"]}
    backends: [{serviceName: other, servicePort: 80}]
  - name: method
    timeout: {read: 10s}
    websocket: false
    match:
      hosts: [app.example.com]
      methods: [GET]
      paths: ["/*"]
    backends:
    - serviceName: podinfo
      servicePort: 80
      resolveGranularity: service
    plugins:
    - name: prometheus
      enable: true
      config: {disable: false, prefer_name: true}
  stream:
  - name: tcp
    protocol: TCP
    match: {ingressPort: 9100}
    backend: {serviceName: tcp, servicePort: 9100}
`

var apisixSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	RouteRef: &router.Ref{APIVersion: "apisix.apache.org/v2", Kind: "ApisixRoute", Name: "podinfo"}}

func TestAPISIXReconcileShape(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, []string{userRoute})
	before := specJSON(t, get(t, c, router.ApisixRouteResource, "test", "podinfo"))
	r, _ := New("apisix", c, apisixSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	route := get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary")
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
	if got := specJSON(t, route); got != compactJSON(t, want) {
		t.Fatalf("canary route spec\n%s\nwant\n%s", got, compactJSON(t, want))
	}
	labels := route.GetLabels()
	if labels["team"] != "web" || labels[router.LabelManagedBy] != router.ManagedByValue || labels[router.LabelRelease] != "podinfo-release" {
		t.Fatalf("labels %v", labels)
	}
	ann := route.GetAnnotations()
	if ann["owner"] != "alice" || ann["kubectl.kubernetes.io/last-applied-configuration"] != "" {
		t.Fatalf("annotations %v", ann)
	}
	mustWeights(t, r, router.Weights{Primary: 100})
	mustDrift(t, r)
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
	if after := specJSON(t, get(t, c, router.ApisixRouteResource, "test", "podinfo")); after != before {
		t.Fatalf("the user's route changed:\n%s\n%s", before, after)
	}
	if exists(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary") {
		t.Fatal("Finalize left the canary route")
	}
}

func TestAPISIXRoutesAndDrift(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, []string{userRoute})
	r, _ := New("apisix", c, apisixSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	mustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	backends := get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary").Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["backends"]
	if got, want := compactJSON(t, mustJSON(t, backends)), compactJSON(t, `[
		{"serviceName":"podinfo-primary","servicePort":80,"resolveGranularity":"service","weight":70},
		{"serviceName":"podinfo-canary","servicePort":80,"resolveGranularity":"service","weight":30}]`); got != want {
		t.Fatalf("backends %s", got)
	}
	wantErr(t, r.SetRoutes(ctx, router.Weights{}), "both 0")

	// The user changes the plugins of their rule.
	user := get(t, c, router.ApisixRouteResource, "test", "podinfo")
	rule := user.Object["spec"].(map[string]any)["http"].([]any)[1].(map[string]any)
	rule["plugins"] = append(rule["plugins"].([]any), map[string]any{"name": "cors", "enable": true})
	update(t, c, router.ApisixRouteResource, user)
	mustDrift(t, r, "ApisixRoute test/podinfo-podinfo-canary: plugins differ from route_ref test/podinfo")

	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	mustDrift(t, r)
	mustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	plugins := get(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary").Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["plugins"].([]any)
	if len(plugins) != 2 {
		t.Fatalf("plugins not repaired: %v", plugins)
	}

	// The canary route itself is deleted.
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	mustDrift(t, r, "ApisixRoute test/podinfo-podinfo-canary is missing")
}

func TestAPISIXSetRoutesWithoutUserRoute(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, []string{userRoute})
	r, _ := New("apisix", c, apisixSpec)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Dynamic.Resource(router.ApisixRouteResource).Namespace("test").Delete(ctx, "podinfo", deleteOpts); err != nil {
		t.Fatal(err)
	}
	// A rollback must still be able to send everything back to the primary.
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	mustWeights(t, r, router.Weights{Primary: 100})
	mustDrift(t, r, "route_ref: ApisixRoute test/podinfo not found")
}

func TestAPISIXErrors(t *testing.T) {
	ctx := context.Background()
	twoBackends := strings.Replace(userRoute, `    - serviceName: podinfo
      servicePort: 80`, `    - serviceName: podinfo
      servicePort: 80
    - serviceName: podinfo-v2
      servicePort: 80`, 1)
	noApex := strings.Replace(userRoute, "serviceName: podinfo\n", "serviceName: frontend\n", 1)
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
			c := fakeClients(t, tc.objs)
			r, _ := New("apisix", c, apisixSpec)
			wantErr(t, r.Reconcile(ctx), tc.want)
			drift, err := r.Drift(ctx)
			if err != nil || len(drift) != 1 || !strings.Contains(drift[0], tc.want) {
				t.Fatalf("drift %v, %v", drift, err)
			}
			if exists(t, c, router.ApisixRouteResource, "test", "podinfo-podinfo-canary") {
				t.Fatal("a canary route was created")
			}
		})
	}

	s := apisixSpec
	s.RouteRef = nil
	r, _ := New("apisix", fakeClients(t, nil), s)
	wantErr(t, r.Reconcile(ctx), "route_ref is required")
}

func TestAPISIXWarnsWithoutPrometheusPlugin(t *testing.T) {
	noPlugin := strings.Replace(userRoute, "prefer_name: true", "prefer_name: false", 1)
	r, _ := New("apisix", fakeClients(t, []string{noPlugin}), apisixSpec)
	w := r.Warnings(context.Background())
	if len(w) != 1 || !strings.Contains(w[0], "prefer_name") {
		t.Fatalf("warnings %v", w)
	}
}
