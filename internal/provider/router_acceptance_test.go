package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// routerCase describes one router for the scenarios every router's acceptance test runs:
// a promotion, a rollback that names the failed metric and, where the router can, an A/B
// test. Each runs in its own namespace; the user's objects are checked untouched at every
// step, and the simulator's invariant log is checked by the stack after each test.
type routerCase struct {
	// meshProvider is the release's mesh_provider.
	meshProvider string
	// serviceLines are extra lines inside the release's service object (a router's options).
	serviceLines string
	// releaseLines are extra top-level lines of the release (a router's top-level options,
	// such as ingress_ref).
	releaseLines string
	// metrics replaces the analyses' built-in metrics (flaggerMetrics) for a router without
	// built-in queries: the same names, with a query each.
	metrics string
	// route is the object the release generates and the simulator routes through.
	route schema.GroupVersionResource
	// routeName names it; "podinfo" when empty.
	routeName string
	// routeKind names it in failure messages ("TraefikService").
	routeKind string
	// weights reads the primary's and the canary's weights from it; with A/B testing, it
	// reports abState's marker while the matcher is in place.
	weights func(*unstructured.Unstructured) (primary, canary int64, err error)
	// userObjects creates the user's own objects (an IngressRoute, a root HTTPProxy) before
	// the first apply, and returns where they are, so that they can be checked untouched.
	userObjects func(t *testing.T, c *testCluster, ns string) []objectRef
	// abTesting runs the A/B scenario (abAnalysis's header match).
	abTesting bool
	// target replaces the Deployment podinfo for a router that owns its target kind.
	target *targetHooks
	// preamble is configuration before the release (a provider block with metric templates).
	preamble string
}

// targetHooks are a driver-owned target's ways to do what the scenarios do to a Deployment.
type targetHooks struct {
	// ref is the release's target_ref.
	ref string
	// create makes the target, set gives it a new template.
	create, set func(t *testing.T, c *testCluster, ns, image string, annotations map[string]string)
	// primaryRuns checks what the primary runs; idle that the canary serves nothing.
	primaryRuns func(c *testCluster, ns, image string) resource.TestCheckFunc
	idle        func(c *testCluster, ns string) resource.TestCheckFunc
}

func (rc routerCase) targetRef() string {
	if rc.target != nil {
		return rc.target.ref
	}
	return `{ name = "podinfo" }`
}

func (rc routerCase) createTarget(t *testing.T, c *testCluster, ns, image string) {
	if rc.target != nil {
		rc.target.create(t, c, ns, image, nil)
		return
	}
	c.createDeployment(t, podinfoDeployment(ns, image, nil))
}

func (rc routerCase) setTarget(t *testing.T, c *testCluster, ns, image string, annotations map[string]string) {
	if rc.target != nil {
		rc.target.set(t, c, ns, image, annotations)
		return
	}
	c.setTemplate(t, ns, "podinfo", image, annotations)
}

func (rc routerCase) primaryRuns(c *testCluster, ns, image string) resource.TestCheckFunc {
	if rc.target != nil {
		return rc.target.primaryRuns(c, ns, image)
	}
	return c.checkImage(ns, "podinfo-primary", image)
}

func (rc routerCase) canaryIdle(c *testCluster, ns string) resource.TestCheckFunc {
	if rc.target != nil {
		return rc.target.idle(c, ns)
	}
	return c.checkReplicas(ns, "podinfo", 0)
}

// objectRef locates one of the user's objects.
type objectRef struct {
	gvr  schema.GroupVersionResource
	name string
}

