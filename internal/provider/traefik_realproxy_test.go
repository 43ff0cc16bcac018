package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// TestAccTraefik_realProxy runs a traefik release through the stack's real Traefik: the
// simulator's client sends real requests with the IngressRoute's Host to Traefik's web entry
// point, Traefik picks the pod by the weights the release writes in the TraefikService, and
// the pod's answer carries its image. A promotion shows both images answering and ends with
// the new one alone; a failing canary rolls back to the old one. Any answer no pod gave
// (a 502/503/504 or 404 of Traefik's, a refused or reset connection, a timeout) is an entry in
// the invariant log, which the namespace's cleanup requires empty.
func TestAccTraefik_realProxy(t *testing.T) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	rc := traefikRouter
	t.Run("promotion", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := httpRouteAnalysis("2s", 5)
		var user userState
		var rec *weightRecorder
		var before map[string]int64
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						rc.create(t, c, ns, &user)
						rc.createTarget(t, c, ns, "podinfo:6.0.0")
					},
					Config: rc.config(ns, "podinfo:6.0.0", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						rc.checkRoute(c, ns, 100, 0),
						c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						before = c.clientAnswers(t, ns)
						rec = c.recordObjectWeights(t, rc.route, ns, rc.name(), rc.weights)
						rc.setTarget(t, c, ns, "podinfo:6.0.1", nil)
					},
					Config: rc.config(ns, "podinfo:6.0.1", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						rc.primaryRuns(c, ns, "podinfo:6.0.1"),
						checkRecorded(&rec, 10, 40, 80, 0),
						rc.checkRoute(c, ns, 100, 0),
						// The canary answered real requests during the analysis.
						checkCluster(func() error {
							if got := c.clientAnswersNow(ns)["podinfo:6.0.1"]; got == 0 {
								return fmt.Errorf("no request through Traefik reached podinfo:6.0.1 during the rollout (answers before: %v)", before)
							}
							return nil
						}),
						// Once promoted, the new image alone answers.
						c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.0"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
			},
		})
	})
	t.Run("rollback", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := httpRouteAnalysis("3s", 2)
		failing := map[string]string{meshsim.AnnotationErrorRate: "1"}
		var user userState
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						rc.create(t, c, ns, &user)
						rc.createTarget(t, c, ns, "podinfo:6.0.0")
					},
					Config: rc.config(ns, "podinfo:6.0.0", analysis),
					Check:  c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
				},
				{
					PreConfig: func() { rc.setTarget(t, c, ns, "podinfo:6.0.1", failing) },
					Config:    rc.config(ns, "podinfo:6.0.1", analysis),
					ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%: metric request-success-rate returned \d+\.\d\d, ` +
						`outside threshold_range \[min 99\] \(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						rc.primaryRuns(c, ns, "podinfo:6.0.0"),
						rc.checkRoute(c, ns, 100, 0),
						// Rolled back: the old image alone answers.
						c.checkClientAnswers(ns, "podinfo:6.0.0", []string{"podinfo:6.0.1"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
				},
				{
					PreConfig: func() { rc.setTarget(t, c, ns, "podinfo:6.0.0", nil) },
					Config:    rc.config(ns, "podinfo:6.0.0", analysis),
				},
			},
		})
	})
}

// clientAnswersNow reads how many of the client's requests in ns each image answered
// (the simulator's GET /client); nil when it cannot be read.
func (c *testCluster) clientAnswersNow(ns string) map[string]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.env.SimulatorURL+"/client?namespace="+url.QueryEscape(ns), nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var routes []meshsim.ClientRoute
	if json.NewDecoder(resp.Body).Decode(&routes) != nil {
		return nil
	}
	out := map[string]int64{}
	for _, r := range routes {
		for image, n := range r.Answered {
			out[image] += n
		}
	}
	return out
}

func (c *testCluster) clientAnswers(t *testing.T, ns string) map[string]int64 {
	t.Helper()
	got := c.clientAnswersNow(ns)
	if got == nil {
		t.Fatalf("cannot read the simulator's client counts at %s/client", c.env.SimulatorURL)
	}
	return got
}

// checkClientAnswers waits (up to 30 s, Traefik loads routes asynchronously) until 20 more of
// the client's requests were answered by image, while none of them by the images in notFrom.
func (c *testCluster) checkClientAnswers(ns, image string, notFrom []string) resource.TestCheckFunc {
	return checkCluster(func() error {
		var first, last map[string]int64
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
			last = c.clientAnswersNow(ns)
			if first == nil {
				first = last
				continue
			}
			stray := false
			for _, other := range notFrom {
				stray = stray || last[other] > first[other]
			}
			if stray {
				// Traefik may still finish requests sent before the last change: start over.
				first = last
				continue
			}
			if last[image]-first[image] >= 20 {
				return nil
			}
		}
		return fmt.Errorf("requests through Traefik to the route in %s: want 20 answered by %s alone, answers went from %v to %v", ns, image, first, last)
	})
}

// checkNoClientEntries: the client saw no answer the application did not produce.
func (c *testCluster) checkNoClientEntries(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		violations, err := c.env.InvariantViolations(context.Background(), ns)
		if err != nil {
			return err
		}
		var client []string
		for _, v := range violations {
			if strings.Contains(v, "client: ") {
				client = append(client, v)
			}
		}
		if len(client) > 0 {
			return fmt.Errorf("the client saw %d answers no pod gave, first: %s", len(client), client[0])
		}
		return nil
	})
}
