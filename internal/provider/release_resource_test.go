package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/notify"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const addr = "canary_release.test"

// healthyAnalysis translates Flagger's OSM e2e analysis, with shorter intervals.
const healthyAnalysis = `
    interval    = "3s"
    threshold   = 2
    max_weight  = 50
    step_weight = 10
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
      { name = "request-duration", interval = "10s", threshold_range = { max = 500 } },
    ]`

func releaseConfig(ns, workload, analysis, extra string) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = "osm"
  %[2]s
  service = {
    port        = 9898
    target_port = "9898"
  }
  analysis = {%[3]s
  }
  progress_deadline_seconds = 60
  %[4]s
}
`, ns, workload, analysis, extra)
}

func targetRefWorkload(image string) string {
	return fmt.Sprintf(`target_ref = { name = "podinfo" }
  triggers   = { image = %q }`, image)
}

func manifestWorkload(image, errorRate string) string {
	return fmt.Sprintf(`manifest = yamlencode({
    apiVersion = "apps/v1"
    kind       = "Deployment"
    metadata   = { name = "podinfo" }
    spec = {
      replicas = 2
      selector = { matchLabels = { app = "podinfo" } }
      template = {
        metadata = {
          labels      = { app = "podinfo" }
          annotations = { "sim.canary-release.dev/error-rate" = %[2]q }
        }
        spec = { containers = [{ name = "podinfo", image = %[1]q, ports = [{ name = "http", containerPort = 9898 }] }] }
      }
    }
  })`, image, errorRate)
}

// wrappedPattern matches a regular expression in an error that Terraform may have wrapped at
// any space: each space of the pattern matches any run of white space.
func wrappedPattern(pattern string) *regexp.Regexp {
	return regexp.MustCompile(strings.Join(strings.Fields(pattern), `\s+`))
}

// wrapped matches literal text in an error that Terraform may have wrapped at any space.
func wrapped(text string) *regexp.Regexp {
	words := strings.Fields(text)
	for i, w := range words {
		words[i] = regexp.QuoteMeta(w)
	}
	return wrappedPattern(strings.Join(words, " "))
}

// checkCluster wraps a cluster assertion as a TestCheckFunc.
func checkCluster(f func() error) resource.TestCheckFunc {
	return func(*terraform.State) error { return f() }
}

func (c *testCluster) checkImage(ns, name, image string) resource.TestCheckFunc {
	return checkCluster(func() error {
		d, err := c.deployment(ns, name)
		if err != nil {
			return err
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
			return fmt.Errorf("Deployment %s runs %s, want %s", name, got, image)
		}
		return nil
	})
}

func (c *testCluster) checkSplit(ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		p, cw, err := c.splitWeights(ns, "podinfo")
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("TrafficSplit is %d/%d, want %d/%d", p, cw, primary, canary)
		}
		return nil
	})
}

func (c *testCluster) checkReplicas(ns, name string, replicas int32) resource.TestCheckFunc {
	return checkCluster(func() error {
		d, err := c.deployment(ns, name)
		if err != nil {
			return err
		}
		if *d.Spec.Replicas != replicas {
			return fmt.Errorf("Deployment %s has %d replicas, want %d", name, *d.Spec.Replicas, replicas)
		}
		return nil
	})
}

func (c *testCluster) checkReady(ns, name string) resource.TestCheckFunc {
	return checkCluster(func() error {
		d, err := c.deployment(ns, name)
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != *d.Spec.Replicas || *d.Spec.Replicas == 0 {
			return fmt.Errorf("Deployment %s has %d of %d replicas ready", name, d.Status.ReadyReplicas, *d.Spec.Replicas)
		}
		return nil
	})
}

func (c *testCluster) checkWeights(r *weightRecorder, want ...int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		if got := r.seen(); !slices.Equal(got, want) {
			return fmt.Errorf("TrafficSplit canary weights were %v, want %v", got, want)
		}
		return nil
	})
}

func statusPhase(phase string) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("phase"), knownvalue.StringExact(phase))
}

// TestAccRelease_targetRef follows Flagger's OSM e2e test: initialise, promote a new image
// set on the target by another tool, import.
func TestAccRelease_targetRef(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)) },
				Config:    releaseConfig(ns, targetRefWorkload("podinfo:6.0.0"), healthyAnalysis, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					c.checkReady(ns, "podinfo-primary"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					checkCluster(func() error {
						for svc, want := range map[string]string{"podinfo": "podinfo-primary", "podinfo-primary": "podinfo-primary", "podinfo-canary": "podinfo"} {
							s, err := c.kube.CoreV1().Services(ns).Get(context.Background(), svc, metav1.GetOptions{})
							if err != nil {
								return err
							}
							if s.Spec.Selector["app"] != want {
								return fmt.Errorf("Service %s selects app=%s, want %s", svc, s.Spec.Selector["app"], want)
							}
						}
						return nil
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{
					statusPhase("Initialized"),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(ns+"/podinfo")),
				},
			},
			{
				PreConfig: func() {
					rec = c.recordWeights(t, ns, "podinfo")
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: releaseConfig(ns, targetRefWorkload("podinfo:6.0.1"), healthyAnalysis, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(s *terraform.State) error { return c.checkWeights(rec, 10, 20, 30, 40, 50, 0)(s) },
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					checkCluster(func() error {
						return c.checkEvents(ns, "Initialized", "Progressing", "Promoting", "Finalising", "Succeeded")
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     ns + "/podinfo",
				ImportStateVerify: true,
				// Never recorded in the state ConfigMap (see the docs' Import section); the
				// rollout_plan of the last plan is not the cluster's to restore.
				ImportStateVerifyIgnore: []string{"triggers", "rollout_plan", "last_run"},
			},
		},
	})
}

// checkEvents asserts that the target's Events tell the story, in this order, as a user
// reading them sees it.
func (c *testCluster) checkEvents(ns string, reasons ...string) error {
	list, err := c.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=podinfo"})
	if err != nil {
		return err
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var seen []string
	for _, e := range list.Items {
		// Under a short interval one Event tells several (notify.EventStory).
		for _, told := range notify.EventStory(e.Reason, e.Message) {
			seen = append(seen, told[0])
		}
	}
	i := 0
	for _, r := range seen {
		if i < len(reasons) && r == reasons[i] {
			i++
		}
	}
	if i < len(reasons) {
		return fmt.Errorf("Events on podinfo were %v, want %v in order", seen, reasons)
	}
	return nil
}

// TestAccRelease_rollback: an unhealthy version fails the apply, the primary keeps serving,
// and the next plan proposes the release again.
func TestAccRelease_rollback(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, "")},
			{
				// 200 requests/s give the 10 % canary enough requests per window for a steady rate.
				PreConfig: func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200") },
				Config:    releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0.5"), healthyAnalysis, ""),
				ExpectError: wrappedPattern(`canary weight 10%: metric request-success-rate returned (4[5-9]|5[0-5])\.\d\d, outside threshold_range \[min 99\] ` +
					`\(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%: 100% of traffic is back on the primary podinfo-primary`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile("request-success-rate")),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
			{
				Config:             releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0.5"), healthyAnalysis, ""),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
		},
	})
}

// TestAccRelease_stepWeights follows Flagger's test-steps.sh.
func TestAccRelease_stepWeights(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := strings.Replace(strings.Replace(healthyAnalysis, "max_weight  = 50\n", "", 1), "step_weight = 10", "step_weights = [10, 20, 30, 40, 50, 60]", 1)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), analysis, "")},
			{
				PreConfig: func() { rec = c.recordWeights(t, ns, "podinfo") },
				Config:    releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0"), analysis, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error { return c.checkWeights(rec, 10, 20, 30, 40, 50, 60, 0)(s) },
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// TestAccRelease_analysisOnlyChange: new analysis settings reconcile but release nothing.
func TestAccRelease_analysisOnlyChange(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, "")},
			{
				PreConfig: func() { rec = c.recordWeights(t, ns, "podinfo") },
				Config:    releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), strings.Replace(healthyAnalysis, "threshold   = 2", "threshold   = 4", 1), ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error { return c.checkWeights(rec)(s) },
					resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile("nothing to release")),
					resource.TestCheckResourceAttr(addr, "analysis.threshold", "4"),
				),
			},
		},
	})
}

// TestAccRelease_noTraffic: with the simulator's load off, the checks find no values.
func TestAccRelease_noTraffic(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := strings.Replace(healthyAnalysis, "threshold   = 2", "threshold   = 1", 1)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), analysis, "")},
			{
				PreConfig: func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "0") },
				Config:    releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0"), analysis, ""),
				// Flagger's wording, plus the hint users need.
				ExpectError: wrapped(`no values found for osm metric request-success-rate: is the canary receiving traffic?`),
			},
		},
	})
}

func (c *testCluster) setServiceAnnotation(t *testing.T, ns, name, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if _, err := c.kube.CoreV1().Services(ns).Patch(context.Background(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAccRelease_updateTimeout: a timeouts.update shorter than the run rolls back.
func TestAccRelease_updateTimeout(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	timeouts := `timeouts = { update = "12s" }`
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, timeouts)},
			{
				Config:      releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0"), healthyAnalysis, timeouts),
				ExpectError: wrapped(`the apply's timeout expired before the analysis finished. Rolled back at canary weight`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkSplit(ns, 100, 0),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
		},
	})
}

