package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

var apisixRoutes = schema.GroupVersionResource{Group: "apisix.apache.org", Version: "v2", Resource: "apisixroutes"}

// canaryRoute is the generated route: <route_ref>-<apex>-canary.
const canaryRoute = "podinfo-podinfo-canary"

// loadTestCmd is the rollout webhook's command in Flagger's APISIX e2e test.
const loadTestCmd = "hey -z 1m -q 10 -c 2 -h2 -host foobar.com http://apisix-gateway.apisix/api/info"

// apisixConfig translates Flagger's APISIX e2e Canary field by field.
func apisixConfig(ns, image, route, analysis string) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = "apisix"
  target_ref    = { api_version = "apps/v1", kind = "Deployment", name = "podinfo" }
  triggers      = { image = %[2]q }
  route_ref     = { api_version = "apisix.apache.org/v2", kind = "ApisixRoute", name = %[3]q }
  progress_deadline_seconds = 60
  service = {
    port        = 80
    target_port = "9898"
  }
  analysis = {%[4]s
  }
}
`, ns, image, route, analysis)
}

// flaggerMetrics are the e2e test's checks, with 10s windows instead of 1m and 30s.
const flaggerMetrics = `
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
      { name = "request-duration", interval = "10s", threshold_range = { max = 500 } },`

// apisixAnalysis is the e2e test's analysis (max_weight 50, step_weight 5) with a shorter
// interval and the given threshold, metrics and load-test webhook URL.
func apisixAnalysis(interval string, threshold int, metricList, hookURL string) string {
	return fmt.Sprintf(`
    interval    = %[1]q
    threshold   = %[2]d
    max_weight  = 50
    step_weight = 5
    metrics = [%[3]s
    ]
    webhooks = [
      { name = "load-test", type = "rollout", url = %[4]q, timeout = "5s", metadata = { cmd = %[5]q } },
    ]`, interval, threshold, metricList, hookURL, loadTestCmd)
}

// userRoute is the user's ApisixRoute of Flagger's e2e test: one rule, `method`.
func userRoute(ns string, backends ...map[string]any) *unstructured.Unstructured {
	if len(backends) == 0 {
		backends = []map[string]any{{"serviceName": "podinfo", "servicePort": int64(80)}}
	}
	list := make([]any, len(backends))
	for i, b := range backends {
		list[i] = b
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apisix.apache.org/v2",
		"kind":       "ApisixRoute",
		"metadata": map[string]any{
			"name": "podinfo", "namespace": ns,
			"labels":      map[string]any{"team": "web"},
			"annotations": map[string]any{"owner": "alice"},
		},
		"spec": map[string]any{"http": []any{map[string]any{
			"name": "method",
			"match": map[string]any{
				"hosts":   []any{"foobar.com"},
				"methods": []any{"GET"},
				"paths":   []any{"/*"},
			},
			"backends": list,
			"plugins": []any{map[string]any{
				"name": "prometheus", "enable": true, "config": map[string]any{"prefer_name": true},
			}},
		}}},
	}}
	return u
}

func (c *testCluster) createRoute(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := c.dyn.Resource(apisixRoutes).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *testCluster) route(ns, name string) (*unstructured.Unstructured, error) {
	return c.dyn.Resource(apisixRoutes).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// apisixNamespace is c.namespace for tests whose user route exists before the release.
// Until the release creates the apex Service, that route sends the simulator's load to a
// Service that does not exist yet, as in Flagger's e2e test, and the simulator rightly logs it.
// Those entries are allowed; any other entry fails the test. After seal(), none at all is.
// seal waits until the simulator has routed a request through the generated route, which
// shadows the user's route: every entry logged before that tick is in the log by then, however
// far the simulator's informers lagged behind the apply.
func (c *testCluster) apisixNamespace(t *testing.T) (ns string, seal func()) {
	t.Helper()
	ns = c.namespace(t)
	c.skipViolationCheck(ns)
	gap := fmt.Sprintf("ApisixRoute/podinfo: traffic sent to Service %s/podinfo, which has no Ready pods", ns)
	var mu sync.Mutex
	sealedAt := -1
	// Registered after c.namespace's cleanup, so it runs before the namespace goes.
	t.Cleanup(func() {
		violations, err := c.env.InvariantViolations(context.Background(), ns)
		if err != nil {
			t.Errorf("reading the simulator's invariant log: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		allowed := 0
		defer func() { t.Logf("%d simulator log entries from before the release created the apex Service", allowed) }()
		for i, v := range violations {
			if v == gap && (sealedAt < 0 || i < sealedAt) {
				allowed++
				continue
			}
			t.Errorf("the simulator saw an invariant violation in %s (entry %d of %d, sealed after %d): %s", ns, i+1, len(violations), sealedAt, v)
			return
		}
	})
	return ns, func() {
		c.waitForQuery(t, apisixCanaryRouteAnswered(ns), func(v float64) bool { return v > 0 })
		violations, err := c.env.InvariantViolations(context.Background(), ns)
		if err != nil {
			t.Fatalf("reading the simulator's invariant log: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		sealedAt = len(violations)
	}
}

// apisixCanaryRouteAnswered counts the requests the simulator sent through the generated route
// that were answered: above 0 once that route shadows the user's.
func apisixCanaryRouteAnswered(ns string) string {
	return fmt.Sprintf(`sum(apisix_http_status{route=~"%s_%s_.+",code="200"})`, ns, canaryRoute)
}

// routeSnapshot is what "unchanged, byte for byte" compares.
type routeSnapshot struct {
	resourceVersion string
	generation      int64
	object          []byte
}

func (c *testCluster) snapshotRoute(ns, name string) (routeSnapshot, error) {
	u, err := c.route(ns, name)
	if err != nil {
		return routeSnapshot{}, err
	}
	raw, err := json.Marshal(u.Object)
	return routeSnapshot{resourceVersion: u.GetResourceVersion(), generation: u.GetGeneration(), object: raw}, err
}

func (c *testCluster) checkRouteUnchanged(ns, name string, before *routeSnapshot) resource.TestCheckFunc {
	return checkCluster(func() error {
		now, err := c.snapshotRoute(ns, name)
		if err != nil {
			return err
		}
		if now.resourceVersion != before.resourceVersion || now.generation != before.generation {
			return fmt.Errorf("user route %s was written: resourceVersion %s -> %s, generation %d -> %d",
				name, before.resourceVersion, now.resourceVersion, before.generation, now.generation)
		}
		if string(now.object) != string(before.object) {
			return fmt.Errorf("user route %s changed:\n%s\nwas\n%s", name, now.object, before.object)
		}
		return nil
	})
}

// apisixWeights reads the primary and canary backend weights of a route's rules.
func apisixWeights(u *unstructured.Unstructured) (primary, canary int64, err error) {
	return sideWeights(u, []string{"spec", "http"}, "backends", "serviceName")
}

// sideWeights reads the weights of the podinfo-primary and podinfo-canary backends of a
// router object's rules: rulesAt is where the rules are, backendsKey the list in each rule and
// nameKey the field that names the Service.
func sideWeights(u *unstructured.Unstructured, rulesAt []string, backendsKey, nameKey string) (primary, canary int64, err error) {
	rules, _, _ := unstructured.NestedSlice(u.Object, rulesAt...)
	found := 0
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		backends, _ := rule[backendsKey].([]any)
		for _, b := range backends {
			m, _ := b.(map[string]any)
			w, ok := m["weight"].(int64)
			switch m[nameKey] {
			case "podinfo-primary":
				primary, found = w, found+1
			case "podinfo-canary":
				canary, found = w, found+1
			default:
				continue
			}
			if !ok {
				return 0, 0, fmt.Errorf("backend %v has no integer weight", m)
			}
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s %s has rules %v", u.GetKind(), u.GetName(), rules)
	}
	return primary, canary, nil
}

func checkRouteWeights(r **weightRecorder, want ...int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		if got := (*r).seen(); !slices.Equal(got, want) {
			return fmt.Errorf("ApisixRoute %s canary weights were %v, want %v", canaryRoute, got, want)
		}
		return nil
	})
}

// checkCanaryRoute compares the generated route with the user's rule: the same rule, at
// priority 10000, split between the primary and the canary at the given weights.
func (c *testCluster) checkCanaryRoute(ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		user, err := c.route(ns, "podinfo")
		if err != nil {
			return err
		}
		gen, err := c.route(ns, canaryRoute)
		if err != nil {
			return err
		}
		rules, _, _ := unstructured.NestedSlice(gen.Object, "spec", "http")
		userRules, _, _ := unstructured.NestedSlice(user.Object, "spec", "http")
		if len(rules) != 1 || len(userRules) != 1 {
			return fmt.Errorf("ApisixRoute %s has %d http rules, want 1 (user route: %d)", canaryRoute, len(rules), len(userRules))
		}
		rule, userRule := rules[0].(map[string]any), userRules[0].(map[string]any)
		if rule["priority"] != int64(10000) {
			return fmt.Errorf("ApisixRoute %s has priority %v, want 10000", canaryRoute, rule["priority"])
		}
		for _, k := range []string{"name", "match", "plugins"} {
			if !reflect.DeepEqual(rule[k], userRule[k]) {
				return fmt.Errorf("ApisixRoute %s has %s %v, want the user route's %v", canaryRoute, k, rule[k], userRule[k])
			}
		}
		want := []any{
			map[string]any{"serviceName": "podinfo-primary", "servicePort": int64(80), "weight": primary},
			map[string]any{"serviceName": "podinfo-canary", "servicePort": int64(80), "weight": canary},
		}
		if !reflect.DeepEqual(rule["backends"], want) {
			return fmt.Errorf("ApisixRoute %s has backends %v, want %v", canaryRoute, rule["backends"], want)
		}
		if gen.GetLabels()["team"] != "web" || gen.GetAnnotations()["owner"] != "alice" {
			return fmt.Errorf("ApisixRoute %s has labels %v and annotations %v, want the user route's", canaryRoute, gen.GetLabels(), gen.GetAnnotations())
		}
		return nil
	})
}

func (c *testCluster) checkServices(ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		for svc, app := range map[string]string{"podinfo": "podinfo-primary", "podinfo-primary": "podinfo-primary", "podinfo-canary": "podinfo"} {
			s, err := c.kube.CoreV1().Services(ns).Get(context.Background(), svc, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if s.Spec.Selector["app"] != app {
				return fmt.Errorf("Service %s selects app=%s, want %s", svc, s.Spec.Selector["app"], app)
			}
			if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 80 || s.Spec.Ports[0].TargetPort != intstr.FromInt32(9898) {
				return fmt.Errorf("Service %s has ports %v, want 80 -> 9898", svc, s.Spec.Ports)
			}
		}
		return nil
	})
}

// loadTester answers like Flagger's load tester (202) and records, with each payload, the
// canary weight of the generated route at the moment of the call.
type loadTester struct {
	*httptest.Server
	mu    sync.Mutex
	calls []loadTestCall
}

type loadTestCall struct {
	payload map[string]any
	weight  int64
}

func (c *testCluster) newLoadTester(t *testing.T, ns string) *loadTester {
	l := &loadTester{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		call := loadTestCall{weight: -1}
		_ = json.Unmarshal(body, &call.payload)
		if u, err := c.route(ns, canaryRoute); err == nil {
			if _, cw, err := apisixWeights(u); err == nil {
				call.weight = cw
			}
		}
		l.mu.Lock()
		l.calls = append(l.calls, call)
		l.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(l.Close)
	return l
}

// checkEveryStep asserts a correct Flagger payload was posted while the route held each weight.
func (l *loadTester) checkEveryStep(ns string, steps ...int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		atWeight := map[int64]int{}
		checksum := ""
		for _, call := range l.calls {
			p := call.payload
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range p {
					if !yield(k) {
						return
					}
				}
			})
			meta, _ := p["metadata"].(map[string]any)
			sum, _ := p["checksum"].(string)
			if !slices.Equal(keys, []string{"checksum", "metadata", "name", "namespace", "phase"}) ||
				p["name"] != "podinfo" || p["namespace"] != ns || p["phase"] != "Progressing" || sum == "" ||
				len(meta) != 1 || meta["cmd"] != loadTestCmd {
				return fmt.Errorf("load tester received %v, want Flagger's payload", p)
			}
			if checksum != "" && sum != checksum {
				return fmt.Errorf("checksum changed within one release: %s then %s", checksum, sum)
			}
			checksum = sum
			atWeight[call.weight]++
		}
		for _, s := range steps {
			if atWeight[s] == 0 {
				return fmt.Errorf("no rollout webhook call at canary weight %d; calls per weight: %v", s, atWeight)
			}
		}
		return nil
	})
}

// TestAccApisix_release follows Flagger's APISIX e2e test: initialise next to the user's
// route, promote a healthy image step by step, then follow a change to the user's route.
func TestAccApisix_release(t *testing.T) {
	c := testAccStack(t)
	ns, seal := c.apisixNamespace(t)
	hooks := c.newLoadTester(t, ns)
	analysis := apisixAnalysis("2s", 10, flaggerMetrics, hooks.URL)
	var userBefore routeSnapshot
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					c.createRoute(t, userRoute(ns))
					var err error
					if userBefore, err = c.snapshotRoute(ns, "podinfo"); err != nil {
						t.Fatal(err)
					}
				},
				Config: apisixConfig(ns, "podinfo:6.0.0", "podinfo", analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkReady(ns, "podinfo-primary"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkReplicas(ns, "podinfo", 0),
					c.checkServices(ns),
					c.checkCanaryRoute(ns, 100, 0),
					c.checkRouteUnchanged(ns, "podinfo", &userBefore),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					seal()
					rec = c.recordObjectWeights(t, apisixRoutes, ns, canaryRoute, apisixWeights)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: apisixConfig(ns, "podinfo:6.0.1", "podinfo", analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkRouteWeights(&rec, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 0),
					c.checkCanaryRoute(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					hooks.checkEveryStep(ns, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50),
					c.checkRouteUnchanged(ns, "podinfo", &userBefore),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				// The user changes the route's plugins; the same configuration plans an update
				// and the apply carries the change to the canary route, releasing nothing.
				PreConfig: func() {
					rec.stop()
					rec = c.recordObjectWeights(t, apisixRoutes, ns, canaryRoute, apisixWeights)
					c.addRoutePlugin(t, ns, "podinfo", map[string]any{"name": "cors", "enable": true})
					var err error
					if userBefore, err = c.snapshotRoute(ns, "podinfo"); err != nil {
						t.Fatal(err)
					}
				},
				Config: apisixConfig(ns, "podinfo:6.0.1", "podinfo", analysis),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkCanaryRoute(ns, 100, 0),
					checkCluster(func() error {
						gen, err := c.route(ns, canaryRoute)
						if err != nil {
							return err
						}
						plugins, _, _ := unstructured.NestedSlice(gen.Object, "spec", "http")
						if !strings.Contains(fmt.Sprint(plugins), "cors") {
							return fmt.Errorf("ApisixRoute %s lacks the cors plugin: %v", canaryRoute, plugins)
						}
						return nil
					}),
					checkRouteWeights(&rec),
					resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile("nothing to release")),
					c.checkRouteUnchanged(ns, "podinfo", &userBefore),
				),
			},
		},
	})
}

func (c *testCluster) addRoutePlugin(t *testing.T, ns, name string, plugin map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := c.route(ns, name)
		if err != nil {
			return err
		}
		rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "http")
		rule := rules[0].(map[string]any)
		rule["plugins"] = append(rule["plugins"].([]any), plugin)
		if err := unstructured.SetNestedSlice(u.Object, rules, "spec", "http"); err != nil {
			return err
		}
		_, err = c.dyn.Resource(apisixRoutes).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// backToPromoted puts the target back on the promoted template, as the destroy refusal tells a
// user to, so that the test's destroy can hand the traffic back to it.
func (c *testCluster) backToPromoted(t *testing.T, ns string, analysis string) resource.TestStep {
	return resource.TestStep{
		PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.0", nil) },
		Config:    apisixConfig(ns, "podinfo:6.0.0", "podinfo", analysis),
	}
}

// TestAccApisix_rollback: a canary failing all of its requests fails the built-in check even
// though, at 5% weight, the primary's healthy traffic on the same route dilutes it.
func TestAccApisix_rollback(t *testing.T) {
	c := testAccStack(t)
	ns, seal := c.apisixNamespace(t)
	hooks := c.newLoadTester(t, ns)
	// A 5s interval puts 4-5s of 5% canary traffic into the first 10s window: at error rate 1
	// the route's success rate is 97.5-98%, below 99 at the first check.
	analysis := apisixAnalysis("5s", 2, flaggerMetrics, hooks.URL)
	failing := map[string]string{"sim.canary-release.dev/error-rate": "1"}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					c.createRoute(t, userRoute(ns))
				},
				Config: apisixConfig(ns, "podinfo:6.0.0", "podinfo", analysis),
			},
			{
				PreConfig: func() {
					seal()
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", failing)
				},
				Config: apisixConfig(ns, "podinfo:6.0.1", "podinfo", analysis),
				ExpectError: wrappedPattern(`Canary analysis failed at canary weight 5%: metric request-success-rate returned 9\d\.\d\d, ` +
					`outside threshold_range \[min 99\] \(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 5%: ` +
					`100% of traffic is back on the primary podinfo-primary`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile("request-success-rate")),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkCanaryRoute(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
			{
				// Revert would hand all traffic to the rejected template: destroy refuses.
				Config:  apisixConfig(ns, "podinfo:6.0.1", "podinfo", analysis),
				Destroy: true,
				ExpectError: wrappedPattern(`revert_on_deletion would hand all traffic to Deployment ` + ns +
					`/podinfo, whose revision \(\w+: its pod template and the ConfigMaps and Secrets it uses\) is not the last promoted one`),
			},
			c.backToPromoted(t, ns, analysis),
		},
	})
}

// TestAccApisix_noTraffic: with the simulator's load off, the built-in checks find no values.
func TestAccApisix_noTraffic(t *testing.T) {
	c := testAccStack(t)
	ns, seal := c.apisixNamespace(t)
	hooks := c.newLoadTester(t, ns)
	analysis := apisixAnalysis("2s", 2, flaggerMetrics, hooks.URL)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					c.createRoute(t, userRoute(ns))
				},
				Config: apisixConfig(ns, "podinfo:6.0.0", "podinfo", analysis),
			},
			{
				PreConfig: func() {
					seal()
					c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "0")
					// The route carried load until now: wait until the 10s windows hold none.
					c.waitForQuery(t, fmt.Sprintf(`sum(increase(apisix_http_status{route=~"%s_%s_.+"}[10s]))`, ns, canaryRoute),
						func(v float64) bool { return v == 0 })
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: apisixConfig(ns, "podinfo:6.0.1", "podinfo", analysis),
				ExpectError: wrapped(`Canary analysis failed at canary weight 5%: no values found for apisix metric request-success-rate: ` +
					`is the canary receiving traffic? (failed checks: 2 of threshold 2). Rolled back at canary weight 5%`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkCanaryRoute(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
			c.backToPromoted(t, ns, analysis),
		},
	})
}

// waitForQuery polls Prometheus until the query's value satisfies ok.
func (c *testCluster) waitForQuery(t *testing.T, query string, ok func(float64) bool) {
	t.Helper()
	var last float64
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		last, lastErr = c.prom.Query(ctx, query)
		return lastErr == nil && ok(last), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: last value %v, error %v", query, last, lastErr)
	}
}

// Custom checks from docs-src/apisix.md: judge every upstream pod (APISIX's node label) on its
// own, so that a bad canary pod is not diluted by the primary's traffic on the same route.
const perPodMetrics = `
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
      {
        name            = "pod-request-duration"
        interval        = "10s"
        threshold_range = { max = 500 }
        query           = <<-EOT
          max(histogram_quantile(0.99, sum by (node, le) (rate(apisix_http_latency_bucket{type="request",
            route=~"{{ namespace }}_{{ route }}-{{ service }}-canary_.+",node!=""}[{{ interval }}]))))
        EOT
      },
      {
        name            = "pod-request-success-rate"
        interval        = "10s"
        threshold_range = { min = 99 }
        query           = <<-EOT
          min(
            sum by (node) (rate(apisix_http_status{route=~"{{ namespace }}_{{ route }}-{{ service }}-canary_.+",node!="",code!~"5.."}[{{ interval }}]))
            /
            sum by (node) (rate(apisix_http_status{route=~"{{ namespace }}_{{ route }}-{{ service }}-canary_.+",node!=""}[{{ interval }}]))
          ) * 100
        EOT
      },`

// TestAccApisix_perPodQuery: a canary failing 10% of its requests. At 5% weight that is at
// most 0.5% of the route's requests, so the built-in success rate stays above 99 and passes;
// the per-pod query sees the canary pods at about 90% and rolls back at the first check.
func TestAccApisix_perPodQuery(t *testing.T) {
	c := testAccStack(t)
	ns, seal := c.apisixNamespace(t)
	hooks := c.newLoadTester(t, ns)
	// 5s with 400 requests per second gives each canary pod some 40 requests per window, so
	// that a 10% error rate shows at the first check.
	analysis := apisixAnalysis("5s", 1, perPodMetrics, hooks.URL)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					c.createRoute(t, userRoute(ns))
				},
				Config: apisixConfig(ns, "podinfo:6.0.0", "podinfo", analysis),
			},
			{
				PreConfig: func() {
					seal()
					c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "400")
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", map[string]string{"sim.canary-release.dev/error-rate": "0.1"})
				},
				Config: apisixConfig(ns, "podinfo:6.0.1", "podinfo", analysis),
				// Metrics run in order and stop at the first failure: this message means that the
				// built-in success rate and the per-pod duration passed at the same check.
				ExpectError: wrappedPattern(`Canary analysis failed at canary weight 5%: metric pod-request-success-rate returned (8\d|9[0-4])\.\d\d, ` +
					`outside threshold_range \[min 99\] \(failed checks: 1 of threshold 1\)\. Rolled back at canary weight 5%`),
			},
			c.backToPromoted(t, ns, analysis),
		},
	})
}

// TestAccApisix_routeErrors: a route_ref the router cannot use fails the apply, saying why.
func TestAccApisix_routeErrors(t *testing.T) {
	c := testAccStack(t)
	for _, tc := range []struct {
		name, route string
		setup       func(t *testing.T, ns string)
		want        string
	}{
		{
			name: "notFound", route: "missing",
			want: "route_ref: ApisixRoute %[1]s/missing not found",
		},
		{
			name: "twoBackends", route: "podinfo",
			setup: func(t *testing.T, ns string) {
				c.createRoute(t, userRoute(ns,
					map[string]any{"serviceName": "podinfo", "servicePort": int64(80), "weight": int64(100)},
					map[string]any{"serviceName": "podinfo-v2", "servicePort": int64(80), "weight": int64(0)}))
			},
			want: `route_ref: ApisixRoute %[1]s/podinfo: http rule "method" has 2 backends; only one http backend is supported (serviceName podinfo)`,
		},
		{
			name: "noApexRule", route: "podinfo",
			setup: func(t *testing.T, ns string) {
				// The rule serves another Service; the simulator sends it no load.
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: "frontend", Namespace: ns, Annotations: map[string]string{"sim.canary-release.dev/rps": "0"}},
					Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "frontend"}, Ports: []corev1.ServicePort{{Port: 80}}},
				}
				if _, err := c.kube.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				c.createRoute(t, userRoute(ns, map[string]any{"serviceName": "frontend", "servicePort": int64(80)}))
			},
			want: "route_ref: ApisixRoute %[1]s/podinfo has no http rule with a backend serviceName podinfo (the apex Service)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, _ := c.apisixNamespace(t)
			resource.ParallelTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					PreConfig: func() {
						c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
						if tc.setup != nil {
							tc.setup(t, ns)
						}
					},
					Config:      apisixConfig(ns, "podinfo:6.0.0", tc.route, apisixAnalysis("2s", 2, flaggerMetrics, "http://127.0.0.1:1/")),
					ExpectError: wrapped(fmt.Sprintf(tc.want, ns)),
				}},
			})
		})
	}
}

// TestAccApisix_planError: mesh_provider apisix without route_ref fails at plan time.
func TestAccApisix_planError(t *testing.T) {
	testAccStack(t)
	config := strings.Replace(apisixConfig("default", "podinfo:6.0.0", "podinfo", apisixAnalysis("2s", 2, flaggerMetrics, "http://127.0.0.1:1/")),
		`route_ref     = { api_version = "apisix.apache.org/v2", kind = "ApisixRoute", name = "podinfo" }`, "", 1)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      config,
			PlanOnly:    true,
			ExpectError: wrapped(`route_ref is required when mesh_provider = "apisix"`),
		}},
	})
}
