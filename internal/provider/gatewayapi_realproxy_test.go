package provider

import (
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// gatewayOnTraefik: the gatewayapi release of podinfo for the namespace's own host (Traefik
// serves every namespace's routes), attached to the user's Gateway "public" of the stack's
// GatewayClass traefik. Its listener "http" takes the port of Traefik's web entry point:
// Traefik serves a listener on the entry point of the same port. The Gateway is not checked
// untouched, since Traefik writes its status.
func gatewayOnTraefik(ns string) routerCase {
	return routerCase{
		meshProvider: "gatewayapi",
		serviceLines: fmt.Sprintf(`
    hosts        = [%q]
    gateway_refs = [{ name = "public", section_name = "http" }]`, ns+".gw.example.com"),
		route:     httpRoutes,
		routeKind: "HTTPRoute",
		weights:   httpRouteABWeights,
		abTesting: true,
		userObjects: func(t *testing.T, c *testCluster, ns string) []objectRef {
			t.Helper()
			_, port, err := net.SplitHostPort(c.env.ProxyAddress)
			if err != nil {
				t.Fatalf("CANARY_PROXY_ADDRESS %q: %v", c.env.ProxyAddress, err)
			}
			n, _ := strconv.ParseInt(port, 10, 64)
			c.createUserObject(t, gateways, ns, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
				"metadata": map[string]any{"name": "public"},
				"spec": map[string]any{"gatewayClassName": "traefik", "listeners": []any{
					map[string]any{"name": "http", "protocol": "HTTP", "port": n},
				}},
			}})
			return nil
		},
	}
}

// TestAccGatewayAPI_realProxy runs gatewayapi releases through the stack's real Traefik, on its
// GatewayClass: promotion and rollback (runRealProxy), and an A/B test whose header match
// Traefik applies, judged by who answered the client's requests.
func TestAccGatewayAPI_realProxy(t *testing.T) {
	runRealProxy(t, gatewayOnTraefik)
	t.Run("abtest", func(t *testing.T) { runRealProxyABTest(t, gatewayOnTraefik) })
}

// runRealProxyABTest: during the A/B iterations the requests carrying the header (the client
// tags 30 % of them) are answered by the canary's pods and no plain request is; once promoted
// the new image alone answers, and the client saw no answer that no pod gave.
func runRealProxyABTest(t *testing.T, caseFor func(ns string) routerCase) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	ns := c.namespace(t)
	rc := caseFor(ns)
	var user userState
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					rc.create(t, c, ns, &user)
					rc.createTarget(t, c, ns, "podinfo:6.0.0")
				},
				Config: rc.config(ns, "podinfo:6.0.0", abAnalysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					rc.checkRoute(c, ns, 100, 0),
					c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					c.tagTraffic(t, ns)
					rec = c.recordObjectWeights(t, rc.route, ns, rc.name(), rc.weights)
					rc.setTarget(t, c, ns, "podinfo:6.0.1", nil)
				},
				Config: rc.config(ns, "podinfo:6.0.1", abAnalysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					rc.primaryRuns(c, ns, "podinfo:6.0.1"),
					checkSeen(rc.routeKind+" "+rc.name(), &rec, abMarked, 0),
					rc.checkRoute(c, ns, 100, 0),
					c.checkABAnswers(ns),
					c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.0"}),
					c.checkNoClientEntries(ns),
					rc.canaryIdle(c, ns),
					user.checkUntouched(c, ns),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// checkABAnswers: the canary's Deployment (podinfo) answered tagged requests and no plain one.
func (c *testCluster) checkABAnswers(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		routes := c.clientRoutesNow(ns)
		var tagged, plain int64
		for _, r := range routes {
			if r.Tagged {
				tagged += r.ByWorkload["podinfo"]
			} else {
				plain += r.ByWorkload["podinfo"]
			}
		}
		if tagged == 0 || plain != 0 {
			return fmt.Errorf("the canary's pods answered %d tagged and %d plain requests through Traefik, want some and none: %+v", tagged, plain, routes)
		}
		return nil
	})
}
