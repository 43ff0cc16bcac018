// Package routertest holds what the routers' tests share: fake API clients that answer as the
// API server does, assertions on routers and objects, and the release fixtures of each router.
// Only tests import it.
package routertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/alb"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/apisix"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/nginx"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// APISIXUserRoute is the user's ApisixRoute an apisix release names in route_ref.
const APISIXUserRoute = `
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

// APISIXSpec is an apisix release of podinfo on port 80.
var APISIXSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	Options: apisix.Options{RouteRef: &router.Ref{APIVersion: "apisix.apache.org/v2", Kind: "ApisixRoute", Name: "podinfo"}}}

// NginxUserIngress is the user's Ingress an nginx release names in ingress_ref: the apex
// podinfo for app.example.com, beside another path.
const NginxUserIngress = `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: podinfo-web
  namespace: test
  labels: {team: web}
  annotations:
    owner: alice
    nginx.ingress.kubernetes.io/proxy-body-size: 8m
    nginx.ingress.kubernetes.io/canary-by-header: x-user-set
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  ingressClassName: nginx
  tls: [{hosts: [app.example.com], secretName: app-tls}]
  rules:
  - host: app.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: podinfo, port: {number: 80}}}}
      - {path: /other, pathType: Prefix, backend: {service: {name: other, port: {number: 80}}}}
`

// NginxSpec is an nginx release of podinfo on port 80, beside Ingress podinfo-web.
var NginxSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	Options: nginx.Options{IngressRef: &router.Ref{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "podinfo-web"}}}

// ReadyPod is a Ready podinfo pod.
func ReadyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "test", Labels: map[string]string{"app": "podinfo"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// SimulateOneSecond runs the mesh simulator over the clients for one second of load and
// returns metric (a counter, or a histogram's count), by its label values labelNames joined
// with "/", leaving out zeros. It fails the test on any invariant the simulator logged (weights
// not summing to 100, no Ready pods).
func SimulateOneSecond(t *testing.T, c router.Clients, metric string, labelNames ...string) map[string]float64 {
	t.Helper()
	// Every router CRD is installed.
	disc := c.Kube.Discovery().(*fakediscovery.FakeDiscovery)
	byGV := map[string]*metav1.APIResourceList{}
	for _, gvr := range meshsim.RouterGVRs {
		gv := gvr.GroupVersion().String()
		if byGV[gv] == nil {
			byGV[gv] = &metav1.APIResourceList{GroupVersion: gv}
			disc.Resources = append(disc.Resources, byGV[gv])
		}
		byGV[gv].APIResources = append(byGV[gv].APIResources, metav1.APIResource{Name: gvr.Resource})
	}
	sim := meshsim.New(meshsim.Config{Kube: c.Kube, Dynamic: c.Dynamic, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := sim.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sim.Tick(start)
	sim.Tick(start.Add(time.Second))
	if inv := sim.Invariants(""); len(inv) > 0 {
		t.Fatalf("invariants broken: %+v", inv)
	}
	families, err := sim.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var values []string
			for _, name := range labelNames {
				values = append(values, labels[name])
			}
			v := m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			if v > 0 {
				out[strings.Join(values, "/")] += v
			}
		}
	}
	return out
}

// GlooSpec is a gloo release of podinfo on port 80.
var GlooSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80}

// GlooServices are the Services a gloo release's Upstreams point at.
func GlooServices() []runtime.Object {
	svc := func(name, app string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "test"},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": app}},
		}
	}
	return []runtime.Object{svc("podinfo-primary", "podinfo-primary"), svc("podinfo-canary", "podinfo")}
}

// GlooConfigUpstream is a user's Upstream whose settings the generated ones copy.
const GlooConfigUpstream = `
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata:
  name: config
  namespace: gloo-system
  labels: {tier: edge}
spec:
  connectionConfig: {maxRequestsPerConnection: 51}
  loadBalancerConfig:
    roundRobin:
      slowStartConfig: {minWeightPercent: 5, slowStartWindow: 10s}
  useHttp2: true
  static:
    hosts: [{addr: example.com, port: 80}]
