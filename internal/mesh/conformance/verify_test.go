package conformance

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/skipper"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// routerCase is one router ready for SetRoutes, with the object that carries its weights.
type routerCase struct {
	name, resource, object string
	r                      router.Router
	c                      router.Clients
}

func everyRouter(t *testing.T) []routerCase {
	t.Helper()
	ctx := context.Background()
	var out []routerCase
	add := func(name, provider, resource, object string, c router.Clients, s router.Spec) {
		r, err := New(provider, c, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		out = append(out, routerCase{name: name, resource: resource, object: object, r: r, c: c})
	}
	add("osm", "osm", "trafficsplits", "TrafficSplit test/podinfo", routertest.FakeClients(t, nil), routertest.OSMSpec)
	add("apisix", "apisix", "apisixroutes", "ApisixRoute test/podinfo-podinfo-canary", routertest.FakeClients(t, []string{routertest.APISIXUserRoute}), routertest.APISIXSpec)
	add("gloo", "gloo", "routetables", "RouteTable test/podinfo", routertest.FakeClients(t, nil, routertest.GlooServices()...), routertest.GlooSpec)
	ug := routertest.GlooSpec
	ug.Options = gloo.Options{Mode: gloo.ModeUpstreamGroup}
	add("gloo-ug", "gloo", "upstreamgroups", "UpstreamGroup test/podinfo", routertest.FakeClients(t, nil, routertest.GlooServices()...), ug)
	add("gatewayapi", "gatewayapi", "httproutes", "HTTPRoute test/podinfo", routertest.FakeClients(t, nil), gatewaySpec)
	add("linkerd", "linkerd", "httproutes", "HTTPRoute test/podinfo", routertest.FakeClients(t, nil), linkerdSpec)
	add("istio", "istio", "virtualservices", "VirtualService test/podinfo", routertest.FakeClients(t, nil), routertest.IstioSpec)
	add("traefik", "traefik", "traefikservices", "TraefikService test/podinfo", routertest.FakeClients(t, nil), routertest.OSMSpec)
	add("contour", "contour", "httpproxies", "HTTPProxy test/podinfo", routertest.FakeClients(t, nil), routertest.OSMSpec)
	add("nginx", "nginx", "ingresses", "Ingress test/podinfo-web-canary", routertest.FakeClients(t, []string{routertest.NginxUserIngress}), routertest.NginxSpec)
	add("skipper", "skipper", "ingresses", "Ingress test/podinfo-canary", routertest.FakeClients(t, []string{routertest.SkipperUserIngress}), skipperSpec)
	add("alb", "alb", "ingresses", "Ingress test/podinfo-podinfo-canary", routertest.FakeClients(t, []string{routertest.ALBUserIngress}), routertest.ALBSpec)
	add("knative", "knative", "services", "Knative Service test/podinfo", routertest.FakeClients(t, []string{routertest.KnativeService}), routertest.OSMSpec)
	return out
}

// skipperSpec is a skipper release of podinfo whose ingress_ref is routertest.SkipperUserIngress.
var skipperSpec = router.Spec{Namespace: "test", Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80,
	Options: skipper.Options{IngressRef: &router.Ref{Name: "podinfo"}}}

// countAfterUpdate counts the reads of resource that follow its first update.
func countAfterUpdate(c router.Clients, resource string) func() int {
	updated, reads := false, 0
	routertest.FakeDynamic(c).PrependReactor("*", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "update":
			updated = true
		case "get":
			if updated {
				reads++
			}
		}
		return false, nil, nil
	})
	return func() int { return reads }
}

// A write the API server answers with the object is verified from that answer alone.
func TestSetRoutesVerifiesFromTheResponse(t *testing.T) {
	for _, tc := range everyRouter(t) {
		t.Run(tc.name, func(t *testing.T) {
			reads := countAfterUpdate(tc.c, tc.resource)
			if err := tc.r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10}); err != nil {
				t.Fatal(err)
			}
			if reads() != 0 {
				t.Fatalf("%d reads after the update, want 0: its response carries the object", reads())
			}
			routertest.MustWeights(t, tc.r, router.Weights{Primary: 90, Canary: 10})
		})
	}
}

// An answer without the object is followed by a read.
func TestSetRoutesReadsBackWhenTheResponseHasNoObject(t *testing.T) {
	for _, tc := range everyRouter(t) {
		t.Run(tc.name, func(t *testing.T) {
			routertest.FakeDynamic(tc.c).PrependReactor("update", tc.resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := a.(k8stesting.UpdateAction).GetObject()
				return true, nil, routertest.FakeDynamic(tc.c).Tracker().Update(a.GetResource(), obj, a.GetNamespace())
			})
			reads := countAfterUpdate(tc.c, tc.resource) // ahead of the reactor above, so it sees every call
			if err := tc.r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10}); err != nil {
				t.Fatal(err)
			}
			if reads() != 1 {
				t.Fatalf("%d reads after the update, want 1", reads())
			}
		})
	}
}

// A write that is accepted but not kept (a webhook, a controller reverting it) is an error.
func TestSetRoutesReportsWeightsNotHeld(t *testing.T) {
	for _, tc := range everyRouter(t) {
		t.Run(tc.name, func(t *testing.T) {
			routertest.FakeDynamic(tc.c).PrependReactor("update", tc.resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, nil // accepted, answered without a body, and dropped
			})
			err := tc.r.SetRoutes(context.Background(), router.Weights{Primary: 90, Canary: 10})
			want := tc.object + ": wrote primary=90 canary=10 but the API server holds primary=100 canary=0"
			if err == nil || err.Error() != want {
				t.Fatalf("error %v\nwant %s", err, want)
			}
		})
	}
}

