package provider

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// splitRequests is how many requests the client sends through Traefik at each weight.
const splitRequests = 1000

// TestAccTraefik_differentialSplit: for each weight the traefik router writes into a release's
// TraefikService, the split the real Traefik serves, counted at the client over 1 000
// requests by the image that answered, is within 3 points of it, and the simulator's model of
// the same objects (the share of requests it gives each image) within 3 points of Traefik.
func TestAccTraefik_differentialSplit(t *testing.T) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	ns := c.namespace(t)
	// A host of this test's own: Traefik serves every namespace's IngressRoutes.
	host := ns + ".split.example.com"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() {
				c.createUserObject(t, ingressRoutes, ns, &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
					"metadata": map[string]any{"name": "podinfo"},
					"spec": map[string]any{"entryPoints": []any{"web"}, "routes": []any{map[string]any{
						"match": "Host(`" + host + "`)", "kind": "Rule",
						"services": []any{map[string]any{"name": "podinfo", "kind": "TraefikService"}},
					}}},
				}})
				c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
			},
			Config: traefikRouter.config(ns, "podinfo:6.0.0", httpRouteAnalysis("2s", 5)),
			Check: checkCluster(func() error {
				return c.measureSplit(t, ns, host, "traefik", router.Spec{Namespace: ns, Name: "podinfo", Target: "podinfo", Apex: "podinfo", Port: 80},
					func(w int) func([]traefikAPIService) error { return canaryWeightApplied(ns, w) }, 10, 40, 80)
			}),
		}},
	})
}

// TestAccGatewayAPI_differentialSplit is TestAccTraefik_differentialSplit for the gatewayapi
// router's HTTPRoute on a Gateway of the stack's Traefik GatewayClass.
func TestAccGatewayAPI_differentialSplit(t *testing.T) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	ns := c.namespace(t)
	rc := gatewayOnTraefik(ns)
	var user userState
	spec := router.Spec{Namespace: ns, Name: "podinfo", Target: "podinfo", Apex: "podinfo", Port: 80,
		Hosts:   []string{ns + ".gw.example.com"},
		Options: gatewayapi.Options{GatewayRefs: []router.ParentRef{{Group: router.GatewayGroup, Kind: router.GatewayKind, Name: "public", SectionName: "http"}}}}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() {
				rc.create(t, c, ns, &user)
				rc.createTarget(t, c, ns, "podinfo:6.0.0")
			},
			Config: rc.config(ns, "podinfo:6.0.0", httpRouteAnalysis("2s", 5)),
			Check: resource.ComposeAggregateTestCheckFunc(
				checkCluster(func() error {
					return c.measureSplit(t, ns, spec.Hosts[0], "gatewayapi", spec,
						func(w int) func([]traefikAPIService) error { return canaryWeightApplied(ns, w) }, 10, 40, 80)
				}),
				// The HTTPRoute as the release left it: what the test wrote is gone.
				rc.checkRoute(c, ns, 100, 0),
			),
		}},
	})
}

// TestAccKubernetes_differentialSplit is TestAccTraefik_differentialSplit for the kubernetes
// router's replica ratio, through the user's Ingress of class traefik naming the apex Service:
// beside 4 primary pods, the steps 20 and 50 are 1 and 4 canary pods.
func TestAccKubernetes_differentialSplit(t *testing.T) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	ns := c.namespace(t)
	var user userState
	spec := router.Spec{Namespace: ns, Name: "podinfo", Target: "podinfo", Apex: "podinfo", Port: 9898, ReadyDeadline: time.Minute}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() { c.createTraefikIngress(t, ns, &user) },
			Config:    c.meshlessConfig(ns, "podinfo:6.0.0", "0"),
			Check: resource.ComposeAggregateTestCheckFunc(
				checkCluster(func() error {
					return c.measureSplit(t, ns, ns+".ing.example.com", "kubernetes", spec,
						func(int) func([]traefikAPIService) error {
							return c.serversApplied(context.Background(), ns, "podinfo", 9898)
						}, 20, 50)
				}),
				c.checkApexSelects(ns, 100, 0),
			),
		}},
	})
}

