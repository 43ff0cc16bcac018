package meshsim

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// withImage gives a deployment's pods the application container image.
func withImage(image string, objs []runtime.Object) []runtime.Object {
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			pod.Spec.Containers = []corev1.Container{{Name: "app", Image: image}}
		}
	}
	return objs
}

// describeTarget renders a target as a test reads it.
func describeTarget(t clientTarget) string {
	return fmt.Sprintf("%s %s tagged=%t %s headers=%v split=%q model=%v", t.object, t.host, t.tagged, t.requestURL(), t.req.headers, t.split, t.model)
}

func targetsByHost(f *fixture) map[string][]string {
	out := map[string][]string{}
	for _, t := range f.sim.clientTargets() {
		out[t.host] = append(out[t.host], describeTarget(t))
	}
	return out
}

// An HTTPRoute with hostnames on a Gateway of Traefik's class is a target; the tagged requests
// of an A/B test carry the apex's header and take the header-matched rule, the plain ones the
// default rule; the model's shares follow the weights to the images of the Ready pods. A route
// on another implementation's Gateway is not Traefik's.
func TestClientTargetsHTTPRoute(t *testing.T) {
	route := httpRouteRules(gatewayParent("public"), abRule(map[string]any{"name": "x-canary", "value": "insider"}), defaultRule(100, 0))
	route.Object["spec"].(map[string]any)["hostnames"] = []any{"app.example.com"}
	other := httpRoute("elsewhere", gatewayParent("envoy"), "podinfo-primary", 100)
	other.Object["spec"].(map[string]any)["hostnames"] = []any{"envoy.example.com"}
	f := newFixture(t, RouterGVRs, objects(
		podinfoServices(map[string]string{AnnotationABHeader: "x-canary=insider", AnnotationABShare: "0.3"}),
		withImage("podinfo:6.0.0", deployment("podinfo-primary", 2, true, nil)),
		withImage("podinfo:6.0.1", deployment("podinfo", 1, true, nil)),
		[]runtime.Object{route, other},
	)...)
	f.addGateway("public", TraefikGatewayController)
	f.addGateway("envoy", EnvoyGatewayController)
	got := targetsByHost(f)
	want := []string{
		`HTTPRoute/podinfo app.example.com tagged=false / headers=map[] split="podinfo-primary=100,podinfo-canary=0" model=map[podinfo:6.0.0:1]`,
		`HTTPRoute/podinfo app.example.com tagged=true / headers=map[x-canary:insider] split="podinfo-primary=0,podinfo-canary=100" model=map[podinfo:6.0.1:1]`,
	}
	if fmt.Sprint(got["app.example.com"]) != fmt.Sprint(want) || len(got) != 1 {
		t.Errorf("targets:\n%v\nwant app.example.com alone:\n%v", got, want)
	}
	for _, tg := range f.sim.clientTargets() {
		if want := map[bool]float64{false: 0.7 * DefaultRPS, true: 0.3 * DefaultRPS}[tg.tagged]; tg.rps != want {
			t.Errorf("%s: rps %g, want %g", describeTarget(tg), tg.rps, want)
		}
	}
}

// An Ingress of Traefik's class is a target for each rule host, to its path's Service: the
// model spreads the requests evenly over that Service's Ready pods (here the apex selecting
// both sides, 3 primary pods beside 1 canary pod: the replica ratio). Another class is not,
// nor a rule whose Service is gone.
func TestClientTargetsIngress(t *testing.T) {
	ingress := func(name, class, host, service string) *unstructured.Unstructured {
		return obj("networking.k8s.io/v1", "Ingress", ns, name, map[string]any{
			"ingressClassName": class,
			"rules": []any{map[string]any{"host": host, "http": map[string]any{"paths": []any{map[string]any{
				"path": "/", "pathType": "Prefix",
				"backend": map[string]any{"service": map[string]any{"name": service, "port": map[string]any{"number": int64(80)}}},
			}}}}},
		})
	}
	primary := withImage("podinfo:6.0.0", deployment("podinfo-primary", 3, true, nil))
	canary := withImage("podinfo:6.0.1", deployment("podinfo", 1, true, nil))
	for _, o := range append(primary, canary...) {
		if pod, ok := o.(*corev1.Pod); ok {
			pod.Labels["side"] = "both"
		}
	}
	f := newFixture(t, RouterGVRs, objects(
		[]runtime.Object{service("podinfo", map[string]string{"side": "both"}, nil)},
		primary, canary,
		[]runtime.Object{
			ingress("web", TraefikIngressClass, "app.example.com", "podinfo"),
			ingress("nginx", "nginx", "nginx.example.com", "podinfo"),
			ingress("gone", TraefikIngressClass, "gone.example.com", "deleted"),
		},
	)...)
	got := targetsByHost(f)
	want := []string{`Ingress/web app.example.com tagged=false / headers=map[] split="" model=map[podinfo:6.0.0:0.75 podinfo:6.0.1:0.25]`}
	if fmt.Sprint(got["app.example.com"]) != fmt.Sprint(want) || len(got) != 1 {
		t.Errorf("targets:\n%v\nwant app.example.com alone:\n%v", got, want)
	}
}
