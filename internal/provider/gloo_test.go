package provider

import (
	"context"
	"errors"
	"fmt"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The release's service port; it is part of the generated Upstreams' names.
const glooPort = 9898

func glooConfig(ns, workload, analysis, extra string) string {
	return strings.Replace(releaseConfig(ns, workload, analysis, extra), `mesh_provider = "osm"`, `mesh_provider = "gloo"`, 1)
}

// glooBlock is the `gloo` attribute for a mode; "" leaves it out (the default mode).
func glooBlock(mode string) string {
	if mode == "" {
		return ""
	}
	return fmt.Sprintf("gloo = { mode = %q }", mode)
}

func primaryUpstream(ns string) string {
	return fmt.Sprintf("%s-podinfo-primaryupstream-%d", ns, glooPort)
}

func canaryUpstream(ns string) string {
	return fmt.Sprintf("%s-podinfo-canaryupstream-%d", ns, glooPort)
}

// weightedResource is the object that carries the split in a mode: RouteTable or UpstreamGroup.
func weightedResource(mode string) schema.GroupVersionResource {
	if mode == gloo.ModeUpstreamGroup {
		return router.UpstreamGroupResource
	}
	return router.RouteTableResource
}

// createVirtualService creates the user's VirtualService for app.example.com: it delegates to
// the RouteTable podinfo or routes to the UpstreamGroup podinfo. The simulator's Gloo traffic
// enters through it, so without it no metrics flow.
func (c *testCluster) createVirtualService(t *testing.T, ns, mode string) {
	t.Helper()
	ref := map[string]any{"name": "podinfo", "namespace": ns}
	route := map[string]any{"matchers": []any{map[string]any{"prefix": "/"}}}
	if mode == gloo.ModeUpstreamGroup {
		route["routeAction"] = map[string]any{"upstreamGroup": ref}
	} else {
		route["delegateAction"] = map[string]any{"ref": ref}
	}
	vs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.solo.io/v1",
		"kind":       "VirtualService",
		"metadata":   map[string]any{"name": "podinfo", "namespace": ns},
		"spec": map[string]any{"virtualHost": map[string]any{
			"domains": []any{"app.example.com"},
			"routes":  []any{route},
		}},
	}}
	if _, err := c.dyn.Resource(router.VirtualServiceResource).Namespace(ns).Create(context.Background(), vs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// glooDestinations returns the weighted destinations of a RouteTable (its single route's
// multi action, which must inherit the VirtualService's path matchers) or an UpstreamGroup.
func glooDestinations(u *unstructured.Unstructured, mode string) ([]any, error) {
	if mode == gloo.ModeUpstreamGroup {
		list, _, _ := unstructured.NestedSlice(u.Object, "spec", "destinations")
		return list, nil
	}
	routes, _, _ := unstructured.NestedSlice(u.Object, "spec", "routes")
	if len(routes) != 1 {
		return nil, fmt.Errorf("RouteTable %s has %d routes, want 1", u.GetName(), len(routes))
	}
	route, _ := routes[0].(map[string]any)
	if inherit, _, _ := unstructured.NestedBool(route, "inheritablePathMatchers"); !inherit {
		return nil, fmt.Errorf("RouteTable %s: inheritablePathMatchers is not true: %v", u.GetName(), route)
	}
	list, _, _ := unstructured.NestedSlice(route, "routeAction", "multi", "destinations")
	return list, nil
}

// glooObjectWeights reads the primary and canary Upstream weights; a missing weight is 0, as
// Gloo stores it.
func glooObjectWeights(u *unstructured.Unstructured, mode string) (primary, canary int64, err error) {
	ns := u.GetNamespace()
	list, err := glooDestinations(u, mode)
	if err != nil {
		return 0, 0, err
	}
	if len(list) != 2 {
		return 0, 0, fmt.Errorf("%s %s has destinations %v, want 2", u.GetKind(), u.GetName(), list)
	}
	found := 0
	for _, d := range list {
		m, _ := d.(map[string]any)
		name, _, _ := unstructured.NestedString(m, "destination", "upstream", "name")
		upNS, _, _ := unstructured.NestedString(m, "destination", "upstream", "namespace")
		var w int64
		if raw, ok := m["weight"]; ok && raw != nil {
			if w, ok = raw.(int64); !ok {
				return 0, 0, fmt.Errorf("destination %s has weight %v", name, raw)
			}
		}
		switch {
		case upNS != ns:
			return 0, 0, fmt.Errorf("destination %s is in namespace %q, want %s", name, upNS, ns)
		case name == primaryUpstream(ns):
			primary, found = w, found+1
		case name == canaryUpstream(ns):
			canary, found = w, found+1
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s %s has destinations %v", u.GetKind(), u.GetName(), list)
	}
	return primary, canary, nil
}

func (c *testCluster) glooWeights(ns, mode string) (primary, canary int64, err error) {
	u, err := c.dyn.Resource(weightedResource(mode)).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	return glooObjectWeights(u, mode)
}

// recordGlooWeights watches the RouteTable or UpstreamGroup podinfo and records every distinct
// canary weight it takes; a split not summing to 100 is recorded as -1.
func (c *testCluster) recordGlooWeights(t *testing.T, ns, mode string) *weightRecorder {
	t.Helper()
	return c.recordObjectWeights(t, weightedResource(mode), ns, "podinfo", func(u *unstructured.Unstructured) (int64, int64, error) {
		return glooObjectWeights(u, mode)
	})
}

func checkGlooWeightsSeen(r **weightRecorder, mode string, want ...int64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if got := (*r).seen(); !slices.Equal(got, want) {
			return fmt.Errorf("%s canary weights were %v, want %v", weightedResource(mode).Resource, got, want)
		}
		return nil
	}
}

func (c *testCluster) checkGlooSplit(ns, mode string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		p, cw, err := c.glooWeights(ns, mode)
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("%s podinfo is %d/%d, want %d/%d", weightedResource(mode).Resource, p, cw, primary, canary)
		}
		return nil
	})
}