`

// KnativeService is the user's Knative Service podinfo, whose primary (podinfo-00001) and
// canary (podinfo-00002) revisions a knative release pinned, with no traffic split yet.
const KnativeService = `
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: podinfo
  namespace: test
  annotations:
    canary-release.dev/primary-revision: podinfo-00001
    canary-release.dev/canary-revision: podinfo-00002
spec:
  template:
    spec:
      containers: [{image: "podinfo:2"}]
`

// ListKinds are the list kinds the fake dynamic client answers List with.
var ListKinds = map[schema.GroupVersionResource]string{
	router.TrafficSplitResource:   "TrafficSplitList",
	router.ApisixRouteResource:    "ApisixRouteList",
	router.UpstreamResource:       "UpstreamList",
	router.UpstreamGroupResource:  "UpstreamGroupList",
	router.RouteTableResource:     "RouteTableList",
	router.VirtualServiceResource: "VirtualServiceList",
	// Istio's VirtualService shares Gloo's list kind name, in another group.
	router.IstioVirtualServiceResource:  "VirtualServiceList",
	router.IstioDestinationRuleResource: "DestinationRuleList",
	router.HTTPRouteResource:            "HTTPRouteList",
	router.GatewayResource:              "GatewayList",
	meshsim.GatewayClassGVR:             "GatewayClassList",
	meshsim.TraefikServiceGVR:           "TraefikServiceList",
	meshsim.IngressRouteGVR:             "IngressRouteList",
	meshsim.HTTPProxyGVR:                "HTTPProxyList",
	meshsim.IngressGVR:                  "IngressList",
	meshsim.KnativeServiceGVR:           "ServiceList",
	meshsim.KnativeRevisionGVR:          "RevisionList",
}

// FakeClients returns clients whose dynamic side holds objs (YAML documents, numbers decoded
// as int64 like the API server does) and whose typed side holds kubeObjs.
func FakeClients(t *testing.T, objs []string, kubeObjs ...runtime.Object) router.Clients {
	t.Helper()
	var us []runtime.Object
	for _, doc := range objs {
		us = append(us, ParseYAML(t, doc))
	}
	return router.Clients{
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), ListKinds, us...),
		Kube:    kubefake.NewSimpleClientset(kubeObjs...),
	}
}

// ParseYAML decodes a YAML object as the API server would hold it.
func ParseYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{}
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// Get reads an object that must exist.
func Get(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return obj
}

// Exists reports whether an object exists.
func Exists(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, ns, name string) bool {
	t.Helper()
	obj, err := router.GetOptional(context.Background(), c.Dynamic, gvr, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return obj != nil
}

// SpecJSON is the object's spec as JSON, for exact shape comparisons.
func SpecJSON(t *testing.T, obj *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// CompactJSON normalises a hand-written JSON document.
func CompactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in test: %v", err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// WantErr fails unless err contains contains.
func WantErr(t *testing.T, err error, contains string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %v, want one containing %q", err, contains)
	}
}

// MustWeights fails unless r reads want back.
func MustWeights(t *testing.T, r router.Router, want router.Weights) {
	t.Helper()
	got, err := r.GetRoutes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("weights %+v, want %+v", got, want)
	}
}

// MustDrift fails unless r reports exactly want as drift.
func MustDrift(t *testing.T, r router.Router, want ...string) {
	t.Helper()
	got, err := r.Drift(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("drift:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Update writes obj through the fake dynamic client.
func Update(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// MustJSON is v as JSON.
func MustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// DeleteOpts are plain delete options.
var DeleteOpts = metav1.DeleteOptions{}

// IstioSpec is an istio release of podinfo on port 9898.
var IstioSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 9898}

// FullIstioSpec is IstioSpec with every Istio service option set.
func FullIstioSpec() router.Spec {
	s := IstioSpec
	yes := true
	s.Hosts = []string{"app.example.com"}
	s.Options = istio.Options{
		Gateways: []string{"public-gateway.istio-system.svc.cluster.local", "mesh"},
		Retries:  &istio.Retries{Attempts: 3, PerTryTimeout: "1s", RetryOn: "gateway-error,connect-failure,refused-stream"},
		Timeout:  "30s",
		Headers: &istio.Headers{
			Request:  &istio.HeaderOps{Add: map[string]string{"x-some-header": "value"}},
			Response: &istio.HeaderOps{Set: map[string]string{"x-frame-options": "DENY"}, Remove: []string{"x-envoy-upstream-service-time"}},
		},
		CorsPolicy: &istio.CorsPolicy{
			AllowOrigins: []istio.StringMatch{{Exact: "https://example.com"}, {Prefix: "https://dev."}},
			AllowMethods: []string{"GET", "POST"}, AllowHeaders: []string{"x-api-key"}, MaxAge: "24h", AllowCredentials: &yes,
		},
		TrafficPolicy: &istio.TrafficPolicy{TLSMode: "ISTIO_MUTUAL", LoadBalancer: "LEAST_REQUEST"},
	}
	return s
}

// OSMSpec is an osm release of podinfo on port 9898.
var OSMSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 9898}

// MustBeLeftBehind asserts what a hand-over leaves: test/podinfo with spec want, without the
// release labels, annotated note.
func MustBeLeftBehind(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, want, note string) {
	t.Helper()
	obj := Get(t, c, gvr, "test", "podinfo")
	if got := SpecJSON(t, obj); got != CompactJSON(t, want) {
		t.Errorf("%s spec %s\nwant %s", gvr.Resource, got, CompactJSON(t, want))
	}
	if l := obj.GetLabels(); l[router.LabelRelease] != "" || l[router.LabelManagedBy] != "" {
		t.Errorf("%s labels %v: the release labels must go", gvr.Resource, l)
	}
	if got := obj.GetAnnotations()[router.AnnotationLeftBehind]; got != note {
		t.Errorf("%s annotation %s=%q, want %q", gvr.Resource, router.AnnotationLeftBehind, got, note)
	}
}

// FakeDynamic is the fake behind c's dynamic client, for reactors.
func FakeDynamic(c router.Clients) *dynamicfake.FakeDynamicClient {
	return c.Dynamic.(*dynamicfake.FakeDynamicClient)
}

// EnforceResourceVersions makes the fake refuse an update of a gvr object whose
// resourceVersion is not the stored one, and bump it on every write, as the API server does:
// a router's held copy of an object is safe only because of that.
func EnforceResourceVersions(t *testing.T, c router.Clients, gvr schema.GroupVersionResource) {
	t.Helper()
	tracker := FakeDynamic(c).Tracker()
	version := 1
	FakeDynamic(c).PrependReactor("update", gvr.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		stored, err := tracker.Get(gvr, a.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		if got := stored.(*unstructured.Unstructured).GetResourceVersion(); got != obj.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), obj.GetName(), fmt.Errorf("resourceVersion %q is not %q", obj.GetResourceVersion(), got))
		}
		version++
		obj.SetResourceVersion(strconv.Itoa(version))
		return true, obj, tracker.Update(gvr, obj, a.GetNamespace())
	})
}

// FailFirst makes the first calls of verb on resource fail with errs, in turn, and lets the
// later ones through. It returns the number of calls seen so far.
func FailFirst(c router.Clients, verb, resource string, errs ...error) func() int {
	calls := 0
	FakeDynamic(c).PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= len(errs) {
			return true, nil, errs[calls-1]
		}
		return false, nil, nil
	})
	return func() int { return calls }
}

// SkipperUserIngress is the user's Ingress a skipper release names in ingress_ref: a path to
// the apex Service podinfo and one to another Service.
const SkipperUserIngress = `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: podinfo
  namespace: test
  labels: {team: web}
  annotations:
    kubernetes.io/ingress.class: skipper
    zalando.org/skipper-predicate: Method("GET")
    kubectl.kubernetes.io/last-applied-configuration: "{}"
spec:
  rules:
  - host: app.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {service: {name: podinfo, port: {number: 80}}}
      - path: /other
        pathType: Prefix
        backend: {service: {name: other, port: {number: 80}}}
`

// ALBUserIngress is the user's Ingress an alb release names in ingress_ref: IngressGroup demo,
// one path to the apex Service.
const ALBUserIngress = `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: podinfo
  namespace: test
  annotations:
    alb.ingress.kubernetes.io/group.name: demo
spec:
  ingressClassName: alb
  rules:
  - host: app.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: podinfo
            port:
              number: 80
`

// ALBSpec is an alb release of podinfo on port 80.
var ALBSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	Options: alb.Options{IngressRef: &router.Ref{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "podinfo"}}}
