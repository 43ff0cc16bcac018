package meshsim

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// fixture is a Simulator over fake clients with a clock the test moves.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	kube   *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient
	sim    *Simulator
	invOut *bytes.Buffer
	now    time.Time
}

// newFixture starts a simulator over the given objects, with the router CRDs in installed served.
func newFixture(t *testing.T, installed []schema.GroupVersionResource, objs ...runtime.Object) *fixture {
	t.Helper()
	var typed, dynamic []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*unstructured.Unstructured); ok {
			dynamic = append(dynamic, o)
		} else {
			typed = append(typed, o)
		}
	}
	f := &fixture{
		t:      t,
		ctx:    t.Context(),
		kube:   fake.NewClientset(typed...),
		dyn:    dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), ListKinds, dynamic...),
		invOut: &bytes.Buffer{},
		now:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	f.install(installed...)
	f.sim = New(Config{
		Kube: f.kube, Dynamic: f.dyn, InvariantLog: f.invOut,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Seed:   fixtureSeed(t),
	})
	if err := f.sim.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.waitWatching(installed)
	return f
}

// fixtureSeed is the simulator's seed: CANARY_MESHSIM_SEED, 0 when unset. A latency assertion
// must hold for any seed, not for the one it was written with.
func fixtureSeed(t *testing.T) uint64 {
	raw := os.Getenv("CANARY_MESHSIM_SEED")
	if raw == "" {
		return 0
	}
	seed, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		t.Fatalf("CANARY_MESHSIM_SEED=%q: %v", raw, err)
	}
	return seed
}

// install makes discovery report the given router resources as served.
func (f *fixture) install(gvrs ...schema.GroupVersionResource) {
	disc := f.kube.Discovery().(*fakediscovery.FakeDiscovery)
	for _, gvr := range gvrs {
		resource := metav1.APIResource{Name: gvr.Resource, Namespaced: true}
		found := false
		for _, list := range disc.Resources {
			if list.GroupVersion == gvr.GroupVersion().String() {
				list.APIResources = append(list.APIResources, resource)
				found = true
			}
		}
		if !found {
			disc.Resources = append(disc.Resources, &metav1.APIResourceList{
				GroupVersion: gvr.GroupVersion().String(), APIResources: []metav1.APIResource{resource},
			})
		}
	}
}

// waitWatching waits until every informer has its watch open, so later writes are not missed.
func (f *fixture) waitWatching(installed []schema.GroupVersionResource) {
	f.t.Helper()
	want := map[string]bool{"services": true, "pods": true, "replicasets": true}
	for _, gvr := range installed {
		want[gvr.Resource] = true
	}
	f.waitFor("informers watching", func() bool {
		seen := map[string]bool{}
		for _, a := range append(f.kube.Actions(), f.dyn.Actions()...) {
			if a.GetVerb() == "watch" {
				seen[a.GetResource().Resource] = true
			}
		}
		for r := range want {
			if !seen[r] {
				return false
			}
		}
		return true
	})
}

func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		f.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// run ticks once a second for the given seconds (the first tick of a fixture only starts the clock).
func (f *fixture) run(seconds int) {
	if f.sim.lastTick.IsZero() {
		f.sim.Tick(f.now)
	}
	for range seconds {
		f.now = f.now.Add(time.Second)
		f.sim.Tick(f.now)
	}
}