func (c *testCluster) glooUpstream(ns, name string) (*unstructured.Unstructured, error) {
	return c.dyn.Resource(router.UpstreamResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// checkGlooObjects asserts the generated objects of a mode: two Upstreams on the -primary and
// -canary Services, the weighted object at primary/canary, and no object of the other mode.
func (c *testCluster) checkGlooObjects(ns, mode string, primary, canary int64) resource.TestCheckFunc {
	return resource.ComposeAggregateTestCheckFunc(
		checkCluster(func() error {
			for name, svc := range map[string]string{primaryUpstream(ns): "podinfo-primary", canaryUpstream(ns): "podinfo-canary"} {
				u, err := c.glooUpstream(ns, name)
				if err != nil {
					return err
				}
				kube, _, _ := unstructured.NestedMap(u.Object, "spec", "kube")
				if kube["serviceName"] != svc || kube["serviceNamespace"] != ns || kube["servicePort"] != int64(glooPort) {
					return fmt.Errorf("Upstream %s has spec.kube %v, want Service %s/%s port %d", name, kube, ns, svc, glooPort)
				}
			}
			return nil
		}),
		c.checkGlooSplit(ns, mode, primary, canary),
		checkCluster(func() error {
			other := gloo.ModeUpstreamGroup
			if mode == gloo.ModeUpstreamGroup {
				other = gloo.ModeRouteTable
			}
			_, err := c.dyn.Resource(weightedResource(other)).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("in mode %s, %s podinfo should not exist (%v)", mode, weightedResource(other).Resource, err)
			}
			return nil
		}),
	)
}

// testGlooRelease: create, promote a healthy version with the weights watched, roll back a
// failing one, destroy.
func testGlooRelease(t *testing.T, mode string) {
	c := testAccStack(t)
	ns := c.namespace(t)
	config := func(image, errorRate string) string {
		return glooConfig(ns, manifestWorkload(image, errorRate), healthyAnalysis, glooBlock(mode))
	}
	var promoted, rolledBack *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: checkCluster(func() error {
			for _, name := range []string{primaryUpstream(ns), canaryUpstream(ns)} {
				if _, err := c.glooUpstream(ns, name); !apierrors.IsNotFound(err) {
					return fmt.Errorf("Upstream %s still exists after destroy (%v)", name, err)
				}
			}
			if _, _, err := c.glooWeights(ns, mode); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s still exists after destroy (%v)", weightedResource(mode).Resource, err)
			}
			return nil
		}),
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createVirtualService(t, ns, mode) },
				Config:    config("podinfo:6.0.0", "0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkGlooObjects(ns, mode, 100, 0),
					c.checkReady(ns, "podinfo-primary"),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					// 10% of the default 20 rps is too little for a stable ratio: with a handful of
					// requests, rate()'s extrapolation skews the success rate by several points.
					c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200")
					promoted = c.recordGlooWeights(t, ns, mode)
				},
				Config: config("podinfo:6.0.1", "0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					checkGlooWeightsSeen(&promoted, mode, 10, 20, 30, 40, 50, 0),
					c.checkGlooObjects(ns, mode, 100, 0),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkReplicas(ns, "podinfo", 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				PreConfig: func() {
					c.waitCanaryWindowEmpty(t, ns)
					rolledBack = c.recordGlooWeights(t, ns, mode)
				},
				Config: config("podinfo:6.0.2", "0.5"),
				ExpectError: wrappedPattern(`canary weight 10%: metric request-success-rate returned (4[5-9]|5[0-5])\.\d\d, outside threshold_range \[min 99\] ` +
					`\(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					checkGlooWeightsSeen(&rolledBack, mode, 10, 0),
					c.checkGlooObjects(ns, mode, 100, 0),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
		},
	})
}

func TestAccGloo_routeTable(t *testing.T) { testGlooRelease(t, gloo.ModeRouteTable) }

func TestAccGloo_upstreamGroup(t *testing.T) { testGlooRelease(t, gloo.ModeUpstreamGroup) }

// TestAccGloo_defaultMode: without a gloo block the release writes a RouteTable; switching to
// upstream_group is an in-place update that replaces it with an UpstreamGroup (updating the
// VirtualService is left to its owner).
func TestAccGloo_defaultMode(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	workload := manifestWorkload("podinfo:6.0.0", "0")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createVirtualService(t, ns, gloo.ModeRouteTable) },
				Config:    glooConfig(ns, workload, healthyAnalysis, ""),
				Check:     c.checkGlooObjects(ns, gloo.ModeRouteTable, 100, 0),
			},
			{
				Config: glooConfig(ns, workload, healthyAnalysis, glooBlock(gloo.ModeUpstreamGroup)),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: c.checkGlooObjects(ns, gloo.ModeUpstreamGroup, 100, 0),
			},
		},
	})
}

// promValue runs an instant query against the stack's Prometheus; ok is false when it
// returns no sample or NaN.
func (c *testCluster) promValue(ctx context.Context, query string) (value float64, ok bool, err error) {
	v, err := c.prom.Query(ctx, query)
	if errors.Is(err, metrics.ErrNoValues) {
		return 0, false, nil
	}
	return v, err == nil, err
}

// glooCanaryRequests counts the requests the gateway sent to the canary Upstream in the last 10s.
func glooCanaryRequests(ns string) string {
	return fmt.Sprintf(`sum(increase(envoy_cluster_upstream_rq{envoy_cluster_name=%q}[10s]))`, canaryUpstream(ns)+"_"+ns)
}

// waitCanaryWindowEmpty waits until the 10s metric window holds no canary request. The canary
// Upstream keeps its name across versions, so a run that starts within one window of the
// previous run's canary traffic would also measure the previous version.
func (c *testCluster) waitCanaryWindowEmpty(t *testing.T, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, ok, err := c.promValue(ctx, glooCanaryRequests(ns))
		return err == nil && (!ok || n == 0), nil
	})
	if err != nil {
		t.Fatalf("the canary of %s still had requests in the last 10s after 30s: %v", ns, err)
	}
}

// glooSuccessRate polls the built-in Gloo request-success-rate, as the release renders it,
// and keeps its values whenever the window holds at least 100 canary requests: a ratio of
// fewer requests (right after the canary's first weight change) says little.
type glooSuccessRate struct {
	mu     sync.Mutex
	values []float64
	stop   context.CancelFunc
	t      *testing.T
}

func (c *testCluster) pollGlooSuccessRate(t *testing.T, ns string) *glooSuccessRate {
	t.Helper()
	tmpl, ok := registry.Builtin("gloo", "request-success-rate")
	if !ok {
		t.Fatal("no built-in gloo request-success-rate")
	}
	query, err := metrics.Render(tmpl, metrics.Vars{Name: "podinfo", Namespace: ns, Target: "podinfo", Service: "podinfo", Interval: "10s"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &glooSuccessRate{stop: cancel, t: t}
	go func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if n, ok, err := c.promValue(ctx, glooCanaryRequests(ns)); err != nil || !ok || n < 100 {
				continue
			}
			v, ok, err := c.promValue(ctx, query)
			if err != nil || !ok {
				continue
			}
			p.mu.Lock()
			p.values = append(p.values, v)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(cancel)
	return p
}

// check stops polling and asserts that every value was within 3 points of want.
func (p *glooSuccessRate) check(want float64) error {
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.Logf("built-in gloo request-success-rate during the run: %v", p.values)
	if len(p.values) < 3 {
		return fmt.Errorf("Prometheus returned %d success-rate values during the run (%v), want at least 3", len(p.values), p.values)
	}
	for _, v := range p.values {
		if math.Abs(v-want) > 3 {
			return fmt.Errorf("built-in gloo request-success-rate values %v, want all within 3 of %g", p.values, want)
		}
	}
	return nil
}

// TestAccGloo_successRate: a canary failing 20% of its requests measures 80% with the built-in
// query, both in Prometheus directly and as the release judges it (threshold_range 77..83).
func TestAccGloo_successRate(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := `
    interval     = "3s"
    threshold    = 2
    step_weights = [20, 40, 60]
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 77, max = 83 } },
    ]`
	var rate *glooSuccessRate
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createVirtualService(t, ns, gloo.ModeRouteTable) },
				Config:    glooConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), analysis, ""),
			},
			{
				PreConfig: func() {
					// More load, so that even the first scrapes of a window hold enough
					// canary requests for a stable ratio.
					c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "400")
					rate = c.pollGlooSuccessRate(t, ns)
				},
				Config: glooConfig(ns, manifestWorkload("podinfo:6.0.1", "0.2"), analysis, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					func(*terraform.State) error { return rate.check(80) },
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// createConfigUpstream creates Flagger's e2e "config" Upstream, whose settings the generated
// Upstreams copy.
func (c *testCluster) createConfigUpstream(t *testing.T, ns string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gloo.solo.io/v1",
		"kind":       "Upstream",
		"metadata":   map[string]any{"name": "config-upstream", "namespace": ns},
		"spec": map[string]any{
			"static": map[string]any{"hosts": []any{map[string]any{"addr": "example.com", "port": int64(80)}}},
			"connectionConfig": map[string]any{
				"connectTimeout":           "2s",
				"maxRequestsPerConnection": int64(51),
			},
			"loadBalancerConfig": map[string]any{"roundRobin": map[string]any{"slowStartConfig": map[string]any{
				"slowStartWindow":  "2m",
				"minWeightPercent": int64(5),
			}}},
		},
	}}
	if _, err := c.dyn.Resource(router.UpstreamResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkUpstreamField asserts a numeric field of both generated Upstreams.
func (c *testCluster) checkUpstreamField(ns string, want float64, fields ...string) resource.TestCheckFunc {
	return checkCluster(func() error {
		for _, name := range []string{primaryUpstream(ns), canaryUpstream(ns)} {
			u, err := c.glooUpstream(ns, name)
			if err != nil {
				return err
			}
			raw, _, _ := unstructured.NestedFieldNoCopy(u.Object, append([]string{"spec"}, fields...)...)
			var got float64
			switch v := raw.(type) {
			case int64:
				got = float64(v)
			case float64:
				got = v
			default:
				return fmt.Errorf("Upstream %s: spec.%s is %v, want %g", name, strings.Join(fields, "."), raw, want)
			}
			if got != want {
				return fmt.Errorf("Upstream %s: spec.%s is %g, want %g", name, strings.Join(fields, "."), got, want)
			}
			if _, static, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "static"); static {
				return fmt.Errorf("Upstream %s copied spec.static from upstream_ref; only settings are copied", name)
			}
		}
		return nil
	})
}

// TestAccGloo_upstreamRef follows Flagger's Gloo e2e: the generated Upstreams take the config
// Upstream's settings, and a later change to its loadBalancerConfig shows in the plan and
// reaches them on apply.
func TestAccGloo_upstreamRef(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	configNS := c.namespace(t)
	config := glooConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis,
		fmt.Sprintf("upstream_ref = { name = \"config-upstream\", namespace = %q }", configNS))
	slowStart := []string{"loadBalancerConfig", "roundRobin", "slowStartConfig", "minWeightPercent"}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createVirtualService(t, ns, gloo.ModeRouteTable)
					c.createConfigUpstream(t, configNS)
				},
				Config: config,
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkUpstreamField(ns, 51, "connectionConfig", "maxRequestsPerConnection"),
					c.checkUpstreamField(ns, 5, slowStart...),
					c.checkGlooObjects(ns, gloo.ModeRouteTable, 100, 0),
				),
			},
			{
				PreConfig: func() {
					patch := []byte(`{"spec":{"loadBalancerConfig":{"roundRobin":{"slowStartConfig":{"minWeightPercent":20}}}}}`)
					if _, err := c.dyn.Resource(router.UpstreamResource).Namespace(configNS).Patch(context.Background(),
						"config-upstream", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkUpstreamField(ns, 20, slowStart...),
					c.checkUpstreamField(ns, 51, "connectionConfig", "maxRequestsPerConnection"),
				),
			},
		},
	})
}

// TestAccGloo_errors: a missing upstream_ref fails the create clearly; an unknown mode is a
// plan-time error naming gloo.mode.
func TestAccGloo_errors(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	workload := manifestWorkload("podinfo:6.0.0", "0")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      glooConfig(ns, workload, healthyAnalysis, `gloo = { mode = "weighted" }`),
				PlanOnly:    true,
				ExpectError: wrapped(`Attribute gloo.mode value must be one of: ["route_table" "upstream_group"], got: "weighted"`),
			},
			{
				PreConfig:   func() { c.createVirtualService(t, ns, gloo.ModeRouteTable) },
				Config:      glooConfig(ns, workload, healthyAnalysis, `upstream_ref = { name = "missing" }`),
				ExpectError: wrapped(fmt.Sprintf(`upstream_ref: Upstream %s/missing not found`, ns)),
			},
		},
	})
}

// glooPlan is the planned value of a new release in a mode, with every attribute the
// configuration leaves out null.
func glooPlan(t *testing.T, ns, mode string) tfsdk.Plan {
	t.Helper()
	ctx := context.Background()
	var s fwresource.SchemaResponse
	(&ReleaseResource{}).Schema(ctx, fwresource.SchemaRequest{}, &s)
	typ := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
	attrs := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		attrs[name] = tftypes.NewValue(at, nil)
	}
	plan := tfsdk.Plan{Schema: s.Schema, Raw: tftypes.NewValue(typ, attrs)}
	for p, v := range map[string]any{
		"name": "podinfo", "namespace": ns, "mesh_provider": "gloo", "target_ref.name": "podinfo",
		"service.port": int64(glooPort), "analysis.interval": "3s", "gloo.mode": mode,
	} {
		parts := strings.Split(p, ".")
		at := path.Root(parts[0])
		for _, part := range parts[1:] {
			at = at.AtName(part)
		}
		if d := plan.SetAttribute(ctx, at, v); d.HasError() {
			t.Fatalf("setting %s: %v", p, d)
		}
	}
	return plan
}

func routingWarnings(d diag.Diagnostics) string {
	var out []string
	for _, w := range d.Warnings() {
		if w.Summary() == "canary_release routing" {
			out = append(out, w.Detail())
		}
	}
	return strings.Join(out, "\n")
}

// TestAccGloo_noRouteWarning: the plan warns when no VirtualService reaches the generated
// object, and stops warning once one does. terraform-plugin-testing cannot assert warnings,
// so the resource's ModifyPlan is called directly against the stack.
func TestAccGloo_noRouteWarning(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	res := &ReleaseResource{c: &clients{kube: c.kube, dynamic: c.dyn}}
	for mode, want := range map[string]string{
		gloo.ModeRouteTable:    "no Gloo VirtualService delegates to RouteTable %[1]s/podinfo: add a route with delegateAction.ref {name: podinfo, namespace: %[1]s}",
		gloo.ModeUpstreamGroup: "no Gloo VirtualService routes to UpstreamGroup %[1]s/podinfo: add a route with routeAction.upstreamGroup {name: podinfo, namespace: %[1]s}",
	} {
		t.Run(mode, func(t *testing.T) {
			ns := c.namespace(t)
			plan := glooPlan(t, ns, mode)
			modifyPlan := func() fwresource.ModifyPlanResponse {
				req := fwresource.ModifyPlanRequest{
					Plan:  plan,
					State: tfsdk.State{Schema: plan.Schema, Raw: tftypes.NewValue(plan.Raw.Type(), nil)},
				}
				resp := fwresource.ModifyPlanResponse{Plan: plan}
				res.ModifyPlan(context.Background(), req, &resp)
				return resp
			}
			resp := modifyPlan()
			if resp.Diagnostics.HasError() {
				t.Fatalf("ModifyPlan: %v", resp.Diagnostics)
			}
			if got, w := routingWarnings(resp.Diagnostics), fmt.Sprintf(want, ns); !strings.Contains(got, w) {
				t.Errorf("without a VirtualService the plan warns %q, want %q", got, w)
			}
			c.createVirtualService(t, ns, mode)
			if got := routingWarnings(modifyPlan().Diagnostics); got != "" {
				t.Errorf("with a VirtualService routing to podinfo the plan still warns %q", got)
			}
		})
	}
}

// TestAccGloo_destroyLeavesRoute: with target_ref, destroy gives the workload back to the
// target and leaves the RouteTable that the user's VirtualService delegates to, now leading to
// the apex Service: after destroy the VirtualService still reaches Ready pods through the
// simulator (its requests are answered, and the invariant log stays empty).
func TestAccGloo_destroyLeavesRoute(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	apexUpstream := fmt.Sprintf("%s-podinfo-%d", ns, glooPort)
	config := glooConfig(ns, targetRefWorkload("podinfo:6.0.0"), healthyAnalysis, "")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: checkCluster(func() error {
			rt, err := c.dyn.Resource(router.RouteTableResource).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("RouteTable podinfo after destroy: %w; the user's VirtualService delegates to it", err)
			}
			if _, owned := rt.GetLabels()[router.LabelRelease]; owned {
				return fmt.Errorf("the left-behind RouteTable still carries %s", router.LabelRelease)
			}
			if rt.GetAnnotations()[router.AnnotationLeftBehind] == "" {
				return fmt.Errorf("the left-behind RouteTable has no %s annotation", router.AnnotationLeftBehind)
			}
			routes, _, _ := unstructured.NestedSlice(rt.Object, "spec", "routes")
			var single string
			if len(routes) == 1 {
				route, _ := routes[0].(map[string]any)
				single, _, _ = unstructured.NestedString(route, "routeAction", "single", "upstream", "name")
			}
			if single != apexUpstream {
				return fmt.Errorf("left-behind RouteTable routes %v, want one route to Upstream %s", routes, apexUpstream)
			}
			for _, name := range []string{primaryUpstream(ns), canaryUpstream(ns)} {
				if _, err := c.glooUpstream(ns, name); !apierrors.IsNotFound(err) {
					return fmt.Errorf("Upstream %s still exists after destroy (%v)", name, err)
				}
			}
			if err := c.checkReady(ns, "podinfo")(nil); err != nil {
				return err
			}
			// The VirtualService's traffic now flows through the left-behind route to the target.
			query := fmt.Sprintf(`sum(increase(envoy_cluster_upstream_rq{envoy_cluster_name=%q,envoy_response_code=~"2.."}[10s]))`, apexUpstream+"_"+ns)
			return wait.PollUntilContextTimeout(context.Background(), time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
				n, ok, err := c.promValue(ctx, query)
				return err == nil && ok && n > 0, nil
			})
		}),
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					c.createVirtualService(t, ns, gloo.ModeRouteTable)
				},
				Config: config,
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkGlooObjects(ns, gloo.ModeRouteTable, 100, 0),
					c.checkReady(ns, "podinfo-primary"),
				),
			},
		},
	})
}
