package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// createTraefikIngress makes the user's Ingress of class traefik for the namespace's own host
// (Traefik serves every namespace's Ingresses), naming the apex Service podinfo, which the
// kubernetes router points at a side by its selector. It is checked untouched.
func (c *testCluster) createTraefikIngress(t *testing.T, ns string, user *userState) {
	t.Helper()
	ref := c.createUserObject(t, ingresses, ns, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"metadata": map[string]any{"name": "podinfo"},
		"spec": map[string]any{
			"ingressClassName": "traefik",
			"rules": []any{map[string]any{"host": ns + ".ing.example.com", "http": map[string]any{"paths": []any{map[string]any{
				"path": "/", "pathType": "Prefix",
				"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(9898)}}},
			}}}}},
		},
	}})
	rc := routerCase{userObjects: func(*testing.T, *testCluster, string) []objectRef { return []objectRef{ref} }}
	rc.create(t, c, ns, user)
}

// TestAccKubernetes_realProxy runs kubernetes releases through the stack's real Traefik: the
// user's Ingress names the apex Service, Traefik sends to the Ready pods its endpoints hold,
// and the simulator's client judges the answers. Each sub-test promotes a good revision and
// rolls a failing one back; the client sees the old image alone before, the new one alone
// once promoted and after the rollback, and no answer that no pod gave (a 502/503/404 of
// Traefik's while the selector switches or the canary scales down would be one).
func TestAccKubernetes_realProxy(t *testing.T) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	// Blue/green: the apex selects the primary through the iterations (the load tester's
	// traffic is analysed), so a failing canary never answers a user's request.
	t.Run("blueGreen", func(t *testing.T) {
		ns := c.namespace(t)
		var user userState
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() { c.createTraefikIngress(t, ns, &user) },
					Config:    c.kubernetesConfig(ns, "podinfo:6.0.0", "0"),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkApexSelects(ns, 100, 0),
						c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() { rec = c.recordObjectWeights(t, services, ns, "podinfo", apexSelects) },
					Config:    c.kubernetesConfig(ns, "podinfo:6.0.1", "0"),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						func(s *terraform.State) error { return checkRecorded(&rec, 100, 0)(s) },
						c.checkApexSelects(ns, 100, 0),
						c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.0"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
				{
					PreConfig:   func() { rec = c.recordObjectWeights(t, services, ns, "podinfo", apexSelects) },
					Config:      c.kubernetesConfig(ns, "podinfo:6.0.2", "1"),
					ExpectError: wrappedPattern(`metric request-success-rate returned [0-9.]+, outside threshold_range \[min 99\]`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						c.checkApexSelects(ns, 100, 0),
						func(s *terraform.State) error { return checkRecorded(&rec)(s) },
						c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.2"}),
						c.checkNeverAnswered(ns, "podinfo:6.0.2"),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
				},
			},
		})
	})
	// The replica ratio: the apex selects both sides while the canary's Ready pods follow the
	// steps, so the canary's pods answer real requests through Traefik beside the primary's.
	t.Run("replicaRatio", func(t *testing.T) {
		ns := c.namespace(t)
		var user userState
		var rec *ratioRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() { c.createTraefikIngress(t, ns, &user) },
					Config:    c.meshlessConfig(ns, "podinfo:6.0.0", "0"),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkApexSelects(ns, 100, 0),
						c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() { rec = c.recordRatio(t, ns) },
					Config:    c.meshlessConfig(ns, "podinfo:6.0.1", "0"),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						func(s *terraform.State) error {
							return rec.check("apex selects the primary", "apex selects both sides, 1 Ready canary pods",
								"apex selects both sides, 4 Ready canary pods", "apex selects the primary")(s)
						},
						c.checkApexSelects(ns, 100, 0),
						c.checkCanaryAnswered(ns),
						c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.0"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
				{
					PreConfig:   func() { rec = c.recordRatio(t, ns) },
					Config:      c.meshlessConfig(ns, "podinfo:6.0.2", "1"),
					ExpectError: wrappedPattern(`Canary analysis failed at canary weight 20%: metric request-success-rate returned [0-9.]+, outside threshold_range \[min 99\]`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						func(s *terraform.State) error {
							return rec.check("apex selects the primary", "apex selects both sides, 1 Ready canary pods", "apex selects the primary")(s)
						},
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						c.checkApexSelects(ns, 100, 0),
						c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.2"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
				},
			},
		})
	})
}

// checkCanaryAnswered: the canary's Deployment (podinfo) answered some of the client's requests.
func (c *testCluster) checkCanaryAnswered(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		routes := c.clientRoutesNow(ns)
		var n int64
		for _, r := range routes {
			n += r.ByWorkload["podinfo"]
		}
		if n == 0 {
			return fmt.Errorf("the canary's pods answered no request through Traefik: %+v", routes)
		}
		return nil
	})
}

// checkNeverAnswered: no request of the client's was answered by image.
func (c *testCluster) checkNeverAnswered(ns, image string) resource.TestCheckFunc {
	return checkCluster(func() error {
		if got := c.clientAnswersNow(ns); got == nil || got[image] != 0 {
			return fmt.Errorf("requests through Traefik answered by %s: %v, want none", image, got)
		}
		return nil
	})
}