// TestAccRelease_drift: an out-of-band change to the Deployment and a deleted primary
// Service show in the plan, and apply repairs both.
func TestAccRelease_drift(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	config := releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, "")
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:hotfix", nil) },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo", "podinfo:6.0.0"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
				),
			},
			{
				PreConfig: func() {
					// Deleting the primary Service sends traffic nowhere until the repair, and the
					// simulator rightly logs it; so the invariant log is checked before the sabotage.
					c.assertNoViolations(t, ns)
					c.skipViolationCheck(ns)
					if err := c.kube.CoreV1().Services(ns).Delete(context.Background(), "podinfo-primary", metav1.DeleteOptions{}); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: checkCluster(func() error {
					_, err := c.kube.CoreV1().Services(ns).Get(context.Background(), "podinfo-primary", metav1.GetOptions{})
					return err
				}),
			},
		},
	})
}

// TestAccRelease_destroyReverts: destroy gives the workload back to the target first.
func TestAccRelease_destroyReverts(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: checkCluster(func() error {
			d, err := c.deployment(ns, "podinfo")
			if err != nil {
				return err
			}
			if *d.Spec.Replicas != 2 || d.Status.ReadyReplicas != 2 {
				return fmt.Errorf("target has %d/%d ready replicas after destroy, want 2/2", d.Status.ReadyReplicas, *d.Spec.Replicas)
			}
			svc, err := c.kube.CoreV1().Services(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if svc.Spec.Selector["app"] != "podinfo" {
				return fmt.Errorf("apex selects app=%s after destroy, want podinfo", svc.Spec.Selector["app"])
			}
			if _, err := c.deployment(ns, "podinfo-primary"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("primary still exists after destroy (%v)", err)
			}
			if _, _, err := c.splitWeights(ns, "podinfo"); !apierrors.IsNotFound(err) {
				return fmt.Errorf("TrafficSplit still exists after destroy (%v)", err)
			}
			return nil
		}),
		Steps: []resource.TestStep{{
			PreConfig: func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)) },
			Config:    releaseConfig(ns, targetRefWorkload("podinfo:6.0.0"), healthyAnalysis, ""),
		}},
	})
}

