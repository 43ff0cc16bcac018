package conformance

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/router"

	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

const leftBehindNote = "destroyed canary_release podinfo-release; delete this object after repointing your VirtualService"

// mustBeHandedOver asserts the state Finalize leaves: the weighted object podinfo with spec
// want, no release labels and the left-behind note; Upstream test-podinfo-80 on the apex
// Service; no generated Upstreams.
func mustBeHandedOver(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, want string) {
	t.Helper()
	mustBeLeftBehind(t, c, gvr, want, leftBehindNote)
	up := get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	kube, _, _ := unstructured.NestedMap(up.Object, "spec", "kube")
	if got, want := mustJSON(t, kube), `{"serviceName":"podinfo","serviceNamespace":"test","servicePort":80}`; got != want {
		t.Errorf("Upstream test-podinfo-80 spec.kube %s, want %s", got, want)
	}
	if up.GetLabels()[router.LabelRelease] != "" || !strings.HasPrefix(up.GetAnnotations()[router.AnnotationLeftBehind], "destroyed canary_release podinfo-release; ") {
		t.Errorf("Upstream test-podinfo-80 labels %v annotations %v", up.GetLabels(), up.GetAnnotations())
	}
	for _, name := range []string{"test-podinfo-primaryupstream-80", "test-podinfo-canaryupstream-80"} {
		if exists(t, c, router.UpstreamResource, "test", name) {
			t.Errorf("Upstream %s still exists", name)
		}
	}
}

// glooAt80_20 returns a reconciled Gloo router of the given mode at primary=80 canary=20.
func glooAt80_20(t *testing.T, mode string, objs []string, kubeObjs ...runtime.Object) (router.Clients, router.Router) {
	t.Helper()
	return glooAt(t, mode, router.Weights{Primary: 80, Canary: 20}, objs, kubeObjs...)
}

// glooAt returns a reconciled Gloo router of the given mode at the given weights.
func glooAt(t *testing.T, mode string, w router.Weights, objs []string, kubeObjs ...runtime.Object) (router.Clients, router.Router) {
	t.Helper()
	ctx := context.Background()
	c := fakeClients(t, objs, append(glooServices(), kubeObjs...)...)
	s := glooSpec
	s.GlooMode = mode
	r, _ := New("gloo", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.SetRoutes(ctx, w); err != nil {
		t.Fatal(err)
	}
	return c, r
}

func TestGlooFinalizeIsIdempotent(t *testing.T) {
	ctx := context.Background()
	c, r := glooAt80_20(t, router.GlooModeRouteTable, nil)
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	before := get(t, c, router.RouteTableResource, "test", "podinfo").GetResourceVersion()
	if err := r.Finalize(ctx); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
	if after := get(t, c, router.RouteTableResource, "test", "podinfo").GetResourceVersion(); after != before {
		t.Fatal("the second Finalize rewrote the left-behind RouteTable")
	}
}

// The generated Upstreams go only after the RouteTable no longer names them.
func TestGlooFinalizeOrder(t *testing.T) {
	c, r := glooAt80_20(t, router.GlooModeRouteTable, nil)
	fakeDynamic(c).ClearActions()
	if err := r.Finalize(context.Background()); err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, a := range fakeDynamic(c).Actions() {
		if a.GetVerb() != "get" {
			writes = append(writes, a.GetVerb()+" "+a.GetResource().Resource+" "+name(a))
		}
	}
	want := "create upstreams test-podinfo-80, update routetables podinfo, " +
		"delete upstreams test-podinfo-primaryupstream-80, delete upstreams test-podinfo-canaryupstream-80"
	if got := strings.Join(writes, ", "); got != want {
		t.Fatalf("writes: %s\nwant:   %s", got, want)
	}
}

func name(a k8stesting.Action) string {
	switch a := a.(type) {
	case k8stesting.CreateAction: // and UpdateAction, which has the same methods
		return a.GetObject().(*unstructured.Unstructured).GetName()
	case k8stesting.DeleteAction:
		return a.GetName()
	}
	return ""
}

func TestGlooFinalizeKeepsUpstreamsWhenTheHandOverFails(t *testing.T) {
	c, r := glooAt80_20(t, router.GlooModeRouteTable, nil)
	failFirst(c, "update", "routetables", errForbidden)
	err := r.Finalize(context.Background())
	wantErr(t, err, "handing RouteTable test/podinfo over to Service test/podinfo: updating RouteTable test/podinfo: ")
	mustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	for _, name := range []string{"test-podinfo-primaryupstream-80", "test-podinfo-canaryupstream-80"} {
		if !exists(t, c, router.UpstreamResource, "test", name) {
			t.Errorf("Upstream %s deleted while the RouteTable still names it", name)
		}
	}
}

// The rewritten object the API server answers with is checked like SetRoutes' weights.
func TestGlooFinalizeVerifiesTheHandOver(t *testing.T) {
	c, r := glooAt80_20(t, router.GlooModeRouteTable, nil)
	stale := get(t, c, router.RouteTableResource, "test", "podinfo")
	fakeDynamic(c).PrependReactor("update", "routetables", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, stale, nil
	})
	wantErr(t, r.Finalize(context.Background()), "RouteTable test/podinfo: wrote a single destination test-podinfo-80 "+
		"but the API server holds destinations [test-podinfo-primaryupstream-80 test-podinfo-canaryupstream-80]")
	if !exists(t, c, router.UpstreamResource, "test", "test-podinfo-primaryupstream-80") {
		t.Fatal("the primary Upstream was deleted")
	}
}

