package meshsim

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
)

// ingressRoute is the user's IngressRoute: one route to the given service entry.
func ingressRoute(service map[string]any) *unstructured.Unstructured {
	return obj("traefik.io/v1alpha1", "IngressRoute", ns, "podinfo", map[string]any{
		"entryPoints": []any{"web"},
		"routes": []any{map[string]any{
			"match": "Host(`app.example.com`)", "kind": "Rule",
			"services": []any{service},
		}},
	})
}

// traefikService is the generated weighted TraefikService podinfo.
func traefikService(primary, canary int64) *unstructured.Unstructured {
	svc := func(name string, w int64) map[string]any {
		return map[string]any{"name": name, "namespace": ns, "port": int64(9898), "weight": w}
	}
	return obj("traefik.io/v1alpha1", "TraefikService", ns, "podinfo", map[string]any{
		"weighted": map[string]any{"services": []any{svc("podinfo-primary", primary), svc("podinfo-canary", canary)}},
	})
}

var toTraefikService = map[string]any{"kind": "TraefikService", "name": "podinfo"}

func TestTraefikRoutes(t *testing.T) {
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "the user's IngressRoute straight to the apex Service",
		objs: []runtime.Object{ingressRoute(map[string]any{"name": "podinfo", "port": int64(9898)})},
		want: "traefik test/podinfo -> test/IngressRoute/podinfo [podinfo=1]",
	}, {
		name: "through the weighted TraefikService it names",
		objs: []runtime.Object{ingressRoute(toTraefikService), traefikService(90, 10)},
		want: "traefik test/podinfo -> test/TraefikService/podinfo [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name: "a TraefikService no IngressRoute names carries no load",
		objs: []runtime.Object{traefikService(90, 10)},
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

// The split, the canary's errors and its latency show in Traefik's service metrics under the
// labels the built-in queries select.
func TestTraefikMetrics(t *testing.T) {
	// 20 000 requests to the canary, for its p99 (see TestLatencyFromPodAnnotations).
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "2000"}),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "250"}),
		[]runtime.Object{ingressRoute(toTraefikService), traefikService(80, 20)})...)
	f.run(50)
	primary, canary := "test-podinfo-primary-9898@kubernetescrd", "test-podinfo-canary-9898@kubernetescrd"
	p, c := f.sum(MetricTraefikRequests, match("service="+primary)), f.sum(MetricTraefikRequests, match("service="+canary))
	if p/c < 3.5 || p/c > 4.5 {
		t.Fatalf("primary/canary requests %v/%v, want an 80/20 split", p, c)
	}
	if got := f.successRate(MetricTraefikRequests, "code", "service="+canary); got < 40 || got > 60 {
		t.Fatalf("canary success rate %v, want about 50", got)
	}
	f.wantP99("canary", f.p99(MetricTraefikDuration, "service="+canary)*1000, 250, inMs(TraefikBuckets), 0.2)
	// The built-in queries' service matcher selects the canary's label and no other.
	q, _ := registry.Builtin("traefik", "request-success-rate")
	for side, want := range map[string][2]string{"canary": {canary, primary}, "primary": {primary, canary}} {
		rendered := strings.NewReplacer("{{ namespace }}", ns, "{{ target }}", "podinfo", "{{ service }}", "podinfo", "{{ side }}", side).Replace(q)
		re := regexp.MustCompile(`service=~"([^"]+)"`).FindStringSubmatch(rendered)
		sel := regexp.MustCompile("^(?:" + re[1] + ")$")
		if !sel.MatchString(want[0]) || sel.MatchString(want[1]) {
			t.Fatalf("the built-in query's matcher %s (side %s) does not select %s alone", re[1], side, want[0])
		}
	}
	if f.invOut.String() != "" {
		t.Fatalf("invariant entries: %s", f.invOut.String())
	}
}

// Traefik creates a service's series at the first request of its code, as the real one does:
// a canary failing every request has series for code 500 and none for 200, and a backend that
// no request reached has none.
func TestTraefikSeriesFromTheFirstRequest(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "100"}),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "1"}),
		[]runtime.Object{ingressRoute(toTraefikService), traefikService(80, 20)})...)
	f.run(5)
	codes := func(service string) []string {
		var out []string
		for _, s := range f.series(MetricTraefikRequests, match("service="+service)) {
			out = append(out, s.labels["code"])
		}
		sort.Strings(out)
		return out
	}
	if got := codes("test-podinfo-canary-9898@kubernetescrd"); fmt.Sprint(got) != "[500]" {
		t.Errorf("the failing canary's series have codes %v, want [500]", got)
	}
	if got := codes("test-podinfo-primary-9898@kubernetescrd"); fmt.Sprint(got) != "[200]" {
		t.Errorf("the primary's series have codes %v, want [200]", got)
	}
	f.updateRouter(TraefikServiceGVR, traefikService(100, 0))
	f.run(5)
	if got := codes("test-podinfo-canary-9898@kubernetescrd"); fmt.Sprint(got) != "[500]" {
		t.Errorf("at weight 0 the canary's series are %v, want its [500] kept", got)
	}
}

// A mirroring TraefikService sends every request to the primary and copies the mirror's
// percent of them to the canary, which Traefik counts on the canary's service.
func TestTraefikMirroring(t *testing.T) {
	mirroring := obj("traefik.io/v1alpha1", "TraefikService", ns, "podinfo", map[string]any{
		"mirroring": map[string]any{"name": "podinfo-primary", "port": int64(9898), "mirrors": []any{
			map[string]any{"name": "podinfo-canary", "port": int64(9898), "percent": int64(50)},
		}},
	})
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{ingressRoute(toTraefikService), mirroring})...)
	f.run(20)
	p := f.sum(MetricTraefikRequests, match("service=test-podinfo-primary-9898@kubernetescrd"))
	c := f.sum(MetricTraefikRequests, match("service=test-podinfo-canary-9898@kubernetescrd"))
	if p < 350 || c/p < 0.45 || c/p > 0.55 {
		t.Fatalf("primary %v requests, canary %v copies; want about 400 and half of them", p, c)
	}
}

// A weighted service whose pods are not Ready answers 503, counted by Traefik and logged.
func TestTraefikNoReadyPods(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil),
		[]runtime.Object{ingressRoute(toTraefikService), traefikService(50, 50)})...)
	f.run(10)
	if got := f.sum(MetricTraefikRequests, match("service=test-podinfo-canary-9898@kubernetescrd", "code=503")); got < 80 {
		t.Fatalf("%v 503s on the canary, want about 100", got)
	}
	if !strings.Contains(f.invOut.String(), `"object":"TraefikService/podinfo"`) || !strings.Contains(f.invOut.String(), "traffic sent to Service test/podinfo-canary, which has no Ready pods") {
		t.Fatalf("invariant log: %s", f.invOut.String())
	}
}