// TestAccRelease_destroyKeeps: with revert_on_deletion = false the generated objects stay, serving.
func TestAccRelease_destroyKeeps(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			c.checkReady(ns, "podinfo-primary"),
			c.checkSplit(ns, 100, 0),
		),
		Steps: []resource.TestStep{{
			PreConfig: func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)) },
			Config:    releaseConfig(ns, targetRefWorkload("podinfo:6.0.0"), healthyAnalysis, "revert_on_deletion = false"),
		}},
	})
}

// TestAccRelease_destroyManifest: a release-owned Deployment goes with the release.
func TestAccRelease_destroyManifest(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy: checkCluster(func() error {
			for _, name := range []string{"podinfo", "podinfo-primary"} {
				if _, err := c.deployment(ns, name); !apierrors.IsNotFound(err) {
					return fmt.Errorf("Deployment %s still exists after destroy (%v)", name, err)
				}
			}
			return nil
		}),
		Steps: []resource.TestStep{{
			Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, ""),
			Check:  c.checkReady(ns, "podinfo-primary"),
		}},
	})
}

// hookServer answers like Flagger's load tester and records the payloads.
type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	payloads []map[string]any
	paths    []string
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p map[string]any
		_ = json.Unmarshal(body, &p)
		h.mu.Lock()
		h.payloads = append(h.payloads, p)
		h.paths = append(h.paths, r.URL.Path)
		h.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/fail") {
			http.Error(w, "load test failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookServer) calls(path string) []map[string]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]any
	for i, p := range h.paths {
		if p == path {
			out = append(out, h.payloads[i])
		}
	}
	return out
}