func TestGlooFinalizeKeepsUpstreamSettings(t *testing.T) {
	ctx := context.Background()
	c := fakeClients(t, []string{configUpstream}, glooServices()...)
	s := glooSpec
	s.UpstreamRef = &router.Ref{Name: "config", Namespace: "gloo-system"}
	r, _ := New("gloo", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	up := get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	want := `{"connectionConfig":{"maxRequestsPerConnection":51},
		"kube":{"serviceName":"podinfo","serviceNamespace":"test","servicePort":80},
		"loadBalancerConfig":{"roundRobin":{"slowStartConfig":{"minWeightPercent":5,"slowStartWindow":"10s"}}},
		"useHttp2":true}`
	if got := specJSON(t, up); got != compactJSON(t, want) {
		t.Fatalf("Upstream spec %s\nwant %s", got, compactJSON(t, want))
	}
	if got := mustJSON(t, up.GetLabels()); got != `{"tier":"edge"}` {
		t.Fatalf("labels %s", got)
	}
}

const apexUpstream = `
apiVersion: gloo.solo.io/v1
kind: Upstream
metadata: {name: test-podinfo-80, namespace: test, labels: {team: web}}
spec:
  kube: {serviceName: podinfo, serviceNamespace: test, servicePort: 80}
  useHttp2: true
`

func TestGlooFinalizeUsesAnUpstreamOfTheApex(t *testing.T) {
	c, r := glooAt80_20(t, router.GlooModeRouteTable, []string{apexUpstream})
	before := get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	if err := r.Finalize(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Fatal("the user's Upstream was rewritten")
	}
	if got := get(t, c, router.RouteTableResource, "test", "podinfo"); gloo.UpstreamsNamed(got)[0] != "test-podinfo-80" {
		t.Fatalf("RouteTable spec %s", specJSON(t, got))
	}
}

func TestGlooFinalizeRefusesAnUpstreamElsewhere(t *testing.T) {
	elsewhere := strings.Replace(apexUpstream, "serviceName: podinfo,", "serviceName: frontend,", 1)
	c, r := glooAt80_20(t, router.GlooModeRouteTable, []string{elsewhere})
	wantErr(t, r.Finalize(context.Background()),
		"Upstream test/test-podinfo-80 exists but does not lead to Service test/podinfo port 80")
	mustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	if !exists(t, c, router.UpstreamResource, "test", "test-podinfo-canaryupstream-80") {
		t.Fatal("the canary Upstream was deleted")
	}
}

func TestGlooFinalizeLeavesForeignObjectsAlone(t *testing.T) {
	ctx := context.Background()
	foreign := `
apiVersion: gateway.solo.io/v1
kind: RouteTable
metadata: {name: podinfo, namespace: test}
spec:
  routes: [{routeAction: {single: {upstream: {name: other, namespace: test}}}}]
`
	c := fakeClients(t, []string{foreign}, glooServices()...)
	r, _ := New("gloo", c, glooSpec)
	wantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	rt := get(t, c, router.RouteTableResource, "test", "podinfo")
	if specJSON(t, rt) != `{"routes":[{"routeAction":{"single":{"upstream":{"name":"other","namespace":"test"}}}}]}` || len(rt.GetAnnotations()) != 0 {
		t.Fatalf("foreign RouteTable changed: %s %v", specJSON(t, rt), rt.GetAnnotations())
	}
	if exists(t, c, router.UpstreamResource, "test", "test-podinfo-80") {
		t.Fatal("an apex Upstream was created with nothing to hand over")
	}
}

// A new release of the same apex takes the left-behind object over, so a destroy followed by
// a create (a Terraform replacement) works.
func TestGlooReleaseTakesOverALeftBehindObject(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{router.GlooModeRouteTable, router.GlooModeUpstreamGroup} {
		t.Run(mode, func(t *testing.T) {
			c, r := glooAt80_20(t, mode, nil)
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			s := glooSpec
			s.Name, s.GlooMode = "podinfo-release-2", mode
			next, _ := New("gloo", c, s)
			mustDrift(t, next,
				"Upstream test/test-podinfo-primaryupstream-80 is missing",
				"Upstream test/test-podinfo-canaryupstream-80 is missing",
				glooWeighted(mode)+" test/podinfo was left behind by a destroyed canary_release (annotation canary-release.dev/left-behind); apply takes it over")
			if err := next.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			mustDrift(t, next)
			mustWeights(t, next, router.Weights{Primary: 100})
			obj := get(t, c, glooWeightedResource(mode), "test", "podinfo")
			if obj.GetLabels()[router.LabelRelease] != "podinfo-release-2" || obj.GetAnnotations()[router.AnnotationLeftBehind] != "" {
				t.Fatalf("labels %v annotations %v", obj.GetLabels(), obj.GetAnnotations())
			}
			if !exists(t, c, router.UpstreamResource, "test", "test-podinfo-80") {
				t.Fatal("the apex Upstream, which the user may route to, was deleted")
			}
		})
	}
}

// After Finalize the user's VirtualService still leads to the apex Service's Ready pods, as
// the mesh simulator follows the left-behind objects.
func TestGlooLeftBehindServesTheApexPods(t *testing.T) {
	for mode, vs := range map[string]string{
		router.GlooModeRouteTable: delegatingVS,
		router.GlooModeUpstreamGroup: strings.Replace(delegatingVS, "delegateAction:\n        ref: {name: podinfo, namespace: test}",
			"routeAction:\n        upstreamGroup: {name: podinfo, namespace: test}", 1),
	} {
		t.Run(mode, func(t *testing.T) {
			// The engine has pointed the apex at the target's pods before Finalize.
			apex := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "podinfo"}}}
			c, r := glooAt80_20(t, mode, []string{vs}, apex, readyPod("podinfo-0"), readyPod("podinfo-1"))
			if err := r.Finalize(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := simulateOneSecond(t, c, meshsim.MetricEnvoyRequests, "envoy_cluster_name", "envoy_response_code")
			if want := map[string]float64{"test-podinfo-80_test/200": meshsim.DefaultRPS}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("requests by cluster/code %v, want %v", got, want)
			}
		})
	}
}

func readyPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "test", Labels: map[string]string{"app": "podinfo"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// simulateOneSecond runs the mesh simulator over the clients for one second of load and
// returns metric (a counter, or a histogram's count), by its label values labelNames joined
// with "/", leaving out zeros. It fails the test on any invariant the simulator logged (weights
// not summing to 100, no Ready pods).
func simulateOneSecond(t *testing.T, c router.Clients, metric string, labelNames ...string) map[string]float64 {
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

// glooWeighted is the kind of the object that carries the weights in a Gloo mode.
func glooWeighted(mode string) string {
	if mode == router.GlooModeUpstreamGroup {
		return "UpstreamGroup"
	}
	return "RouteTable"
}

func glooWeightedResource(mode string) schema.GroupVersionResource {
	if mode == router.GlooModeUpstreamGroup {
		return router.UpstreamGroupResource
	}
	return router.RouteTableResource
}