// The response is trusted as the read-back: a response that differs fails even when the
// stored object would have matched.
func TestSetRoutesReportsAMutatedResponse(t *testing.T) {
	c, r := newOSMRouter(t)
	routertest.FakeDynamic(c).PrependReactor("update", "trafficsplits", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured)
		if err := routertest.FakeDynamic(c).Tracker().Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		mutated := obj.DeepCopy()
		_ = unstructured.SetNestedSlice(mutated.Object, []any{
			map[string]any{"service": "podinfo-canary", "weight": int64(0)},
			map[string]any{"service": "podinfo-primary", "weight": int64(100)},
		}, "spec", "backends")
		return true, mutated, nil
	})
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 75, Canary: 25})
	routertest.WantErr(t, err, "TrafficSplit test/podinfo: wrote primary=75 canary=25 but the API server holds primary=100 canary=0")
}

func TestSetRoutesReportsAnUnreadableSplit(t *testing.T) {
	c, r := newOSMRouter(t)
	routertest.FakeDynamic(c).PrependReactor("update", "trafficsplits", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
		unstructured.RemoveNestedField(obj.Object, "spec", "backends")
		return true, obj, nil
	})
	err := r.SetRoutes(context.Background(), router.Weights{Primary: 75, Canary: 25})
	routertest.WantErr(t, err, "TrafficSplit test/podinfo: wrote primary=75 canary=25 but the API server holds no readable split: "+
		"spec.backends must hold podinfo-primary and podinfo-canary with integer weights")
}

// countCalls counts the calls of one verb on resource.
func countCalls(c router.Clients, resource, verb string) func() int {
	n := 0
	routertest.FakeDynamic(c).PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		n++
		return false, nil, nil
	})
	return func() int { return n }
}

// A router writes the next weights onto the object its last write returned: one request per
// step, no read before it.
func TestSetRoutesWritesWithoutReadingFirst(t *testing.T) {
	for _, tc := range everyRouter(t) {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if err := tc.r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
				t.Fatal(err)
			}
			gets := countCalls(tc.c, tc.resource, "get")
			for _, w := range []router.Weights{{Primary: 80, Canary: 20}, {Primary: 50, Canary: 50}} {
				if err := tc.r.SetRoutes(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			if gets() != 0 {
				t.Fatalf("%d reads of the weight object for two writes, want 0", gets())
			}
			routertest.MustWeights(t, tc.r, router.Weights{Primary: 50, Canary: 50})
		})
	}
}

// Someone else's write in between makes the API server refuse the one built on the copy
// held (a Conflict); the router reads the object again and writes the split anyway.
func TestSetRoutesRereadsAfterSomeoneElsesWrite(t *testing.T) {
	ctx := context.Background()
	c, r := newOSMRouter(t)
	routertest.EnforceResourceVersions(t, c, router.TrafficSplitResource)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 90, Canary: 10}); err != nil {
		t.Fatal(err)
	}
	ts := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")
	ts.SetAnnotations(map[string]string{"someone": "else"})
	routertest.Update(t, c, router.TrafficSplitResource, ts)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	routertest.MustWeights(t, r, router.Weights{Primary: 70, Canary: 30})
	if got := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo").GetAnnotations()["someone"]; got != "else" {
		t.Fatalf("the other writer's annotation is %q after our write, want it kept", got)
	}
	// The same split again changes nothing on the copy held: the router reads to verify.
	gets := countCalls(c, "trafficsplits", "get")
	if err := r.SetRoutes(ctx, router.Weights{Primary: 70, Canary: 30}); err != nil {
		t.Fatal(err)
	}
	if gets() != 1 {
		t.Fatalf("%d reads for an unchanged split, want 1", gets())
	}
}

// A run reads the live weights (recovery), then reconciles: the reconcile starts from that
// read instead of reading the weight object again, and still repairs what the read held.
func TestReconcileAfterGetRoutesReadsOnce(t *testing.T) {
	for _, tc := range everyRouter(t) {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			name := tc.object[strings.LastIndex(tc.object, "/")+1:]
			reads := 0
			routertest.FakeDynamic(tc.c).PrependReactor("get", tc.resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.(k8stesting.GetAction).GetName() == name {
					reads++
				}
				return false, nil, nil
			})
			if _, err := tc.r.GetRoutes(ctx); err != nil {
				t.Fatal(err)
			}
			if err := tc.r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if reads != 1 {
				t.Errorf("%s read %d times by GetRoutes and Reconcile, want once", tc.object, reads)
			}
		})
	}
}

// Someone else's write between the read and the reconcile makes the API server refuse the
// reconcile's write; it reads again and repairs the object.
func TestReconcileAfterGetRoutesRereadsOnConflict(t *testing.T) {
	ctx := context.Background()
	c, r := newOSMRouter(t)
	routertest.EnforceResourceVersions(t, c, router.TrafficSplitResource)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}); err != nil {
		t.Fatal(err)
	}
	ts := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")
	ts.Object["spec"].(map[string]any)["service"] = "other"
	routertest.Update(t, c, router.TrafficSplitResource, ts)
	if _, err := r.GetRoutes(ctx); err != nil {
		t.Fatal(err)
	}
	// A second edit after the read: the copy held is stale.
	ts = routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo")
	ts.SetAnnotations(map[string]string{"someone": "else"})
	routertest.Update(t, c, router.TrafficSplitResource, ts)
	if err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	routertest.MustDrift(t, r)
	routertest.MustWeights(t, r, router.Weights{Primary: 80, Canary: 20})
	if got := routertest.Get(t, c, router.TrafficSplitResource, "test", "podinfo").GetAnnotations()["someone"]; got != "else" {
		t.Fatalf("the other writer's annotation is %q after the reconcile, want it kept", got)
	}
}