// updateRouter replaces a router object's spec and waits until the simulator's cache has it.
func (f *fixture) updateRouter(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	f.t.Helper()
	c := f.dyn.Resource(gvr).Namespace(u.GetNamespace())
	cur, err := c.Get(f.ctx, u.GetName(), metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cur.Object["spec"] = u.Object["spec"]
	if _, err := c.Update(f.ctx, cur, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.waitFor("cache sees "+u.GetName(), func() bool {
		got := f.sim.view().get(gvr, u.GetNamespace(), u.GetName())
		return got != nil && reflect.DeepEqual(got.Object["spec"], u.Object["spec"])
	})
}

// ---- objects ----

const ns = "test"

func service(name string, selector, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec:       corev1.ServiceSpec{Selector: selector},
	}
}

// podinfoServices are the apex, primary and canary Services of app podinfo, as Flagger makes them.
func podinfoServices(apexAnnotations map[string]string) []runtime.Object {
	return []runtime.Object{
		service("podinfo", map[string]string{"app": "podinfo-primary"}, apexAnnotations),
		service("podinfo-primary", map[string]string{"app": "podinfo-primary"}, nil),
		service("podinfo-canary", map[string]string{"app": "podinfo"}, nil),
	}
}

// deployment returns the ReplicaSet and pods of a Deployment whose pods carry label app=<name>.
func deployment(name string, replicas int, ready bool, annotations map[string]string) []runtime.Object {
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name + "-5d8f", UID: types.UID("rs-" + name),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: "d", Controller: ptr.To(true)}},
	}}
	out := []runtime.Object{rs}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range replicas {
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: fmt.Sprintf("%s-5d8f-%d", name, i),
				Labels: map[string]string{"app": name}, Annotations: annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: "rs", Controller: ptr.To(true)}},
			},
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.%d.%d", len(name), i+1),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
			},
		})
	}
	return out
}

func obj(apiVersion, kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"namespace": namespace, "name": name},
		"spec":     spec,
	}}
}

// trafficSplit lists backends as name, weight pairs.
func trafficSplit(name, apex string, backends ...any) *unstructured.Unstructured {
	var list []any
	for i := 0; i < len(backends); i += 2 {
		list = append(list, map[string]any{"service": backends[i], "weight": int64(backends[i+1].(int))})
	}
	return obj("split.smi-spec.io/v1alpha2", "TrafficSplit", ns, name, map[string]any{"service": apex, "backends": list})
}

// apisixRoute has one rule "method"; backends are name, weight pairs (weight -1 leaves it out).
func apisixRoute(name string, priority int, backends ...any) *unstructured.Unstructured {
	var list []any
	for i := 0; i < len(backends); i += 2 {
		b := map[string]any{"serviceName": backends[i], "servicePort": int64(80)}
		if w := backends[i+1].(int); w >= 0 {
			b["weight"] = int64(w)
		}
		list = append(list, b)
	}
	rule := map[string]any{
		"name":     "method",
		"match":    map[string]any{"hosts": []any{"app.example.com"}, "methods": []any{"GET"}, "paths": []any{"/*"}},
		"backends": list,
	}
	if priority != 0 {
		rule["priority"] = int64(priority)
	}
	return obj("apisix.apache.org/v2", "ApisixRoute", ns, name, map[string]any{"http": []any{rule}})
}

func upstream(name, svc string) *unstructured.Unstructured {
	return obj("gloo.solo.io/v1", "Upstream", ns, name, map[string]any{
		"kube": map[string]any{"serviceName": svc, "serviceNamespace": ns, "servicePort": int64(80)},
	})
}

// destinations lists upstream names and weights (-1 leaves the weight out, as Gloo does for 0).
func destinations(pairs ...any) []any {
	var list []any
	for i := 0; i < len(pairs); i += 2 {
		d := map[string]any{"destination": map[string]any{"upstream": map[string]any{"name": pairs[i], "namespace": ns}}}
		if w := pairs[i+1].(int); w >= 0 {
			d["weight"] = int64(w)
		}
		list = append(list, d)
	}
	return list
}

func routeTable(name string, dests []any) *unstructured.Unstructured {
	return obj("gateway.solo.io/v1", "RouteTable", ns, name, map[string]any{"routes": []any{
		map[string]any{"inheritablePathMatchers": true, "routeAction": map[string]any{"multi": map[string]any{"destinations": dests}}},
	}})
}

func virtualService(route map[string]any) *unstructured.Unstructured {
	return obj("gateway.solo.io/v1", "VirtualService", "gloo-system", "podinfo", map[string]any{
		"virtualHost": map[string]any{"domains": []any{"app.example.com"}, "routes": []any{route}},
	})
}

const (
	primaryUpstream = "test-podinfo-primaryupstream-80"
	canaryUpstream  = "test-podinfo-canaryupstream-80"
)

func glooUpstreams() []runtime.Object {
	return []runtime.Object{upstream(primaryUpstream, "podinfo-primary"), upstream(canaryUpstream, "podinfo-canary")}
}

