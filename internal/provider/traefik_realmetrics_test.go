package provider

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/traefik"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// traefikJob is the stack's Prometheus job that scrapes the real Traefik: the simulator
// exports series of the same names for its own model of Traefik (job meshsim).
const traefikJob = `job="traefik"`

// TestAccTraefik_realMetrics (issue 33 item 5): the traefik router's built-in queries, rendered
// for a live release at canary weight 40 and read from the series the real Traefik exports
// (the queries' selectors narrowed to its job), find data for both sides: the success rate
// is 100 (no pod fails) and the p99 duration a number of milliseconds. A query whose metric
// name, labels or service naming differed from Traefik's would find nothing.
func TestAccTraefik_realMetrics(t *testing.T) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	ns := c.namespace(t)
	host := ns + ".metrics.example.com"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() {
				c.createHostIngressRoute(t, ns, host)
				c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
			},
			Config: traefikRouter.config(ns, "podinfo:6.0.0", httpRouteAnalysis("2s", 5)),
			Check:  checkCluster(func() error { return c.checkRealTraefikQueries(t, ns) }),
		}},
	})
}

// createHostIngressRoute is the user's IngressRoute for host, to the release's TraefikService.
func (c *testCluster) createHostIngressRoute(t *testing.T, ns, host string) {
	t.Helper()
	c.createUserObject(t, ingressRoutes, ns, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
		"metadata": map[string]any{"name": "podinfo"},
		"spec": map[string]any{"entryPoints": []any{"web"}, "routes": []any{map[string]any{
			"match": "Host(`" + host + "`)", "kind": "Rule",
			"services": []any{map[string]any{"name": "podinfo", "kind": "TraefikService"}},
		}}},
	}})
}

// checkRealTraefikQueries brings the canary up at weight 40 while the simulator's client sends
// its requests through Traefik, reads every built-in query for both sides from Traefik's own
// series, and leaves the release as it found it.
func (c *testCluster) checkRealTraefikQueries(t *testing.T, ns string) error {
	ctx := context.Background()
	if err := c.scaleTarget(ctx, ns, 2, "podinfo:6.0.1"); err != nil {
		return err
	}
	if err := c.waitReady(ctx, ns, "podinfo", 2); err != nil {
		return err
	}
	r, err := registry.NewRouter("traefik", router.Clients{Dynamic: c.dyn, Kube: c.kube},
		router.Spec{Namespace: ns, Name: "podinfo", Target: "podinfo", Apex: "podinfo", Port: 80})
	if err != nil {
		return err
	}
	if err := r.SetRoutes(ctx, router.Weights{Primary: 60, Canary: 40}); err != nil {
		return err
	}
	if err := c.waitTraefikApplied(ctx, "weight 40", canaryWeightApplied(ns, 40)); err != nil {
		return err
	}
	queries := traefik.Driver{}.Describe().Queries
	names := make([]string, 0, len(queries))
	for name := range queries {
		names = append(names, name)
	}
	sort.Strings(names)
	var read []string
	for _, name := range names {
		for _, side := range []string{metrics.SideCanary, metrics.SidePrimary} {
			q, err := metrics.Render(queries[name], metrics.Vars{Name: "podinfo", Namespace: ns, Target: "podinfo", Service: "podinfo", Interval: "15s"}.ForSide(side))
			if err != nil {
				return err
			}
			q, err = narrowToJob(q, traefikJob)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			v, err := c.waitQueryValue(ctx, q)
			if err != nil {
				return fmt.Errorf("%s for the %s, from Traefik's own series: %w\n%s", name, side, err, q)
			}
			if strings.Contains(name, "success") && v != 100 {
				return fmt.Errorf("%s for the %s reads %g from Traefik's series, want 100 (no pod fails): %s", name, side, v, q)
			}
			if v <= 0 || math.IsInf(v, 0) {
				return fmt.Errorf("%s for the %s reads %g from Traefik's series: %s", name, side, v, q)
			}
			read = append(read, fmt.Sprintf("%s %s: %.4g", name, side, v))
		}
	}
	t.Logf("the traefik router's built-in queries on the real Traefik's series: %v", read)
	if err := r.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		return err
	}
	// As the release's own rollback does: the canary keeps its pods until Traefik applied the
	// route back and the drain is over (the simulator follows the route at its next tick).
	if err := c.waitTraefikApplied(ctx, "weight 0", canaryWeightApplied(ns, 0)); err != nil {
		return err
	}
	time.Sleep(rollout.DefaultDrainDelay)
	return c.scaleTarget(ctx, ns, 0, "podinfo:6.0.0")
}

// narrowToJob adds the matcher to every selector of a built-in traefik query (each opens with
// {service=~); it fails when a query has none, so that no series escapes the narrowing.
func narrowToJob(q, matcher string) (string, error) {
	const open = "{service=~"
	if strings.Count(q, open) == 0 || strings.Count(q, open) != strings.Count(q, "{") {
		return "", fmt.Errorf("a selector does not open with %s: %s", open, q)
	}
	return strings.ReplaceAll(q, open, "{"+matcher+",service=~"), nil
}

// waitQueryValue waits (up to 60 s: Prometheus scrapes every second, and a rate needs two
// samples in the window) for the query to return a number.
func (c *testCluster) waitQueryValue(ctx context.Context, q string) (float64, error) {
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		var v float64
		if v, err = c.prom.Query(ctx, q); err == nil {
			return v, nil
		}
		if !errors.Is(err, metrics.ErrNoValues) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("no value within 60 s: %w", err)
}