// measureSplit brings the canary up beside the initialised primary, has the provider's router
// write each step's weights, and counts who answers the requests for host.
// applied tells when Traefik's configuration holds the step of weight w.
func (c *testCluster) measureSplit(t *testing.T, ns, host, provider string, spec router.Spec,
	applied func(w int) func([]traefikAPIService) error, weights ...int) error {
	ctx := context.Background()
	// The canary: the target, scaled up with the new image, as a run would.
	if err := c.scaleTarget(ctx, ns, 2, "podinfo:6.0.1"); err != nil {
		return err
	}
	if err := c.waitReady(ctx, ns, "podinfo", 2); err != nil {
		return err
	}
	r, err := registry.NewRouter(provider, router.Clients{Dynamic: c.dyn, Kube: c.kube}, spec)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	pods := map[string]int{}
	ask := func() (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.env.ProxyAddress+"/", nil)
		if err != nil {
			return "", err
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pods[resp.Header.Get("X-Canary-Pod")]++
		return resp.Header.Get("X-Canary-Image"), nil
	}
	var report []string
	for _, w := range weights {
		if err := r.SetRoutes(ctx, router.Weights{Primary: 100 - w, Canary: w}); err != nil {
			return err
		}
		// The step counts from when it is in effect: the product reads it back from the live
		// objects (a replica ratio from the apex's EndpointSlices, which lag the pods' readiness),
		// and Traefik, which loads changes asynchronously, has applied it.
		written := time.Now()
		if err := waitRoutes(ctx, r, w); err != nil {
			return err
		}
		readBack := time.Since(written)
		if err := c.waitTraefikApplied(ctx, fmt.Sprintf("weight %d", w), applied(w)); err != nil {
			return err
		}
		lag := fmt.Sprintf("read back after %s, applied by Traefik after %s", readBack.Round(time.Millisecond), time.Since(written).Round(time.Millisecond))
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if image, err := ask(); err == nil && image == "podinfo:6.0.1" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("at weight %d, Traefik sent nothing to the canary within 30 s", w)
			}
		}
		// The simulator's client sends to the host meanwhile and takes its turns in Traefik's
		// round-robin (by pod, the test's own requests were seen 104 to 136 times where 125
		// was due): what Traefik served is the test's requests and the client's together.
		answers := map[string]int{}
		clear(pods)
		before := c.hostAnswers(ns, host)
		for range splitRequests {
			image, err := ask()
			if err != nil {
				image = "error: " + err.Error()
			}
			answers[image]++
		}
		after := c.hostAnswers(ns, host)
		served := map[string]int64{}
		for _, image := range []string{"podinfo:6.0.0", "podinfo:6.0.1"} {
			served[image] = int64(answers[image]) + after[image] - before[image]
		}
		canary := 100 * float64(served["podinfo:6.0.1"]) / float64(served["podinfo:6.0.0"]+served["podinfo:6.0.1"])
		model, err := c.modelShares(ns, host, func(r meshsim.ClientRoute) bool {
			// A weighted route's model holds the weight written; a Service's, the canary's pods.
			return strings.Contains(r.Split, fmt.Sprintf("podinfo-canary=%d", w)) || (r.Split == "" && r.Model["podinfo:6.0.1"] > 0)
		})
		if err != nil {
			return err
		}
		modelled := 100 * model["podinfo:6.0.1"]
		report = append(report, fmt.Sprintf("weight %d (%s): canary served %.1f%% (%v; the test's own %v, by pod %v), modelled %.1f%% (%v)", w, lag, canary, served, answers, pods, modelled, model))
		if canary < float64(w)-3 || canary > float64(w)+3 || answers["podinfo:6.0.0"]+answers["podinfo:6.0.1"] != splitRequests {
			return fmt.Errorf("Traefik's split is off the written weight by more than 3 points: %v", report)
		}
		if math.Abs(modelled-canary) > 3 {
			return fmt.Errorf("the simulator's model of the route is off what Traefik served by more than 3 points: %v", report)
		}
	}
	t.Logf("%s router: Traefik's split, counted at the client, and the simulator's model: %v", provider, report)
	// Back to what the release left: all traffic on the primary, the target at 6.0.0 and 0
	// replicas, so that the next plan finds nothing to do.
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		return err
	}
	return c.scaleTarget(ctx, ns, 0, "podinfo:6.0.0")
}

