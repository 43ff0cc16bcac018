package meshsim

import (
	"math"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// userIngress is the user's Ingress podinfo-web for app.example.com, to the apex Service.
func userIngress(name, service string, created time.Time, annotations map[string]any) *unstructured.Unstructured {
	u := obj("networking.k8s.io/v1", "Ingress", ns, name, map[string]any{
		"ingressClassName": "nginx",
		"rules": []any{map[string]any{"host": "app.example.com", "http": map[string]any{"paths": []any{map[string]any{
			"path": "/", "pathType": "Prefix",
			"backend": map[string]any{"service": map[string]any{"name": service, "port": map[string]any{"number": int64(80)}}},
		}}}}},
	})
	u.SetCreationTimestamp(metav1.NewTime(created))
	if annotations != nil {
		_ = unstructured.SetNestedField(u.Object, annotations, "metadata", "annotations")
	}
	return u
}

var (
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 = t0.Add(time.Minute)
)

// canaryIngress is the release's canary Ingress podinfo-web-canary with the given annotations
// (names without the nginx.ingress.kubernetes.io/ prefix).
func canaryIngress(annotations map[string]string) *unstructured.Unstructured {
	a := map[string]any{}
	for k, v := range annotations {
		a[nginxAnnotationPrefix+k] = v
	}
	return userIngress("podinfo-web-canary", "podinfo-canary", t1, a)
}

func TestNginxRoutes(t *testing.T) {
	tagged := map[string]string{AnnotationABHeader: "x-canary=insider"}
	cookie := map[string]string{AnnotationABHeader: "cookie=canary=always"}
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "the user's Ingress alone",
		objs: append(podinfoServices(nil), userIngress("podinfo-web", "podinfo", t0, nil)),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web [podinfo=1]",
	}, {
		name: "no location leads to a Service that does not exist",
		objs: []runtime.Object{userIngress("podinfo-web", "podinfo", t0, nil)},
		want: "",
	}, {
		name: "the canary Ingress's weight splits the location",
		objs: append(podinfoServices(nil), userIngress("podinfo-web", "podinfo", t0, nil), canaryIngress(map[string]string{"canary": "true", "canary-weight": "10"})),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=90 podinfo-canary=10]",
	}, {
		name: "no canary-weight is 0",
		objs: append(podinfoServices(nil), userIngress("podinfo-web", "podinfo", t0, nil), canaryIngress(map[string]string{"canary": "true"})),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=100 podinfo-canary=0]",
	}, {
		name: "a copy that is no canary loses to the older Ingress",
		objs: append(podinfoServices(nil), userIngress("podinfo-web", "podinfo", t0, nil), canaryIngress(map[string]string{"canary": "false", "canary-weight": "50"})),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web [podinfo=1]",
	}, {
		name: "an Ingress of another class is not nginx's",
		objs: append(podinfoServices(nil), func() *unstructured.Unstructured {
			u := userIngress("podinfo-web", "podinfo", t0, nil)
			_ = unstructured.SetNestedField(u.Object, "haproxy", "spec", "ingressClassName")
			return u
		}()),
		want: "",
	}, {
		name: "canary-weight-total scales the weight; a canary of another namespace is ignored",
		objs: append(podinfoServices(nil), userIngress("podinfo-web", "podinfo", t0, nil),
			canaryIngress(map[string]string{"canary": "true", "canary-weight": "10", "canary-weight-total": "50"}),
			func() *unstructured.Unstructured {
				u := canaryIngress(map[string]string{"canary": "true", "canary-weight": "90"})
				u.SetNamespace("other")
				u.SetCreationTimestamp(metav1.NewTime(t0))
				return u
			}()),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=80 podinfo-canary=20]",
	}, {
		name: "the header takes the tagged requests to the canary",
		objs: append(podinfoServices(tagged), userIngress("podinfo-web", "podinfo", t0, nil),
			canaryIngress(map[string]string{"canary": "true", "canary-weight": "0", "canary-by-header": "X-Canary", "canary-by-header-value": "insider"})),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=100 podinfo-canary=0]\n" +
			"nginx+ab test/podinfo -> test/Ingress/podinfo-web-canary [podinfo-canary=1]",
	}, {
		name: "a header pattern that does not match leaves them to the weight",
		objs: append(podinfoServices(tagged), userIngress("podinfo-web", "podinfo", t0, nil),
			canaryIngress(map[string]string{"canary": "true", "canary-weight": "0", "canary-by-header": "x-canary", "canary-by-header-pattern": "^out"})),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=100 podinfo-canary=0]\n" +
			"nginx+ab test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=100 podinfo-canary=0]",
	}, {
		name: "a cookie set to always",
		objs: append(podinfoServices(cookie), userIngress("podinfo-web", "podinfo", t0, nil),
			canaryIngress(map[string]string{"canary": "true", "canary-weight": "20", "canary-by-cookie": "canary"})),
		want: "nginx test/podinfo -> test/Ingress/podinfo-web-canary [podinfo=80 podinfo-canary=20]\n" +
			"nginx+ab test/podinfo -> test/Ingress/podinfo-web-canary [podinfo-canary=1]",
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

// The controller's metrics name the user's Ingress and, for the requests the canary took, the
// canary upstream, which the built-in queries select; the duration's mean is the mean of the
// pod's lognormal (latency.go), which 20 000 requests read within a few percent.
func TestNginxMetrics(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "2000"}),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "250"}),
		[]runtime.Object{userIngress("podinfo-web", "podinfo", t0, nil), canaryIngress(map[string]string{"canary": "true", "canary-weight": "20"})})...)
	f.run(50)
	sel := []string{"namespace=test", "ingress=podinfo-web"}
	c := f.sum(MetricNginxRequests, match(append(sel, "canary=test-podinfo-canary-80")...))
	p := f.sum(MetricNginxRequests, match(append(sel, "canary=", "service=podinfo")...))
	if p/c < 3.5 || p/c > 4.5 {
		t.Fatalf("primary/canary requests %v/%v, want an 80/20 split", p, c)
	}
	if got := f.successRate(MetricNginxRequests, "status", append(sel, "canary!=")...); got < 40 || got > 60 {
		t.Fatalf("canary success rate %v, want about 50", got)
	}
	var sum, count float64
	for _, s := range f.series(MetricNginxDuration, match(append(sel, "canary!=")...)) {
		sum += s.metric.GetHistogram().GetSampleSum()
		count += float64(s.metric.GetHistogram().GetSampleCount())
	}
	if mean, want := sum/count*1000, steadyMean(250); math.Abs(mean-want) > 0.05*want {
		t.Fatalf("canary mean duration %v ms, want %.1f (the mean of a pod whose p99 is 250 ms) within 5%%", mean, want)
	}
	if strings.TrimSpace(f.invOut.String()) != "" {
		t.Fatalf("invariant entries: %s", f.invOut.String())
	}
}