func TestAccRelease_webhooks(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	hooks := newHookServer(t)
	analysis := func(rolloutPath, prePath string) string {
		return fmt.Sprintf(`
    interval    = "2s"
    threshold   = 2
    step_weights = [20, 40]
    webhooks = [
      { name = "gate", type = "pre-rollout", url = "%[1]s%[3]s" },
      { name = "load-test", url = "%[1]s%[2]s", timeout = "5s", metadata = { cmd = "hey -z 1m -q 10 -c 2 http://podinfo-canary:9898/" } },
    ]`, hooks.URL, rolloutPath, prePath)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), analysis("/ok", "/pre"), "")},
			{
				Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0"), analysis("/ok", "/pre"), ""),
				Check: checkCluster(func() error {
					calls := hooks.calls("/ok")
					if len(calls) != 2 {
						return fmt.Errorf("rollout hook called %d times, want once per step (2)", len(calls))
					}
					p := calls[0]
					meta, _ := p["metadata"].(map[string]any)
					if p["name"] != "podinfo" || p["namespace"] != ns || p["phase"] != "Progressing" || p["checksum"] == "" || meta["cmd"] == nil {
						return fmt.Errorf("payload = %v", p)
					}
					if n := len(hooks.calls("/pre")); n != 1 {
						return fmt.Errorf("pre-rollout hook called %d times, want 1", n)
					}
					return nil
				}),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				Config:      releaseConfig(ns, manifestWorkload("podinfo:6.0.2", "0"), analysis("/fail", "/pre"), ""),
				ExpectError: wrapped(`rollout webhook load-test failed: status 500: load test failed (failed checks: 2 of threshold 2)`),
			},
			{
				Config:      releaseConfig(ns, manifestWorkload("podinfo:6.0.3", "0"), analysis("/ok", "/fail-pre"), ""),
				ExpectError: wrapped(`Canary analysis failed at canary weight 0%: pre-rollout webhook gate failed: status 500: load test failed (failed checks: 2 of threshold 2)`),
			},
		},
	})
}

func TestAccRelease_planErrors(t *testing.T) {
	testAccStack(t)
	ns := "default"
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      strings.Replace(releaseConfig(ns, targetRefWorkload("x"), healthyAnalysis, ""), `"osm"`, `"apisix"`, 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`route_ref is required when mesh_provider = "apisix"`),
			},
			{
				Config:      releaseConfig(ns, targetRefWorkload("x"), `interval = "1s"`+"\n    step_weight = 10\n    step_weights = [10]", ""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`Set exactly one of analysis.step_weight and analysis.step_weights`),
			},
			{
				Config:      releaseConfig(ns, targetRefWorkload("x"), `step_weight = 10`+"\n    metrics = [{ name = \"error-budget\", threshold_range = { max = 1 } }]", ""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`metric "error-budget" is not built in`),
			},
			{
				Config:      releaseConfig(ns, `manifest = "kind: Service"`, `step_weight = 10`, ""),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`manifest must be an apps/v1 Deployment`),
			},
		},
	})
}

// Renaming the target is refused at plan time: done in place it would leave the old primary,
// Services and routes serving. The release keeps serving the old name afterwards.
func TestAccRelease_renameRefused(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	renamed := strings.Replace(manifestWorkload("podinfo:6.0.0", "0"), `metadata   = { name = "podinfo" }`, `metadata   = { name = "web" }`, 1)
	if renamed == manifestWorkload("podinfo:6.0.0", "0") {
		t.Fatal("the rename did not change the manifest: the test would test nothing")
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, "")},
			{
				Config:      releaseConfig(ns, renamed, healthyAnalysis, ""),
				ExpectError: wrappedPattern(`(?s)The target Deployment cannot be renamed in place.* named after "podinfo"; renaming the target to "web" would leave them serving\. To move the release, do it in two applies`),
			},
			{
				// Nothing changed: the release still serves from the old name's objects.
				Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, ""),
				Check:  resource.ComposeTestCheckFunc(c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"), c.checkSplit(ns, 100, 0)),
			},
		},
	})
}
