package meshsim

import (
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func albPath(service, port string) map[string]any {
	backend := map[string]any{"name": service, "port": map[string]any{"name": port}}
	return map[string]any{"path": "/", "pathType": "Prefix", "backend": map[string]any{"service": backend}}
}

// albIngress is an Ingress of class alb in IngressGroup demo with the given annotations and paths.
func albIngress(name string, annotations map[string]any, paths ...any) *unstructured.Unstructured {
	u := obj("networking.k8s.io/v1", "Ingress", ns, name, map[string]any{
		"ingressClassName": "alb",
		"rules":            []any{map[string]any{"host": "app.example.com", "http": map[string]any{"paths": paths}}},
	})
	annotations["alb.ingress.kubernetes.io/group.name"] = "demo"
	_ = unstructured.SetNestedField(u.Object, annotations, "metadata", "annotations")
	return u
}

func albForward(primary, canary int) string {
	return `{"type":"forward","forwardConfig":{"targetGroups":[{"serviceName":"podinfo-primary","servicePort":"9898","weight":` +
		strconv.Itoa(primary) + `},{"serviceName":"podinfo-canary","servicePort":"9898","weight":` + strconv.Itoa(canary) + `}]}}`
}

// userIngress sends the apex straight to its Service; albGeneratedIngress, one group.order lower,
// through the forward action podinfo, and with ab an A/B path on x-canary ahead of it.
func albUserIngress() *unstructured.Unstructured {
	return albIngress("podinfo", map[string]any{}, albPath("podinfo", "http"))
}

func albGeneratedIngress(primary, canary int, ab bool) *unstructured.Unstructured {
	ann := map[string]any{
		"alb.ingress.kubernetes.io/group.order":     "-1",
		"alb.ingress.kubernetes.io/actions.podinfo": albForward(primary, canary),
	}
	paths := []any{albPath("podinfo", "use-annotation")}
	if ab {
		ann["alb.ingress.kubernetes.io/actions.podinfo-ab-0"] = albForward(0, 100)
		ann["alb.ingress.kubernetes.io/conditions.podinfo-ab-0"] = `[{"field":"http-header","httpHeaderConfig":{"httpHeaderName":"X-Canary","values":["INSIDER"]}}]`
		paths = append([]any{albPath("podinfo-ab-0", "use-annotation")}, paths...)
	}
	return albIngress("podinfo-podinfo-canary", ann, paths...)
}

func TestALBRoutes(t *testing.T) {
	tagged := map[string]string{AnnotationABHeader: "x-canary=insider"}
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "the user's Ingress alone sends the apex to its Service",
		objs: append(podinfoServices(nil), albUserIngress()),
		want: "alb test/podinfo -> test/Ingress/podinfo [podinfo=1]",
	}, {
		name: "the generated Ingress, one order lower, takes the load first",
		objs: append(podinfoServices(nil), albUserIngress(), albGeneratedIngress(90, 10, false)),
		want: "alb test/podinfo -> test/Ingress/podinfo-podinfo-canary [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name: "the tagged requests take the A/B path, whatever the header value's case",
		objs: append(podinfoServices(tagged), albUserIngress(), albGeneratedIngress(100, 0, true)),
		want: "alb test/podinfo -> test/Ingress/podinfo-podinfo-canary [podinfo-primary=100 podinfo-canary=0]\n" +
			"alb+ab test/podinfo -> test/Ingress/podinfo-podinfo-canary [podinfo-primary=0 podinfo-canary=100]",
	}, {
		name: "no rule leads to a missing Service",
		objs: []runtime.Object{albUserIngress()},
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

// The stand-ins for CloudWatch's metrics count per target group <namespace>/<service>:<port>.
func TestALBMetrics(t *testing.T) {
	// 100 000 requests to the canary, for its p99 at a bucket bound (see TestLatencyFromPodAnnotations).
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "10000"}),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "250"}),
		[]runtime.Object{albUserIngress(), albGeneratedIngress(80, 20, false)})...)
	f.run(50)
	p := f.sum(MetricALBRequests, match("target_group=test/podinfo-primary:9898"))
	c := f.sum(MetricALBRequests, match("target_group=test/podinfo-canary:9898"))
	if p/c < 3.5 || p/c > 4.5 {
		t.Fatalf("primary/canary requests %v/%v, want an 80/20 split", p, c)
	}
	if got := f.successRate(MetricALBRequests, "code", "target_group=test/podinfo-canary:9898"); got < 40 || got > 60 {
		t.Fatalf("canary success rate %v, want about 50", got)
	}
	f.wantP99("canary", f.p99(MetricALBResponseTime, "target_group=test/podinfo-canary:9898")*1000, 250, inMs(albBuckets), 0.2)
	if strings.TrimSpace(f.invOut.String()) != "" {
		t.Fatalf("invariant entries: %s", f.invOut.String())
	}
}