// config is a release of podinfo through the router, as in Flagger's tutorials.
func (rc routerCase) config(ns, image, analysis string) string {
	return rc.preamble + fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = %[4]q
  target_ref    = %[7]s
  triggers      = { image = %[2]q }
  progress_deadline_seconds = 60%[6]s
  service = {
    port        = 80
    target_port = "9898"%[5]s
  }
  analysis = {%[3]s
  }
}
`, ns, image, rc.analysis(analysis), rc.meshProvider, rc.serviceLines, rc.releaseLines, rc.targetRef())
}

// analysis is a scenario's analysis with the router's own metrics, if it has any.
func (rc routerCase) analysis(a string) string {
	if rc.metrics == "" {
		return a
	}
	return strings.Replace(a, flaggerMetrics, rc.metrics, 1)
}

func (rc routerCase) name() string {
	if rc.routeName == "" {
		return "podinfo"
	}
	return rc.routeName
}

// checkRoute compares the live split of the generated route object.
func (rc routerCase) checkRoute(c *testCluster, ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(rc.route).Namespace(ns).Get(context.Background(), rc.name(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, cw, err := rc.weights(u)
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("%s %s holds primary=%d canary=%d, want %d/%d", rc.routeKind, rc.name(), p, cw, primary, canary)
		}
		return nil
	})
}

// userState keeps the user's objects as stored after their creation.
type userState struct {
	refs   []objectRef
	stored map[objectRef][]byte
}

// create makes the user's objects and remembers them as stored.
func (rc routerCase) create(t *testing.T, c *testCluster, ns string, into *userState) {
	t.Helper()
	into.stored = map[objectRef][]byte{}
	if rc.userObjects == nil {
		return
	}
	into.refs = rc.userObjects(t, c, ns)
	for _, ref := range into.refs {
		u, err := c.dyn.Resource(ref.gvr).Namespace(ns).Get(context.Background(), ref.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		into.stored[ref], _ = json.Marshal(u.Object)
	}
}

// checkUntouched: each of the user's objects is the object created, byte for byte.
func (s *userState) checkUntouched(c *testCluster, ns string) resource.TestCheckFunc {
	return checkCluster(func() error {
		for _, ref := range s.refs {
			u, err := c.dyn.Resource(ref.gvr).Namespace(ns).Get(context.Background(), ref.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if now, _ := json.Marshal(u.Object); string(now) != string(s.stored[ref]) {
				return fmt.Errorf("the user's %s %s changed:\n%s\nwas\n%s", ref.gvr.Resource, ref.name, now, s.stored[ref])
			}
		}
		return nil
	})
}

// createUserObject creates one of the user's objects in ns and returns where it is. The object
// goes at cleanup before the namespace does: a user's route to the apex Service (an Ingress)
// would otherwise lead the simulator's load to pods the namespace's deletion is removing.
func (c *testCluster) createUserObject(t *testing.T, gvr schema.GroupVersionResource, ns string, u *unstructured.Unstructured) objectRef {
	t.Helper()
	u.SetNamespace(ns)
	if _, err := c.dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := u.GetName()
	t.Cleanup(func() {
		_ = c.dyn.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return objectRef{gvr: gvr, name: name}
}

// runRouterAcceptance promotes a new image in one namespace, rolls a failing one back in
// another and, where the router can, runs an A/B test in a third.
func runRouterAcceptance(t *testing.T, rc routerCase) {
	c := testAccStack(t)
	t.Run("promotion", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := httpRouteAnalysis("2s", 5)
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
					Config: rc.config(ns, "podinfo:6.0.0", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						rc.primaryRuns(c, ns, "podinfo:6.0.0"),
						rc.checkRoute(c, ns, 100, 0),
						user.checkUntouched(c, ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						rec = c.recordObjectWeights(t, rc.route, ns, rc.name(), rc.weights)
						rc.setTarget(t, c, ns, "podinfo:6.0.1", nil)
					},
					Config: rc.config(ns, "podinfo:6.0.1", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						rc.primaryRuns(c, ns, "podinfo:6.0.1"),
						checkRecorded(&rec, 10, 40, 80, 0),
						rc.checkRoute(c, ns, 100, 0),
						rc.canaryIdle(c, ns),
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
						rc.canaryIdle(c, ns),
						user.checkUntouched(c, ns),
					),
				},
				{
					// The promoted template again, so that the destroy may revert to it.
					PreConfig: func() { rc.setTarget(t, c, ns, "podinfo:6.0.0", nil) },
					Config:    rc.config(ns, "podinfo:6.0.0", analysis),
				},
			},
		})
	})
	if !rc.abTesting {
		return
	}
	t.Run("abtest", func(t *testing.T) {
		ns := c.namespace(t)
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
					Config:            rc.config(ns, "podinfo:6.0.0", abAnalysis),
					Check:             rc.checkRoute(c, ns, 100, 0),
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
						rc.canaryIdle(c, ns),
						user.checkUntouched(c, ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
			},
		})
	})
}
