package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/alb"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/apisix"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/contour"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/nginx"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/skipper"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/traefik"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// TestAgainstAPIServer runs every router against a real API server, so that the CRD schemas
// (pruning, required fields, integer types) judge the objects. It runs only when
// CANARY_TEST_KUBECONFIG names a kubeconfig; the CRDs of internal/testbed/localstack/crds are
// installed when missing.
func TestAgainstAPIServer(t *testing.T) {
	path := os.Getenv("CANARY_TEST_KUBECONFIG")
	if path == "" {
		t.Skip("CANARY_TEST_KUBECONFIG is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c := router.Clients{Dynamic: dynamic.NewForConfigOrDie(cfg), Kube: kubernetes.NewForConfigOrDie(cfg)}
	installCRDs(ctx, t, c.Dynamic)

	ns := fmt.Sprintf("router-it-%d", time.Now().UnixNano()%100000)
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The routes go before the namespace: deleted together, its pods could go first, and the
		// routes left would send the simulator's traffic to nothing while the namespace goes.
		for gvr := range routertest.ListKinds {
			_ = c.Dynamic.Resource(gvr).Namespace(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		}
		_ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	}()
	// The release's Services, the apex among them, and the other Service the user's ApisixRoute
	// sends to.
	for name, app := range map[string]string{"podinfo-primary": "podinfo-primary", "podinfo-canary": "podinfo", "podinfo": "podinfo-primary", "other": "other"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{{Port: 80}}}}
		if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A Ready pod behind each side, so that every split the routers write is served: the local
	// stack's simulator follows these objects and logs traffic sent to a side without Ready pods.
	for _, app := range []string{"podinfo-primary", "podinfo", "other"} {
		readyPod(ctx, t, c.Kube, ns, app)
	}
	defer checkNoInvariantEntries(t, ns)
	create := func(doc string) {
		obj := routertest.ParseYAML(t, strings.ReplaceAll(doc, "namespace: test", "namespace: "+ns))
		gvr := map[string]schema.GroupVersionResource{"ApisixRoute": router.ApisixRouteResource, "Upstream": router.UpstreamResource,
			"VirtualService": router.VirtualServiceResource, "Ingress": nginx.IngressResource}[obj.GetKind()]
		if _, err := c.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", obj.GetKind(), err)
		}
	}
	create(routertest.APISIXUserRoute)
	create(routertest.SkipperUserIngress)
	// Skipper's user Ingress is podinfo too: the ALB one gets a name of its own.
	create(strings.Replace(routertest.ALBUserIngress, "name: podinfo\n", "name: podinfo-alb\n", 1))
	create(strings.Replace(routertest.GlooConfigUpstream, "namespace: gloo-system", "namespace: test", 1))
	create(routertest.NginxUserIngress)

	spec := router.Spec{Namespace: ns, Name: "podinfo-release", Target: "podinfo", Apex: "podinfo", Port: 80}
	upstream := &router.Ref{Name: "config"}
	for _, provider := range []string{"osm", "apisix", "gloo", "gloo-ug", "istio", "traefik", "contour", "nginx", "skipper", "alb"} {
		t.Run(provider, func(t *testing.T) {
			s := spec
			p := provider
			switch provider {
			case "apisix":
				s.Options = apisix.Options{RouteRef: &router.Ref{Name: "podinfo"}}
			case "nginx":
				s.Options = routertest.NginxSpec.Options
			case "alb":
				s.Options = alb.Options{IngressRef: &router.Ref{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "podinfo-alb"}}
			case "gloo":
				s.Options = gloo.Options{UpstreamRef: upstream}
			case "gloo-ug":
				p, s.Options = "gloo", gloo.Options{Mode: gloo.ModeUpstreamGroup, UpstreamRef: upstream}
			case "skipper":
				s.Options = skipper.Options{IngressRef: &router.Ref{Name: "podinfo"}}
			case "istio":
				// Every setting, so that the CRD's enums and duration rules judge them.
				s.Options, s.Hosts = routertest.FullIstioSpec().Options, routertest.FullIstioSpec().Hosts
			}
			r, err := New(p, c, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustWeights(t, r, router.Weights{Primary: 100})
			routertest.MustDrift(t, r)
			// The stored object keeps the canary's explicit weight 0 (nginx's is an annotation).
			gvr, name := weightedObject(provider)
			if provider == "skipper" {
				// Skipper's weights are an annotation, which the API server keeps as written.
				if got := routertest.Get(t, c, gvr, ns, name).GetAnnotations()[skipper.AnnotationBackendWeights]; got != `{"podinfo-canary":0,"podinfo-primary":100}` {
					t.Fatalf("stored backend weights %s", got)
				}
			} else if provider == "alb" {
				// The weights are the forward action's, an annotation.
				if got := routertest.Get(t, c, gvr, ns, name).GetAnnotations()["alb.ingress.kubernetes.io/actions.podinfo"]; !strings.Contains(got, `"weight":0`) {
					t.Fatalf("stored forward action has no explicit weight 0: %s", got)
				}
			} else if got := routertest.SpecJSON(t, routertest.Get(t, c, gvr, ns, name)); provider != "nginx" && !strings.Contains(got, `"weight":0`) {
				t.Fatalf("stored spec has no explicit weight 0: %s", got)
			}
			for _, w := range []router.Weights{{Primary: 90, Canary: 10}, {Primary: 0, Canary: 100}, {Primary: 100, Canary: 0}, {Primary: 45, Canary: 55}} {
				if err := r.SetRoutes(ctx, w); err != nil {
					t.Fatal(err)
				}
				routertest.MustWeights(t, r, w)
			}
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustWeights(t, r, router.Weights{Primary: 45, Canary: 55})
			// Nothing the server defaulted or pruned makes the objects look drifted.
			routertest.MustDrift(t, r)
			if err := r.Finalize(ctx); err != nil {
				t.Fatal(err)
			}
			routertest.MustDrift(t, r, driftAfterFinalize(provider, ns)...)
			if strings.HasPrefix(provider, "gloo") {
				// The schema kept the hand-over: the object leads to the apex's Upstream only.
				apexUp := ns + "-podinfo-80"
				if got := gloo.UpstreamsNamed(routertest.Get(t, c, gvr, ns, name)); len(got) != 1 || got[0] != apexUp {
					t.Fatalf("left-behind %s names Upstreams %v, want [%s]", gvr.Resource, got, apexUp)
				}
			}
		})
	}
	if !routertest.Exists(t, c, alb.IngressResource, ns, "podinfo") {
		t.Fatal("the user's Ingress is gone")
	}
	if !routertest.Exists(t, c, router.ApisixRouteResource, ns, "podinfo") {
		t.Fatal("the user's ApisixRoute is gone")
	}
	if !routertest.Exists(t, c, nginx.IngressResource, ns, "podinfo-web") {
		t.Fatal("the user's Ingress is gone")
	}
}

func weightedObject(provider string) (schema.GroupVersionResource, string) {
	switch provider {
	case "osm":
		return router.TrafficSplitResource, "podinfo"
	case "apisix":
		return router.ApisixRouteResource, "podinfo-podinfo-canary"
	case "gloo":
		return router.RouteTableResource, "podinfo"
	case "istio":
		return router.IstioVirtualServiceResource, "podinfo"
	case "traefik":
		return traefik.TraefikServiceResource, "podinfo"
	case "contour":
		return contour.HTTPProxyResource, "podinfo"
	case "nginx":
		return nginx.IngressResource, "podinfo-web-canary"
	case "skipper":
		return skipper.IngressResource, "podinfo-canary"
	case "alb":
		return alb.IngressResource, "podinfo-alb-podinfo-canary"
	}
	return router.UpstreamGroupResource, "podinfo"
}

func driftAfterFinalize(provider, ns string) []string {
	switch provider {
	case "osm":
		return []string{"TrafficSplit " + ns + "/podinfo is missing"}
	case "apisix":
		return []string{"ApisixRoute " + ns + "/podinfo-podinfo-canary is missing"}
	case "istio":
		// The VirtualService binds gateways (FullIstioSpec), so it is left to the apex Service.
		return []string{"DestinationRule " + ns + "/podinfo-primary is missing", "DestinationRule " + ns + "/podinfo-canary is missing",
			"VirtualService " + ns + "/podinfo was left behind by a destroyed canary_release (annotation " + router.AnnotationLeftBehind + "); apply takes it over"}
	case "traefik":
		return []string{"TraefikService " + ns + "/podinfo is missing"}
	case "contour":
		return []string{"HTTPProxy " + ns + "/podinfo is missing"}
	case "nginx":
		return []string{"Ingress " + ns + "/podinfo-web-canary is missing"}
	case "skipper":
		return []string{"Ingress " + ns + "/podinfo-canary is missing"}
	case "alb":
		return []string{"Ingress " + ns + "/podinfo-alb-podinfo-canary is missing"}
	}
	kind := "RouteTable"
	if provider == "gloo-ug" {
		kind = "UpstreamGroup"
	}
	return []string{
		"Upstream " + ns + "/" + ns + "-podinfo-primaryupstream-80 is missing",
		"Upstream " + ns + "/" + ns + "-podinfo-canaryupstream-80 is missing",
		kind + " " + ns + "/podinfo was left behind by a destroyed canary_release (annotation " + router.AnnotationLeftBehind + "); apply takes it over",
	}
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func installCRDs(ctx context.Context, t *testing.T, c dynamic.Interface) {
	t.Helper()
	files, _ := filepath.Glob("../../testbed/localstack/crds/*.yaml")
	if len(files) == 0 {
		t.Fatal("no CRDs in ../../testbed/localstack/crds")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := routertest.ParseYAML(t, string(b))
		_, err = c.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", f, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			live, err := c.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not established: %v", crd.GetName(), err)
		}
	}
}

// readyPod creates a pod labelled app in ns and waits until it is Ready (kwok runs it on the
// local stack).
func readyPod(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns, app string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "podinfo:6.0.0"}}}}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s never became Ready: %v", ns, app, err)
	}
}

// checkNoInvariantEntries fails the test when the local stack's simulator (at
// CANARY_SIMULATOR_ADDRESS, when set) logged an invariant entry for ns.
func checkNoInvariantEntries(t *testing.T, ns string) {
	t.Helper()
	addr := os.Getenv("CANARY_SIMULATOR_ADDRESS")
	if addr == "" {
		return
	}
	resp, err := http.Get(addr + "/invariants?namespace=" + url.QueryEscape(ns))
	if err != nil {
		t.Errorf("reading the simulator's invariant log: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var entries []json.RawMessage
	if err := json.Unmarshal(body, &entries); err != nil {
		t.Errorf("the simulator's invariant log: %v: %s", err, body)
		return
	}
	for _, e := range entries {
		t.Errorf("invariant log entry for %s: %s", ns, e)
	}
}