func objects(groups ...[]runtime.Object) []runtime.Object {
	var out []runtime.Object
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// ---- reading the registry the way PromQL would ----

// match selects series: "label=value", "label!=value", "label=~prefix*" (trailing * only),
// or "label!~5*" (label does not start with prefix).
func match(sel ...string) func(map[string]string) bool {
	return func(l map[string]string) bool {
		for _, s := range sel {
			var ok bool
			switch {
			case strings.Contains(s, "!~"):
				k, v, _ := strings.Cut(s, "!~")
				ok = !strings.HasPrefix(l[k], strings.TrimSuffix(v, "*"))
			case strings.Contains(s, "=~"):
				k, v, _ := strings.Cut(s, "=~")
				ok = strings.HasPrefix(l[k], strings.TrimSuffix(v, "*"))
			case strings.Contains(s, "!="):
				k, v, _ := strings.Cut(s, "!=")
				ok = l[k] != v
			default:
				k, v, _ := strings.Cut(s, "=")
				ok = l[k] == v
			}
			if !ok {
				return false
			}
		}
		return true
	}
}

type series struct {
	labels map[string]string
	metric *dto.Metric
}

func (f *fixture) series(name string, sel func(map[string]string) bool) []series {
	f.t.Helper()
	mfs, err := f.sim.Registry().Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	var out []series
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if sel == nil || sel(l) {
				out = append(out, series{labels: l, metric: m})
			}
		}
	}
	return out
}

// sum adds the counters that match, like sum(metric{...}).
func (f *fixture) sum(name string, sel func(map[string]string) bool) float64 {
	total := 0.0
	for _, s := range f.series(name, sel) {
		total += s.metric.GetCounter().GetValue()
	}
	return total
}

// successRate is the built-in success-rate query over counter increases: non-5xx / all * 100.
func (f *fixture) successRate(name, codeLabel string, sel ...string) float64 {
	all := f.sum(name, match(sel...))
	ok := f.sum(name, match(append(sel, codeLabel+"!~5*")...))
	return ok / all * 100
}

// p99 is histogram_quantile(0.99, sum(metric_bucket{...}) by (le)).
func (f *fixture) p99(name string, sel ...string) float64 {
	var bounds, counts []float64
	for _, s := range f.series(name, match(sel...)) {
		for i, b := range s.metric.GetHistogram().GetBucket() {
			if len(bounds) <= i {
				bounds = append(bounds, b.GetUpperBound())
				counts = append(counts, 0)
			}
			counts[i] += float64(b.GetCumulativeCount())
		}
		if len(bounds) > 0 && !math.IsInf(bounds[len(bounds)-1], 1) {
			bounds = append(bounds, math.Inf(1))
			counts = append(counts, 0)
		}
		counts[len(counts)-1] += float64(s.metric.GetHistogram().GetSampleCount())
	}
	return histogramQuantile(0.99, bounds, counts)
}

// wantP99 checks a p99 read from a histogram with buckets (ms) against what that histogram
// reads for a pod whose latency annotation (its p99) is latencyMs: steadyP99, within tol, a
// share of it. The window must hold enough requests for the top 1 % to be many.
func (f *fixture) wantP99(what string, got, latencyMs float64, buckets []float64, tol float64) {
	f.t.Helper()
	if want := steadyP99(latencyMs, buckets); math.Abs(got-want) > tol*want {
		f.t.Errorf("%s: p99 = %.1f ms, want %.1f ms within %g%% (what the histogram reads for a p99 of %g ms)", what, got, want, 100*tol, latencyMs)
	}
}

// histogramQuantile is Prometheus' bucketQuantile: upper bounds end with +Inf, counts cumulative.
func histogramQuantile(q float64, upper, cumulative []float64) float64 {
	n := len(upper)
	if n < 2 || cumulative[n-1] == 0 {
		return math.NaN()
	}
	rank := q * cumulative[n-1]
	b := sort.Search(n-1, func(i int) bool { return cumulative[i] >= rank })
	if b == n-1 {
		return upper[n-2]
	}
	if b == 0 && upper[0] <= 0 {
		return upper[0]
	}
	start, end, count := 0.0, upper[b], cumulative[b]
	if b > 0 {
		start = upper[b-1]
		count -= cumulative[b-1]
		rank -= cumulative[b-1]
	}
	return start + (end-start)*(rank/count)
}
