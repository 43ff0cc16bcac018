package meshsim

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// skipperIngress is an Ingress of class skipper for app.example.com whose path / leads to
// services, with the given annotations.
func skipperIngress(name string, annotations map[string]string, services ...string) *unstructured.Unstructured {
	var paths []any
	for _, s := range services {
		paths = append(paths, map[string]any{"path": "/", "pathType": "Prefix",
			"backend": map[string]any{"service": map[string]any{"name": s, "port": map[string]any{"number": int64(80)}}}})
	}
	ing := obj("networking.k8s.io/v1", "Ingress", ns, name, map[string]any{
		"ingressClassName": "skipper",
		"rules":            []any{map[string]any{"host": "app.example.com", "http": map[string]any{"paths": paths}}},
	})
	ing.SetAnnotations(annotations)
	return ing
}

// generatedIngress is the release's podinfo-canary, as the skipper router writes it.
func generatedIngress(weights, predicate string) *unstructured.Unstructured {
	return skipperIngress("podinfo-canary", map[string]string{
		"zalando.org/backend-weights": weights, "zalando.org/skipper-predicate": predicate,
	}, "podinfo-primary", "podinfo-canary")
}

func TestSkipperRoutes(t *testing.T) {
	user := skipperIngress("podinfo", nil, "podinfo")
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "the user's Ingress alone leads to the apex",
		objs: append(podinfoServices(nil), user),
		want: "skipper test/podinfo -> test/Ingress/podinfo [podinfo=1]",
	}, {
		name: "a path to a Service that does not exist makes no route",
		objs: []runtime.Object{user},
		want: "",
	}, {
		name: "the generated Ingress's Weight(100) wins, split by backend-weights",
		objs: append(podinfoServices(nil), user, generatedIngress(`{"podinfo-canary":10,"podinfo-primary":90}`, `Weight(100) && Method("GET")`)),
		want: "skipper test/podinfo -> test/Ingress/podinfo-canary [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name: "False() turns the generated routes off",
		objs: append(podinfoServices(nil), user, generatedIngress(`{"podinfo-canary":0,"podinfo-primary":100}`, `False() && Method("GET")`)),
		want: "skipper test/podinfo -> test/Ingress/podinfo [podinfo=1]",
	}, {
		name: "an Ingress of another class is not Skipper's",
		objs: append(podinfoServices(nil), func() *unstructured.Unstructured {
			u := skipperIngress("podinfo", nil, "podinfo")
			u.Object["spec"].(map[string]any)["ingressClassName"] = "haproxy"
			return u
		}()),
		want: "",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, tc.objs...)
			if got := describe(resolveRoutes(f.sim.view())); got != tc.want {
				t.Fatalf("routes:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// Skipper's route metrics carry the route id kube_<ns>__<ingress>__<host>__<path>__<service>,
// which Flagger's queries select; the failing canary shows in the +Inf bucket by code.
func TestSkipperMetrics(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "250"}),
		[]runtime.Object{skipperIngress("podinfo", nil, "podinfo"),
			generatedIngress(`{"podinfo-canary":20,"podinfo-primary":80}`, "Weight(100)")})...)
	f.run(50)
	count := func(name string, sel ...string) float64 {
		total := 0.0
		for _, s := range f.series(name, match(sel...)) {
			total += float64(s.metric.GetHistogram().GetSampleCount())
		}
		return total
	}
	canary := "route=kube_test__podinfo_canary__app_example_com_____podinfo_canary"
	p := count(MetricSkipperResponse, "route=kube_test__podinfo_canary__app_example_com_____podinfo_primary")
	c := count(MetricSkipperResponse, canary)
	if c == 0 || p/c < 3.5 || p/c > 4.5 {
		t.Fatalf("primary/canary requests %v/%v, want an 80/20 split", p, c)
	}
	if ok := count(MetricSkipperResponse, canary, "code!~5*"); ok/c < 0.4 || ok/c > 0.6 {
		t.Fatalf("canary success rate %v, want about 50%%", ok/c*100)
	}
	if served := count(MetricSkipperServeRoute, canary); served != c {
		t.Fatalf("served %v canary requests, responded %v", served, c)
	}
	if n := count(MetricSkipperResponse, "route=kube_test__podinfo__app_example_com_____podinfo"); n != 0 {
		t.Fatalf("the user's route, which the generated one outweighs, served %v requests", n)
	}
	if strings.TrimSpace(f.invOut.String()) != "" {
		t.Fatalf("invariant entries: %s", f.invOut.String())
	}
}
