package meshsim

import (
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// On a route the real proxy serves, the model sends nothing: no Traefik series of its own, no
// entry for a side the model would have sent to (the client judges what Traefik really did),
// while its weights are still checked. The pods behind it keep their own histogram declared
// at zero, and it counts exactly the requests the proxy had them answer. Without a real proxy
// the same objects are simulated as before.
func TestProxiedRoutesCarryOnlyRealRequests(t *testing.T) {
	objs := objects(
		podinfoServices(nil),
		deployment("podinfo-primary", 2, true, map[string]string{AnnotationErrorRate: "0.5"}),
		deployment("podinfo", 1, false, nil), // the canary: no Ready pod
		// Its weights sum to 110: an entry either way.
		[]runtime.Object{ingressRoute(toTraefikService), traefikService(90, 20)},
	)
	entries := func(f *fixture) (noReady, weights int) {
		for _, e := range f.sim.Invariants(ns) {
			switch {
			case strings.Contains(e.Message, "no Ready pods"):
				noReady++
			case strings.Contains(e.Message, "weights sum to 110"):
				weights++
			}
		}
		return noReady, weights
	}

	simulated := newFixture(t, RouterGVRs, objs...)
	simulated.run(3)
	if n := simulated.sum(MetricTraefikRequests, nil); n == 0 {
		t.Fatal("without a real proxy the model sent no request through the IngressRoute")
	}
	if noReady, weights := entries(simulated); noReady == 0 || weights == 0 {
		t.Fatalf("without a real proxy: %d no-Ready and %d weight entries, want some of each", noReady, weights)
	}

	f := newFixture(t, RouterGVRs, objs...)
	f.sim.cfg.ProxyAddress = "127.0.0.1:1" // the client is not run: only the model is looked at
	f.run(3)
	if got := f.series(MetricTraefikRequests, nil); len(got) != 0 {
		t.Errorf("the model sent requests on the route the real proxy serves: %d Traefik series", len(got))
	}
	if noReady, weights := entries(f); noReady != 0 || weights == 0 {
		t.Errorf("with a real proxy: %d no-Ready and %d weight entries, want none and some", noReady, weights)
	}
	app := func(sel ...string) float64 {
		total := 0.0
		for _, s := range f.series(MetricHTTPRequestDuration, match(sel...)) {
			total += float64(s.metric.GetHistogram().GetSampleCount())
		}
		return total
	}
	for _, pod := range []string{"podinfo-primary-5d8f-0", "podinfo-primary-5d8f-1", "podinfo-5d8f-0"} {
		if got := f.series(MetricHTTPRequestDuration, match("kubernetes_pod_name="+pod)); len(got) == 0 {
			t.Errorf("the histogram of %s, behind the proxied route, is not declared", pod)
		}
	}
	if got := app(); got != 0 {
		t.Fatalf("the pods' histogram counts %g requests before the proxy sent any", got)
	}

	client := viaSimulatorProxy(t, f.sim)
	codes := map[int]int{}
	for range 10 {
		resp, err := client.Get("http://" + "10.0.15.1" + ":9898/") // podinfo-primary-5d8f-0
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	f.run(2) // the ticks keep the pod's series and its owed errors
	if got := app("kubernetes_pod_name=podinfo-primary-5d8f-0"); got != 10 {
		t.Errorf("the pod's histogram counts %g requests, it answered 10", got)
	}
	if got := app("kubernetes_pod_name=podinfo-primary-5d8f-0", "status=500"); got != float64(codes[http.StatusInternalServerError]) || got != 5 {
		t.Errorf("the pod's histogram counts %g answers 500, it gave %d (error rate 0.5 of 10)", got, codes[http.StatusInternalServerError])
	}
	if got := app("kubernetes_pod_name=podinfo-primary-5d8f-1"); got != 0 {
		t.Errorf("the other pod's histogram counts %g requests, it answered none", got)
	}

	// Deleted, the pod answers through its grace period, and its series stays meanwhile.
	if err := f.kube.CoreV1().Pods(ns).Delete(f.ctx, "podinfo-primary-5d8f-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the pod gone from the informer", func() bool {
		_, err := f.sim.typed.Core().V1().Pods().Lister().Pods(ns).Get("podinfo-primary-5d8f-0")
		return err != nil
	})
	f.run(2)
	if got := app("kubernetes_pod_name=podinfo-primary-5d8f-0"); got != 10 {
		t.Errorf("the deleted pod's histogram, in its grace period, counts %g requests, want the 10 it answered", got)
	}
}

// The flows the client's requests stand for are the model's flows of the same routes and
// apexes: an IngressRoute's (and, when it names the apex Service itself, its un-meshed
// clients'), an HTTPRoute's on a Gateway of Traefik's class, and the un-meshed clients of an
// apex an Ingress of Traefik's class exposes. The routes of other classes and gateways keep
// their simulated flows.
func TestProxiedFlows(t *testing.T) {
	direct := map[string]string{AnnotationClients: ClientsDirect}
	ingress := func(name, class, host string) *unstructured.Unstructured {
		return obj("networking.k8s.io/v1", "Ingress", ns, name, map[string]any{
			"ingressClassName": class,
			"rules": []any{map[string]any{"host": host, "http": map[string]any{"paths": []any{map[string]any{
				"path": "/", "pathType": "Prefix",
				"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(80)}}},
			}}}}},
		})
	}
	hosted := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u.Object["spec"].(map[string]any)["hostnames"] = []any{"app.example.com"}
		return u
	}
	cases := []struct {
		name     string
		objs     []runtime.Object
		gateway  string // the controller of Gateway "public"
		simulate string // the flows the model still sends
	}{{
		name: "an IngressRoute through its TraefikService",
		objs: []runtime.Object{ingressRoute(toTraefikService), traefikService(90, 10)},
	}, {
		name: "an IngressRoute to the apex Service of direct clients",
		objs: objects(podinfoServices(direct), []runtime.Object{ingressRoute(map[string]any{"name": "podinfo", "port": int64(80)})}),
	}, {
		name: "an IngressRoute without a Host is not Traefik's to serve here",
		objs: []runtime.Object{obj("traefik.io/v1alpha1", "IngressRoute", ns, "podinfo", map[string]any{
			"routes": []any{map[string]any{"match": "PathPrefix(`/`)", "services": []any{toTraefikService}}},
		}), traefikService(90, 10)},
		simulate: "traefik test/podinfo -> test/TraefikService/podinfo [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name:    "an HTTPRoute on Traefik's GatewayClass",
		objs:    []runtime.Object{hosted(httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 100, "podinfo-canary", 0))},
		gateway: TraefikGatewayController,
	}, {
		name:     "an HTTPRoute on Envoy Gateway's",
		objs:     []runtime.Object{hosted(httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 100, "podinfo-canary", 0))},
		gateway:  EnvoyGatewayController,
		simulate: "gatewayapi test/podinfo -> test/HTTPRoute/podinfo [podinfo-primary=100 podinfo-canary=0]",
	}, {
		name: "an Ingress of Traefik's class to the apex Service of direct clients",
		objs: objects(podinfoServices(direct), []runtime.Object{ingress("web", TraefikIngressClass, "app.example.com")}),
	}, {
		name:     "an Ingress of another class",
		objs:     objects(podinfoServices(direct), []runtime.Object{ingress("web", "haproxy", "app.example.com")}),
		simulate: "kubernetes test/podinfo -> test/Service/podinfo [podinfo=100]",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, tc.objs...)
			if tc.gateway != "" {
				f.addGateway("public", tc.gateway)
			}
			v := f.sim.view()
			routes := resolveRoutes(v)
			if len(routes) == 0 {
				t.Fatal("the model has no flow to begin with")
			}
			f.sim.cfg.ProxyAddress = "127.0.0.1:1"
			f.sim.takeProxiedFlows(f.now, v, routes)
			if got := describe(routes); got != tc.simulate {
				t.Errorf("simulated flows:\n%s\nwant:\n%s", got, tc.simulate)
			}
		})
	}
}
