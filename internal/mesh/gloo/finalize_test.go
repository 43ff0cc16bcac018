package gloo

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

const leftBehindNote = "destroyed canary_release podinfo-release; delete this object after repointing your VirtualService"

// mustBeHandedOver asserts the state Finalize leaves: the weighted object podinfo with spec
// want, no release labels and the left-behind note; Upstream test-podinfo-80 on the apex
// Service; no generated Upstreams.
func mustBeHandedOver(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, want string) {
	t.Helper()
	routertest.MustBeLeftBehind(t, c, gvr, want, leftBehindNote)
	up := routertest.Get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	kube, _, _ := unstructured.NestedMap(up.Object, "spec", "kube")
	if got, want := routertest.MustJSON(t, kube), `{"serviceName":"podinfo","serviceNamespace":"test","servicePort":80}`; got != want {
		t.Errorf("Upstream test-podinfo-80 spec.kube %s, want %s", got, want)
	}
	if up.GetLabels()[router.LabelRelease] != "" || !strings.HasPrefix(up.GetAnnotations()[router.AnnotationLeftBehind], "destroyed canary_release podinfo-release; ") {
		t.Errorf("Upstream test-podinfo-80 labels %v annotations %v", up.GetLabels(), up.GetAnnotations())
	}
	for _, name := range []string{"test-podinfo-primaryupstream-80", "test-podinfo-canaryupstream-80"} {
		if routertest.Exists(t, c, router.UpstreamResource, "test", name) {
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
	c := routertest.FakeClients(t, objs, append(routertest.GlooServices(), kubeObjs...)...)
	s := routertest.GlooSpec
	s.Options = Options{Mode: mode}
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
	c, r := glooAt80_20(t, ModeRouteTable, nil)
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	before := routertest.Get(t, c, router.RouteTableResource, "test", "podinfo").GetResourceVersion()
	if err := r.Finalize(ctx); err != nil {
		t.Fatalf("second Finalize: %v", err)
	}
	if after := routertest.Get(t, c, router.RouteTableResource, "test", "podinfo").GetResourceVersion(); after != before {
		t.Fatal("the second Finalize rewrote the left-behind RouteTable")
	}
}

// The generated Upstreams go only after the RouteTable no longer names them.
func TestGlooFinalizeOrder(t *testing.T) {
	c, r := glooAt80_20(t, ModeRouteTable, nil)
	routertest.FakeDynamic(c).ClearActions()
	if err := r.Finalize(context.Background()); err != nil {
		t.Fatal(err)
	}
	var writes []string
	for _, a := range routertest.FakeDynamic(c).Actions() {
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
	c, r := glooAt80_20(t, ModeRouteTable, nil)
	routertest.FailFirst(c, "update", "routetables", errForbidden)
	err := r.Finalize(context.Background())
	routertest.WantErr(t, err, "handing RouteTable test/podinfo over to Service test/podinfo: updating RouteTable test/podinfo: ")
	routertest.MustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	for _, name := range []string{"test-podinfo-primaryupstream-80", "test-podinfo-canaryupstream-80"} {
		if !routertest.Exists(t, c, router.UpstreamResource, "test", name) {
			t.Errorf("Upstream %s deleted while the RouteTable still names it", name)
		}
	}
}

// The rewritten object the API server answers with is checked like SetRoutes' weights.
func TestGlooFinalizeVerifiesTheHandOver(t *testing.T) {
	c, r := glooAt80_20(t, ModeRouteTable, nil)
	stale := routertest.Get(t, c, router.RouteTableResource, "test", "podinfo")
	routertest.FakeDynamic(c).PrependReactor("update", "routetables", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, stale, nil
	})
	routertest.WantErr(t, r.Finalize(context.Background()), "RouteTable test/podinfo: wrote a single destination test-podinfo-80 "+
		"but the API server holds destinations [test-podinfo-primaryupstream-80 test-podinfo-canaryupstream-80]")
	if !routertest.Exists(t, c, router.UpstreamResource, "test", "test-podinfo-primaryupstream-80") {
		t.Fatal("the primary Upstream was deleted")
	}
}

func TestGlooFinalizeKeepsUpstreamSettings(t *testing.T) {
	ctx := context.Background()
	c := routertest.FakeClients(t, []string{routertest.GlooConfigUpstream}, routertest.GlooServices()...)
	s := routertest.GlooSpec
	s.Options = Options{UpstreamRef: &router.Ref{Name: "config", Namespace: "gloo-system"}}
	r, _ := New("gloo", c, s)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	up := routertest.Get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	want := `{"connectionConfig":{"maxRequestsPerConnection":51},
		"kube":{"serviceName":"podinfo","serviceNamespace":"test","servicePort":80},
		"loadBalancerConfig":{"roundRobin":{"slowStartConfig":{"minWeightPercent":5,"slowStartWindow":"10s"}}},
		"useHttp2":true}`
	if got := routertest.SpecJSON(t, up); got != routertest.CompactJSON(t, want) {
		t.Fatalf("Upstream spec %s\nwant %s", got, routertest.CompactJSON(t, want))
	}
	if got := routertest.MustJSON(t, up.GetLabels()); got != `{"tier":"edge"}` {
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
	c, r := glooAt80_20(t, ModeRouteTable, []string{apexUpstream})
	before := routertest.Get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	if err := r.Finalize(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := routertest.Get(t, c, router.UpstreamResource, "test", "test-podinfo-80")
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Fatal("the user's Upstream was rewritten")
	}
	if got := routertest.Get(t, c, router.RouteTableResource, "test", "podinfo"); UpstreamsNamed(got)[0] != "test-podinfo-80" {
		t.Fatalf("RouteTable spec %s", routertest.SpecJSON(t, got))
	}
}

func TestGlooFinalizeRefusesAnUpstreamElsewhere(t *testing.T) {
	elsewhere := strings.Replace(apexUpstream, "serviceName: podinfo,", "serviceName: frontend,", 1)
	c, r := glooAt80_20(t, ModeRouteTable, []string{elsewhere})
	routertest.WantErr(t, r.Finalize(context.Background()),
		"Upstream test/test-podinfo-80 exists but does not lead to Service test/podinfo port 80")
	routertest.MustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	if !routertest.Exists(t, c, router.UpstreamResource, "test", "test-podinfo-canaryupstream-80") {
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
	c := routertest.FakeClients(t, []string{foreign}, routertest.GlooServices()...)
	r, _ := New("gloo", c, routertest.GlooSpec)
	routertest.WantErr(t, r.Reconcile(ctx), "not managed by canary_release")
	if err := r.Finalize(ctx); err != nil {
		t.Fatal(err)
	}
	rt := routertest.Get(t, c, router.RouteTableResource, "test", "podinfo")
	if routertest.SpecJSON(t, rt) != `{"routes":[{"routeAction":{"single":{"upstream":{"name":"other","namespace":"test"}}}}]}` || len(rt.GetAnnotations()) != 0 {
		t.Fatalf("foreign RouteTable changed: %s %v", routertest.SpecJSON(t, rt), rt.GetAnnotations())
	}
	if routertest.Exists(t, c, router.UpstreamResource, "test", "test-podinfo-80") {
		t.Fatal("an apex Upstream was created with nothing to hand over")
	}
}

// A new release of the same apex takes the left-behind object over, so a destroy followed by
// a create (a Terraform replacement) works.
func TestGlooReleaseTakesOverALeftBehindObject(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{ModeRouteTable, ModeUpstreamGroup} {
		t.Run(mode, func(t *testing.T) {
			c, r := glooAt80_20(t, mode, nil)
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			s := routertest.GlooSpec
			s.Name, s.Options = "podinfo-release-2", Options{Mode: mode}
			next, _ := New("gloo", c, s)
			routertest.MustDrift(t, next,
				"Upstream test/test-podinfo-primaryupstream-80 is missing",
				"Upstream test/test-podinfo-canaryupstream-80 is missing",
				glooWeighted(mode)+" test/podinfo was left behind by a destroyed canary_release (annotation canary-release.dev/left-behind); apply takes it over")
			if err := next.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustDrift(t, next)
			routertest.MustWeights(t, next, router.Weights{Primary: 100})
			obj := routertest.Get(t, c, glooWeightedResource(mode), "test", "podinfo")
			if obj.GetLabels()[router.LabelRelease] != "podinfo-release-2" || obj.GetAnnotations()[router.AnnotationLeftBehind] != "" {
				t.Fatalf("labels %v annotations %v", obj.GetLabels(), obj.GetAnnotations())
			}
			if !routertest.Exists(t, c, router.UpstreamResource, "test", "test-podinfo-80") {
				t.Fatal("the apex Upstream, which the user may route to, was deleted")
			}
		})
	}
}

// After Finalize the user's VirtualService still leads to the apex Service's Ready pods, as
// the mesh simulator follows the left-behind objects.
func TestGlooLeftBehindServesTheApexPods(t *testing.T) {
	for mode, vs := range map[string]string{
		ModeRouteTable: delegatingVS,
		ModeUpstreamGroup: strings.Replace(delegatingVS, "delegateAction:\n        ref: {name: podinfo, namespace: test}",
			"routeAction:\n        upstreamGroup: {name: podinfo, namespace: test}", 1),
	} {
		t.Run(mode, func(t *testing.T) {
			// The engine has pointed the apex at the target's pods before Finalize.
			apex := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "podinfo"}}}
			c, r := glooAt80_20(t, mode, []string{vs}, apex, routertest.ReadyPod("podinfo-0"), routertest.ReadyPod("podinfo-1"))
			if err := r.Finalize(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := routertest.SimulateOneSecond(t, c, meshsim.MetricEnvoyRequests, "envoy_cluster_name", "envoy_response_code")
			if want := map[string]float64{"test-podinfo-80_test/200": meshsim.DefaultRPS}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("requests by cluster/code %v, want %v", got, want)
			}
		})
	}
}

// glooWeighted is the kind of the object that carries the weights in a Gloo mode.
func glooWeighted(mode string) string {
	if mode == ModeUpstreamGroup {
		return "UpstreamGroup"
	}
	return "RouteTable"
}

func glooWeightedResource(mode string) schema.GroupVersionResource {
	if mode == ModeUpstreamGroup {
		return router.UpstreamGroupResource
	}
	return router.RouteTableResource
}
