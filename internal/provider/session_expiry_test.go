package provider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// simCookies reads the Set-Cookie headers the simulator's answers carried in ns.
func (c *testCluster) simCookies(ns string) ([]meshsim.CookieRecord, error) {
	resp, err := http.Get(c.env.SimulatorURL + "/cookies?namespace=" + url.QueryEscape(ns))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /cookies: %s (a simulator built before it recorded Set-Cookie headers?)", resp.Status)
	}
	var out []meshsim.CookieRecord
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// handedOutCookie is the value of the canary cookie the canary's answers set (Max-Age 600),
// other than not: what a client the canary answered during the last release holds.
func (c *testCluster) handedOutCookie(ns, not string) (string, error) {
	recs, err := c.simCookies(ns)
	if err != nil {
		return "", err
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		value, ok := strings.CutSuffix(r.SetCookie, "; Max-Age=600; Path=/")
		value, isCanary := strings.CutPrefix(value, "canary=")
		if ok && isCanary && !r.Tagged && r.Service == "podinfo-canary" && value != not {
			return value, nil
		}
	}
	return "", fmt.Errorf("no answer of the canary set a new canary cookie: %+v", recs)
}

// expectExpiry has the apex's clients send cookie canary=value back, and waits until the
// primary answers them with an expiring Set-Cookie for it (and no one else answers them).
func (c *testCluster) expectExpiry(t *testing.T, ns, value string) error {
	c.setServiceAnnotation(t, ns, "podinfo", meshsim.AnnotationABHeader, "cookie=canary="+value)
	want := "canary=" + value + "; Max-Age=-1; Path=/"
	since := time.Now().Add(-time.Second)
	var recs []meshsim.CookieRecord
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var err error
		if recs, err = c.simCookies(ns); err != nil {
			return err
		}
		for _, r := range recs {
			if r.Tagged && r.Last.After(since) && strings.Contains(r.SetCookie, "canary="+value) && (r.SetCookie != want || r.Service != "podinfo-primary") {
				return fmt.Errorf("a request carrying the cookie got %q from %s, want %q from podinfo-primary", r.SetCookie, r.Service, want)
			}
		}
		for _, r := range recs {
			if r.Tagged && r.Last.After(since) && r.SetCookie == want && r.Service == "podinfo-primary" {
				return nil
			}
		}
	}
	return fmt.Errorf("no request carrying canary=%s got %q from podinfo-primary; cookies seen: %+v", value, want, recs)
}

// splitAndSticky reads the split of the last route or rule, marking a sticky route to the
// canary before it (abMarked), for the weight recorder.
func splitAndSticky(field string, weights func(*unstructured.Unstructured) (int64, int64, error)) func(*unstructured.Unstructured) (int64, int64, error) {
	return func(u *unstructured.Unstructured) (int64, int64, error) {
		plain, list := lastOnly(u, "spec", field)
		p, cw, err := weights(plain)
		if err != nil {
			return 0, 0, err
		}
		for _, item := range list[:len(list)-1] {
			if _, to, err := weights(withList(u, []any{item}, "spec", field)); err == nil && to == 100 {
				return p - abMarked, cw + abMarked, nil
			}
		}
		return p, cw, nil
	}
}

// TestAccSessionAffinity_expiresCookies, on Istio and Gateway API (a namespace each): while the
// canary has weight, its answers set the canary cookie and requests carrying it stay on it.
// Once the release is promoted, a client sending that cookie back is answered by the primary
// with an expiring Set-Cookie; the next release, which rolls back, hands out a new cookie, and
// after the rollback that one is expired the same way.
func TestAccSessionAffinity_expiresCookies(t *testing.T) {
	analysis := httpRouteAnalysis("2s", 2) + `
    session_affinity = { cookie_name = "canary", max_age = 600, path = "/" }`
	for _, tc := range []struct {
		name    string
		config  func(ns, image string) string
		gvr     schema.GroupVersionResource
		extract func(*unstructured.Unstructured) (int64, int64, error)
		gateway bool
	}{
		{"istio", func(ns, image string) string { return istioConfig(ns, targetRefWorkload(image), analysis) },
			istioVirtualServices, splitAndSticky("http", istioWeights), false},
		{"gatewayapi", func(ns, image string) string {
			return httpRouteConfig(ns, "gatewayapi", image, gatewayService, gatewayCase.extra, analysis)
		}, httpRoutes, splitAndSticky("rules", httpRouteWeights), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testAccStack(t)
			ns := c.namespace(t)
			var rec *weightRecorder
			var promoted string
			resource.ParallelTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{
					{
						PreConfig: func() {
							if tc.gateway {
								c.createGateway(t, ns)
							}
							c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
						},
						Config: tc.config(ns, "podinfo:6.0.0"),
					},
					{
						PreConfig: func() {
							rec = c.recordObjectWeights(t, tc.gvr, ns, "podinfo", tc.extract)
							c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
						},
						Config: tc.config(ns, "podinfo:6.0.1"),
						Check: resource.ComposeAggregateTestCheckFunc(
							c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
							// Sticky at every step, then 100/0 with no sticky route to the canary.
							checkSeen(tc.name+" route podinfo", &rec, abMarked+10, abMarked+40, abMarked+80, 0),
							checkCluster(func() error {
								var err error
								if promoted, err = c.handedOutCookie(ns, ""); err != nil {
									return err
								}
								return c.expectExpiry(t, ns, promoted)
							}),
						),
						ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
					},
					{
						PreConfig: func() {
							c.setTemplate(t, ns, "podinfo", "podinfo:6.0.2", map[string]string{meshsim.AnnotationErrorRate: "1"})
						},
						Config:      tc.config(ns, "podinfo:6.0.2"),
						ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%`),
					},
					{
						RefreshState:       true,
						ExpectNonEmptyPlan: true,
						Check: resource.ComposeAggregateTestCheckFunc(
							resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
							c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
							checkCluster(func() error {
								rolledBack, err := c.handedOutCookie(ns, promoted)
								if err != nil {
									return err
								}
								return c.expectExpiry(t, ns, rolledBack)
							}),
						),
					},
					{
						// Back to the promoted template, so that destroy may revert to it.
						PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
						Config:    tc.config(ns, "podinfo:6.0.1"),
					},
				},
			})
		})
	}
}
