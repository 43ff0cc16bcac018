package conformance

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"

	"github.com/canary-release/terraform-provider-canary/internal/router"

	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

var listKinds = map[schema.GroupVersionResource]string{
	router.TrafficSplitResource:   "TrafficSplitList",
	router.ApisixRouteResource:    "ApisixRouteList",
	router.UpstreamResource:       "UpstreamList",
	router.UpstreamGroupResource:  "UpstreamGroupList",
	router.RouteTableResource:     "RouteTableList",
	router.VirtualServiceResource: "VirtualServiceList",
	// Istio's VirtualService shares Gloo's list kind name, in another group.
	router.IstioVirtualServiceResource:  "VirtualServiceList",
	router.IstioDestinationRuleResource: "DestinationRuleList",
}

// fakeClients returns clients whose dynamic side holds objs (YAML documents, numbers decoded
// as int64 like the API server does) and whose typed side holds kubeObjs.
func fakeClients(t *testing.T, objs []string, kubeObjs ...runtime.Object) router.Clients {
	t.Helper()
	var us []runtime.Object
	for _, doc := range objs {
		us = append(us, parseYAML(t, doc))
	}
	return router.Clients{
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, us...),
		Kube:    kubefake.NewSimpleClientset(kubeObjs...),
	}
}

func parseYAML(t *testing.T, doc string) *unstructured.Unstructured {
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

func get(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return obj
}

func exists(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, ns, name string) bool {
	t.Helper()
	obj, err := router.GetOptional(context.Background(), c.Dynamic, gvr, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return obj != nil
}

// specJSON is the object's spec as JSON, for exact shape comparisons.
func specJSON(t *testing.T, obj *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compactJSON normalises a hand-written JSON document.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad JSON in test: %v", err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func wantErr(t *testing.T, err error, contains string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %v, want one containing %q", err, contains)
	}
}

func mustWeights(t *testing.T, r router.Router, want router.Weights) {
	t.Helper()
	got, err := r.GetRoutes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("weights %+v, want %+v", got, want)
	}
}

func mustDrift(t *testing.T, r router.Router, want ...string) {
	t.Helper()
	got, err := r.Drift(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("drift:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func update(t *testing.T, c router.Clients, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Update(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestValidateWeights(t *testing.T) {
	for _, w := range []router.Weights{{Primary: 0, Canary: 0}, {Primary: 50, Canary: 40}, {Primary: 101, Canary: -1}, {Primary: -10, Canary: 110}, {Primary: 60, Canary: 60}} {
		if err := router.ValidateWeights(w); err == nil {
			t.Errorf("%+v accepted", w)
		}
	}
	for _, w := range []router.Weights{{Primary: 100, Canary: 0}, {Primary: 0, Canary: 100}, {Primary: 90, Canary: 10}} {
		if err := router.ValidateWeights(w); err != nil {
			t.Errorf("%+v: %v", w, err)
		}
	}
}

// New is the router of provider, as the mesh registry builds it.
func New(provider string, c router.Clients, s router.Spec) (router.Router, error) {
	return registry.NewRouter(provider, c, s)
}

var deleteOpts = metav1.DeleteOptions{}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