// scaleTarget gives the target Deployment podinfo replicas and image.
func (c *testCluster) scaleTarget(ctx context.Context, ns string, replicas int32, image string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := c.kube.AppsV1().Deployments(ns).Get(ctx, "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Replicas = &replicas
		d.Spec.Template.Spec.Containers[0].Image = image
		_, err = c.kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
}

// hostAnswers counts the simulator's client's plain requests for host in ns answered, by image.
func (c *testCluster) hostAnswers(ns, host string) map[string]int64 {
	out := map[string]int64{}
	for _, r := range c.clientRoutesNow(ns) {
		if r.Host == host && !r.Tagged {
			for image, n := range r.Answered {
				out[image] += n
			}
		}
	}
	return out
}

// waitRoutes waits (up to 30 s) until the router reads the canary's weight w back.
func waitRoutes(ctx context.Context, r router.Router, w int) error {
	var got router.Weights
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, err = r.GetRoutes(ctx); err == nil && got.Canary == w {
			return nil
		}
	}
	return fmt.Errorf("the router reads %s back (%v), not the canary at %d, within 30 s", router.SplitText(got), err, w)
}

// modelShares is the simulator's model of the route for host in ns once current says it holds
// the step: the share of requests it gives each image (GET /client).
func (c *testCluster) modelShares(ns, host string, current func(meshsim.ClientRoute) bool) (map[string]float64, error) {
	var seen []meshsim.ClientRoute
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		seen = c.clientRoutesNow(ns)
		for _, r := range seen {
			if r.Host == host && !r.Tagged && current(r) {
				return r.Model, nil
			}
		}
	}
	return nil, fmt.Errorf("the simulator's model of %s never held the step within 10 s: %+v", host, seen)
}

// waitReady waits until the Deployment name has rolled its current spec out to want Ready
// replicas (rolledOut).
func (c *testCluster) waitReady(ctx context.Context, ns, name string, want int32) error {
	var d *appsv1.Deployment
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if d, err = c.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && rolledOut(d, want) {
			return nil
		}
	}
	status := "unread"
	if d != nil {
		status = fmt.Sprintf("generation %d, observed %d, %d replicas, %d updated, %d Ready", d.Generation, d.Status.ObservedGeneration,
			d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas)
	}
	return fmt.Errorf("Deployment %s/%s: not rolled out to %d Ready replicas within 60 s (%s, %v)", ns, name, want, status, err)
}

// rolledOut: the Deployment's status is of its current spec (a status read right after a
// spec change is the old one's: the Ready pods it counts may be the ones being scaled away),
// and want pods of that spec, and no others, are Ready.
func rolledOut(d *appsv1.Deployment, want int32) bool {
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.Replicas == want && st.ReadyReplicas >= want
}

// The real-proxy tests bring the canary up, then give it weight: a status read just after the
// scale-up, still the scale-down's (2 Ready pods of the old spec, on their way out), must not
// count as the canary's Ready pods, or the canary gets weight with none (the flake of
// TestAccTraefik_realMetrics).
func TestRolledOutWaitsForTheCurrentSpec(t *testing.T) {
	d := func(generation, observed int64, replicas, updated, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: generation},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, ReadyReplicas: ready},
		}
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		want bool
	}{
		{"the old spec's status", d(3, 2, 2, 2, 2), false},
		{"no pod of the new spec yet", d(3, 3, 2, 0, 2), false},
		{"an old pod still there", d(3, 3, 3, 2, 3), false},
		{"the new pods not all Ready", d(3, 3, 2, 2, 1), false},
		{"rolled out", d(3, 3, 2, 2, 2), true},
	} {
		if got := rolledOut(tc.d, 2); got != tc.want {
			t.Errorf("%s: rolledOut = %t, want %t", tc.name, got, tc.want)
		}
	}
}
